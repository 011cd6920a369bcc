"""The database's sealed secrets as a whole: which columns hold them, the check that every
one opens with the environment's keys, and the sweep that seals each under the current key.

The columns: a draw's seed, a person-limited activity's salt and a red-envelope split's seed
(``seckill_activities``), each webhook endpoint's signing secret. The sweep
(:func:`reseal`) is what ``seckill secrets rotate`` runs, and ``seckill up`` at start: every
value written before sealing, or sealed by an older key, is sealed again, one row per
transaction, written only if the row still holds what was read (a compare-and-set). So it
runs beside a live gateway (a reader sees the old value, which an older key still opens, or
the new one), a crash loses at most the row in hand, and a second run finds nothing to do.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from seckill.sql.schema import activities, webhook_endpoints
from seckill.sql.sealing import DataKeyError, Keyring, sealed_by

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SealedColumn:
    """A column of sealed secrets; ``legacy``: an older plain column its values move from
    (the packets' integer seed)."""

    table: sa.Table
    name: str
    legacy: str | None = None

    def context(self, row_id: str) -> str:
        """What a value of this column in row ``row_id`` is sealed for."""
        return f"{self.table.name}.{self.name}:{row_id}"


DRAW_SEED = SealedColumn(activities, "draw_seed")
PERSON_SALT = SealedColumn(activities, "person_salt")
PACKET_SEED = SealedColumn(activities, "sealed_seed", legacy="seed")
WEBHOOK_SECRET = SealedColumn(webhook_endpoints, "secret")
SEALED = (DRAW_SEED, PERSON_SALT, PACKET_SEED, WEBHOOK_SECRET)
PLAIN = "plain"  # census's name for the values written before sealing


@dataclasses.dataclass
class Resealed:
    """What a sweep did: values sealed (again), and those already under the current key."""

    sealed: int = 0
    current: int = 0


def _values(conn: sa.Connection, column: SealedColumn) -> Iterator[Any]:
    """(row id, the stored value, the legacy value) of every row that holds one."""
    table = column.table
    value = table.c[column.name]
    legacy = table.c[column.legacy] if column.legacy else sa.null()
    where = value.isnot(None) if column.legacy is None else sa.or_(
        value.isnot(None), table.c[column.legacy].isnot(None))
    yield from conn.execute(
        sa.select(table.c.id, value, legacy).where(where).order_by(table.c.id))


def _has(bind: sa.Engine | sa.Connection, table: sa.Table) -> bool:
    # On the caller's connection when it has one: the dispatcher's engine begins every
    # transaction as a writer (BEGIN IMMEDIATE), so a second connection would wait for it.
    return sa.inspect(bind).has_table(table.name)


def census(engine: sa.Engine) -> dict[str, int]:
    """How many stored secrets each key sealed (by key id; ``PLAIN``: written before sealing).
    Reads only, and decrypts nothing."""
    counts: dict[str, int] = {}
    with engine.connect() as conn:
        for column in SEALED:
            if not _has(conn, column.table):
                continue
            for _row_id, stored, _old in _values(conn, column):
                kid = PLAIN if stored is None else (sealed_by(stored) or PLAIN)
                counts[kid] = counts.get(kid, 0) + 1
    return counts


def unopened(engine: sa.Engine, keys: Keyring) -> dict[str, int]:
    """The ids of the keys that sealed values this keyring cannot open, with their counts."""
    return {kid: count for kid, count in census(engine).items()
            if kid != PLAIN and kid not in keys.ids}


def check(engine: sa.Engine, keys: Keyring) -> None:
    """Refuse (DataKeyError) when the database holds a secret the environment's keys do not
    open: the message names the key ids and what to set, never a key. A process whose
    environment names no key at all is not checked: it is refused when it opens a secret."""
    if not keys.configured:
        return
    missing = unopened(engine, keys)
    if not missing:
        return
    listed = ", ".join(f"{kid} ({count} value{'s' * (count != 1)})"
                       for kid, count in sorted(missing.items()))
    raise DataKeyError(
        f"the database holds secrets sealed with key(s) {listed} that the environment does not "
        f"hold (it seals with {keys.current} from {keys.source}). Set SECKILL_DATA_KEY (or "
        "SECKILL_SECRET_KEY) as when they were written, or add the old key to "
        "SECKILL_DATA_KEY_PREVIOUS; see docs/deployment.md, 'Secrets at rest'")


def reseal(engine: sa.Engine, keys: Keyring) -> Resealed:
    """Seal every stored secret under the current key (see the module's docstring); what was
    done. DataKeyError, before anything is written, if a value does not open."""
    check(engine, keys)
    done = Resealed()
    for column in SEALED:
        if not _has(engine, column.table):
            continue
        with engine.connect() as conn:
            found = list(_values(conn, column))
        for row_id, stored, old in found:
            if stored is not None and not keys.stale(stored):
                done.current += 1
                continue
            if _reseal_row(engine, keys, column, row_id, stored, old):
                done.sealed += 1
    if done.sealed:
        _checkpoint(engine)
        log.info("sealed %d stored secret(s) under key %s", done.sealed, keys.current)
    return done


def _checkpoint(engine: sa.Engine) -> None:
    """SQLite: copy the sealed rows' pages into the file and empty the WAL, so that the
    replaced values (zeroed where they lay: secure_delete) are not left in either. Best
    effort: a reader in a long transaction holds the WAL; the next checkpoint empties it.
    (PostgreSQL keeps dead row versions until VACUUM: docs/deployment.md.)"""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _reseal_row(engine: sa.Engine, keys: Keyring, column: SealedColumn, row_id: str,
                stored: str | None, old: object) -> bool:
    """Seal one row's value again in its own transaction, only if it still holds ``stored``
    (and ``old``); whether it was written."""
    table, context = column.table, column.context(row_id)
    value = table.c[column.name]
    if stored is not None:
        plain = keys.open(stored, context)
        where = value == stored
    else:  # only the legacy column holds it
        plain, where = str(old), value.is_(None)
    values: dict[str, object] = {column.name: keys.seal(plain, context)}
    if column.legacy is not None:
        values[column.legacy] = None
        legacy = table.c[column.legacy]
        where = where & (legacy.is_(None) if old is None else legacy == old)
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":  # the replaced value's bytes overwritten with zeros
            conn.exec_driver_sql("PRAGMA secure_delete = ON")
        written = conn.execute(table.update().where(table.c.id == row_id, where).values(values))
    return bool(written.rowcount)


__all__ = ["PLAIN", "SEALED", "DataKeyError", "Resealed", "SealedColumn", "census", "check",
           "reseal", "unopened"]
