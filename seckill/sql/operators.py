"""Named operators in the database: their names, roles and token hashes, and the changes every
gateway process follows.

Why the database: it is the one store every gateway process and the ``seckill`` command share,
and what survives a Redis that lost its data; a revoked operator must stay revoked. A revoked
operator stays as a row (``revoked_ms`` set, its hash kept out of every process's copy): the
audit can still name them, and the name is never given to someone else. Every change is
numbered, and a process follows the book by those numbers (``seckill.sql.changes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from seckill.domain.clock import now_ms
from seckill.domain.operators import OperatorExists, OperatorRecord, UnknownOperator
from seckill.sql.changes import ChangedBook, counter_table

metadata = sa.MetaData()

ACTOR_LENGTH = 80  # who made or revoked it: an operator's name, or the command's "cli:<login>"

operators = sa.Table(
    "seckill_operators",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("created_by", sa.String(ACTOR_LENGTH), nullable=False),
    sa.Column("revoked_ms", sa.BigInteger, nullable=True),
    sa.Column("revoked_by", sa.String(ACTOR_LENGTH), nullable=True),
    sa.Column("changed", sa.BigInteger, nullable=False),
    sa.CheckConstraint("role IN ('viewer', 'operator', 'admin')",
                       name="ck_seckill_operators_role"),
)
sa.Index("ix_seckill_operators_changed", operators.c.changed)

changes = counter_table("seckill_operator_changes", metadata)

# A change as a follower reads it: (token hash, name, role, in force, changed).
Change = tuple[str, str, str, bool, int]


def _record(row: Any) -> OperatorRecord:
    return OperatorRecord(name=row.name, role=row.role, created_ms=int(row.created_ms),
                          created_by=row.created_by,
                          revoked_ms=None if row.revoked_ms is None else int(row.revoked_ms),
                          revoked_by=row.revoked_by)


class OperatorBook(ChangedBook):
    """The named operators in the database."""

    metadata = metadata
    counter = changes

    def add(self, name: str, role: str, hashed: str, by: str) -> OperatorRecord:
        """Store a new operator with their token's hash; OperatorExists if the name was ever
        given (a revoked operator's too)."""
        self.ready()
        with self.engine.begin() as conn:
            change = self._next_change(conn)  # first: a concurrent add of the name waits
            if conn.execute(sa.select(operators.c.name)
                            .where(operators.c.name == name)).first() is not None:
                raise OperatorExists(f"the name {name!r} is taken (an operator in force, or a "
                                     "revoked one: names are never given again)", name=name)
            conn.execute(operators.insert().values(
                name=name, role=role, token_hash=hashed, created_ms=now_ms(),
                created_by=by[:ACTOR_LENGTH], changed=change))
            stored = conn.execute(sa.select(operators)
                                  .where(operators.c.name == name)).one()
        return _record(stored)

    def revoke(self, name: str, by: str) -> OperatorRecord:
        """Revoke an operator in force; UnknownOperator if there is none of that name."""
        self.ready()
        target = (operators.c.name == name) & operators.c.revoked_ms.is_(None)
        with self.engine.begin() as conn:
            change = self._next_change(conn)  # first: a concurrent revoke waits, then finds none
            if conn.execute(sa.select(operators.c.name).where(target)).first() is None:
                raise UnknownOperator(f"no operator in force is named {name!r}", name=name)
            conn.execute(operators.update().where(target).values(
                revoked_ms=now_ms(), revoked_by=by[:ACTOR_LENGTH], changed=change))
            stored = conn.execute(sa.select(operators)
                                  .where(operators.c.name == name)).one()
        return _record(stored)

    def listed(self) -> list[OperatorRecord]:
        """Every operator ever made, revoked ones too, by name."""
        if not self.ready():
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(operators).order_by(operators.c.name)).all()
        return [_record(row) for row in rows]

    def changes_after(self, seen: int) -> Sequence[Change]:
        """Every operator changed after change number ``seen``, in the order of the changes
        (one indexed query; nothing while nothing changed)."""
        if not self.ready():
            return ()
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(operators.c.token_hash, operators.c.name, operators.c.role,
                          operators.c.revoked_ms, operators.c.changed)
                .where(operators.c.changed > seen).order_by(operators.c.changed)).all()
        return [(r.token_hash, r.name, r.role, r.revoked_ms is None, int(r.changed))
                for r in rows]
