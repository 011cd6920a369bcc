"""The transactional outbox: events written in the caller's transaction.

Every change the shop hears about (an order stored, paid, expired, cancelled; a refund due;
an activity sold out) writes its event with :func:`add_events` on the connection of the very
transaction that makes the change: the event exists exactly when the change does, whichever
process is killed at whichever moment. The dispatcher (``seckill/webhooks/``) reads them from
here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from seckill.domain import errors
from seckill.domain.events import (
    ORDER_PAYMENT_MISMATCH,
    ORDER_REFUND_DUE,
    Event,
    order_event,
    order_subject,
)
from seckill.sql.order_events import (
    ORDER_COLUMNS,
    OrderChange,
    data_of_values,
    order_data,
    order_values,
)
from seckill.sql.schema import activities, orders, outbox, webhook_deliveries

DONE = ("delivered", "failed")  # a delivery's final statuses
BATCH = "outbox.batch"  # the type of a worker batch's row (never an event's own type)


@dataclasses.dataclass(frozen=True, slots=True)
class EventRow:
    """One event as the outbox holds it: its own row, or a part of a batch's row not fanned
    out yet (:func:`add_events`); the same values either way."""

    seq: int
    event_id: str
    type: str
    subject: str
    activity_id: str
    body: str
    created_ms: int


def event_rows(conn: sa.Connection) -> list[EventRow]:
    """Every event in the outbox, in ``seq`` order, the parts of a batch's row each on its
    own (for the tests and the operator's checks: a scan of the whole table)."""
    found: list[EventRow] = []
    for r in conn.execute(sa.select(outbox.c.seq, outbox.c.event_id, outbox.c.type,
                                    outbox.c.subject, outbox.c.activity_id, outbox.c.body,
                                    outbox.c.created_ms)):
        if r.type == BATCH:
            found.extend(batch_parts(int(r.seq), r.body))
        else:
            found.append(EventRow(int(r.seq), r.event_id, r.type, r.subject, r.activity_id,
                                  r.body, int(r.created_ms)))
    return sorted(found, key=lambda e: e.seq)


def batch_parts(seq: int, body: str) -> list[EventRow]:
    """The events of the batch's row ``seq`` (its ``body``: :func:`_batch_body`'s, or a JSON
    array of ``[seq, webhook-id, type, subject, activity, created_ms, data]`` as the previous
    version wrote it, read as before), each one's body made by :meth:`Event.body`, as it is
    for an event's own row: the same bytes whenever it is made (orjson keeps the data's keys
    in order; its values are strings, integers, lists)."""
    found = orjson.loads(body)
    if isinstance(found, list):  # the previous layout
        first = seq - len(found) + 1
        return [EventRow(first + k if at_seq is None else at_seq, event_id, kind, subject,
                         aid, Event(kind, subject, aid, data, at).body().decode(), at)
                for k, (at_seq, event_id, kind, subject, aid, at, data) in enumerate(found)]
    if found.get("v") != _LAYOUT:
        raise ValueError(f"outbox batch row {seq}: unknown layout {found.get('v')!r}")
    parts, stamp, noise, base = found["parts"], found["ids"], found["noise"], found["at"]
    kinds, acts = found["kinds"], found["acts"]
    seqs = found.get("seqs") or range(seq - len(parts) + 1, seq + 1)
    rows = []
    for k, (part, event_id) in enumerate(zip(parts, _ids_of(stamp, noise), strict=True)):
        if isinstance(part, dict):
            event = Event(part["type"], part["subject"], part["activity"], part["data"],
                          part["at"])
        else:
            aid = acts[part[2]]
            event = Event(kinds[part[0]], order_subject(part[3]), aid,
                          data_of_values(aid, part[3:]), base + part[1])
        rows.append(EventRow(seqs[k], event_id, event.type,
                             event.subject, event.activity_id, event.body().decode(),
                             event.at_ms))
    return rows


def add_events(conn: sa.Connection, events: Sequence[Event | OrderChange], *,
               batch: bool = False) -> None:
    """Write ``events`` on ``conn`` (inside the caller's transaction), in order; an event
    whose ``dedupe`` key is already in the outbox is not written again. With ``batch`` (the
    orders worker's), several events without a dedupe key go in one row (:func:`_add_batch`)."""
    if not events:
        return
    mark = _PLACEHOLDERS.get(conn.dialect.name)
    if (batch and mark is not None and len(events) > 1
            and all(e.dedupe is None for e in events)):
        _add_batch(conn, mark, events)
        return
    if mark is not None and all(e.dedupe is None for e in events):
        # Several events, a row each: one prepared INSERT run for every event, straight to
        # the driver (SQLAlchemy's per-row parameter processing is slow).
        conn.exec_driver_sql(_PLAIN_INSERT.format(marks=", ".join([mark] * len(_COLUMNS))),
                             [(event_id, e.type, e.subject, e.activity_id, e.body().decode(),
                               e.at_ms, None, None)
                              for event_id, e in zip(_event_ids(len(events)), events,
                                                     strict=True)])
        return
    rows = [_row(e) for e in events]
    if all(e.dedupe is None for e in events):
        conn.execute(outbox.insert(), rows)
        return
    conn.execute(_insert_ignoring_duplicates(conn), rows)


def _add_batch(conn: sa.Connection, mark: str, events: Sequence[Event | OrderChange]) -> None:
    """A worker's batch: one row of type :data:`BATCH` holding every event (one row, one
    index entry, one JSON encoding for hundreds of events: a row and a body per event were
    about a third of what the outbox cost the worker per order; :func:`_batch_body`). Each
    event has its webhook-id and its ``seq``, reserved here, in the batch's transaction, in
    the events' order; the row itself takes the last seq. The fan-out
    (``seckill.sql.deliveries``) replaces the row with the events' own rows at their seqs:
    an event written after the batch committed has a higher seq than every one of them,
    whenever either is fanned out, so one order's events keep their order.

    SQLite (one writer, a rowid table: a new row takes the largest seq + 1): the row takes
    the largest seq + the number of events, in the INSERT itself, and its events the seqs
    just below (not in the body: :func:`batch_parts`). PostgreSQL: the outbox sequence's
    next values, in the body; the row takes the last."""
    count = len(events)
    stamp, noise = _event_id_parts(count)
    marks = [mark] * len(_COLUMNS)
    seqs: list[int] | None = None
    if conn.dialect.name == "postgresql":
        seqs = sorted(int(r[0]) for r in conn.execute(
            sa.text("SELECT nextval(pg_get_serial_sequence(:table, 'seq')) "
                    "FROM generate_series(1, :count)"), {"table": outbox.name, "count": count}))
        values = [seqs[-1]]
        top = mark
    else:
        values = [count]
        top = f"(SELECT coalesce(max(seq), 0) FROM {outbox.name}) + {mark}"
    base = min(e.at_ms for e in events)
    conn.exec_driver_sql(
        f"INSERT INTO {outbox.name} (seq, {', '.join(_COLUMNS)}) "
        f"VALUES ({top}, {', '.join(marks)})",
        (*values, stamp + noise[:20], BATCH, BATCH, events[0].activity_id,
         _batch_body(events, stamp, noise, base, seqs), base, None, None))


_LAYOUT = 2  # a batch row's body's "v" (the previous version's: a JSON array)


def _batch_body(events: Sequence[Event | OrderChange], stamp: str, noise: str, base: int,
                seqs: list[int] | None) -> str:
    """A batch row's body: ``{"v": 2, "ids", "noise", "at", "kinds", "acts", "parts"}`` and,
    on PostgreSQL, ``"seqs"`` (the events' own; SQLite's are the ones just below the row's).
    The k-th event's webhook-id is ``ids`` and ``noise[20k:20k+20]``. An order's event
    (:class:`OrderChange`, all of a worker's) is ``[kind, at - base, activity, *values]``:
    the indexes of its type in ``kinds`` and of its activity in ``acts``, and its row's
    :func:`order_values` (from which :func:`batch_parts` makes its data, the same as
    :func:`order_data` does): no key repeated per order, no dict made per order here. Any
    other event is ``{"type", "subject", "activity", "at", "data"}``."""
    kinds: dict[str, int] = {}
    acts: dict[str, int] = {}
    parts: list[Any] = []
    add = parts.append
    for e in events:  # hundreds a batch: kept lean
        if type(e) is OrderChange:
            kind = kinds.setdefault(e.type, len(kinds))
            add([kind, e.at_ms - base, acts.setdefault(e.activity_id, len(acts)),
                 *order_values(e.row)])
        else:
            add({"type": e.type, "subject": e.subject, "activity": e.activity_id,
                 "at": e.at_ms, "data": e.data})
    found: dict[str, Any] = {"v": _LAYOUT, "ids": stamp, "noise": noise, "at": base,
                             "kinds": list(kinds), "acts": list(acts), "parts": parts}
    if seqs is not None:
        found["seqs"] = seqs
    return orjson.dumps(found).decode()


_COLUMNS = ("event_id", "type", "subject", "activity_id", "body", "created_ms", "fanned",
            "dedupe")
_PLAIN_INSERT = f"INSERT INTO {outbox.name} ({', '.join(_COLUMNS)}) VALUES ({{marks}})"
_PLACEHOLDERS = {"sqlite": "?", "postgresql": "%s"}  # the drivers' parameter styles


def record_refund_due(db: sa.Engine | sa.Connection, order_id: str, payment_ref: str,
                      amount: int | None, at_ms: int) -> bool:
    """Write the order.refund_due of a payment the order could not take (after its hold
    expired, or a second payment of a paid order): once per (order, ``payment_ref``), however
    often and by whomever it is called. True if written now; False if it was already there or
    the order's activity is a rehearsal. Its data is the order as the database holds it, with
    ``payment_ref`` and (when given) the payment's amount as ``payment_amount``. Given an
    Engine, in a transaction of its own; given a Connection, in the caller's. UnknownOrder if
    no such order."""
    extra: dict[str, Any] = {"payment_ref": payment_ref}
    if amount is not None:  # the provider's; "amount" stays the order's own (a packet's)
        extra["payment_amount"] = amount
    return _record_payment_event(db, ORDER_REFUND_DUE, order_id, extra, at_ms,
                                 f"refund_due:{order_id}:{payment_ref}")


def record_payment_mismatch(db: sa.Engine | sa.Connection, order_id: str, payment_ref: str,
                            paid: tuple[int | None, str | None],
                            expected: tuple[int | None, str | None], at_ms: int) -> bool:
    """Write the order.payment_mismatch of a payment whose amount or currency (``paid``)
    differs from the order's (``expected``): once per (order, ``payment_ref``), as
    :func:`record_refund_due`, with ``payment_amount``/``payment_currency`` and
    ``expected_amount``/``expected_currency`` (each when known). UnknownOrder if no such
    order."""
    extra: dict[str, Any] = {"payment_ref": payment_ref}
    for name, value in zip(("payment_amount", "payment_currency", "expected_amount",
                            "expected_currency"), (*paid, *expected), strict=True):
        if value is not None:
            extra[name] = value
    return _record_payment_event(db, ORDER_PAYMENT_MISMATCH, order_id, extra, at_ms,
                                 f"payment_mismatch:{order_id}:{payment_ref}")


def _record_payment_event(db: sa.Engine | sa.Connection, kind: str, order_id: str,
                          extra: dict[str, Any], at_ms: int, dedupe: str) -> bool:
    with _transaction(db) as conn:
        found = conn.execute(
            sa.select(*ORDER_COLUMNS, activities.c.rehearsal)
            .select_from(orders.outerjoin(activities, activities.c.id == orders.c.activity_id))
            .where(orders.c.order_id == order_id)).first()
        if found is None:
            raise errors.UnknownOrder(order_id=order_id[:120])
        if found.rehearsal:
            return False
        event = order_event(kind, {**order_data(found._mapping), **extra}, at_ms,
                            dedupe=dedupe)
        done = conn.execute(_insert_ignoring_duplicates(conn).returning(outbox.c.seq),
                            _row(event))
        return done.first() is not None


def prune(db: sa.Engine | sa.Connection, before_ms: int) -> int:
    """Retention (``SECKILL_WEBHOOK_RETENTION``): delete the deliveries done (delivered or
    failed) before ``before_ms``, then the events created before it that are fanned out and
    have no delivery left (pending or done since); returns the number of events deleted."""
    with _transaction(db) as conn:
        conn.execute(webhook_deliveries.delete().where(
            webhook_deliveries.c.status.in_(DONE), webhook_deliveries.c.done_ms < before_ms))
        left = sa.select(webhook_deliveries.c.seq).where(
            webhook_deliveries.c.seq == outbox.c.seq).exists()
        gone = conn.execute(outbox.delete().where(
            outbox.c.created_ms < before_ms, outbox.c.fanned.is_(True), ~left))
        return int(gone.rowcount)


@contextlib.contextmanager
def _transaction(db: sa.Engine | sa.Connection) -> Iterator[sa.Connection]:
    """A transaction of its own on an Engine; the caller's on a Connection."""
    if isinstance(db, sa.Connection):
        yield db
        return
    with db.begin() as conn:
        yield conn


def _event_id() -> str:
    """A ``webhook-id``: ``msg_``, the time (ms, 12 hex digits) and 80 random bits: unique
    without an index to check it, and sorted as the events were written."""
    return _event_ids(1)[0]


def _event_ids(count: int) -> list[str]:
    """``count`` webhook-ids (:func:`_event_id`), their randomness drawn in one call."""
    return _ids_of(*_event_id_parts(count))


def _event_id_parts(count: int) -> tuple[str, str]:
    """What ``count`` webhook-ids are made of: the ``msg_`` and time they share, and their
    random parts (20 hex digits each) in one string (a worker's batch keeps them so)."""
    return f"msg_{time.time_ns() // 1_000_000:012x}", secrets.token_hex(10 * count)


def _ids_of(stamp: str, noise: str) -> list[str]:
    """The webhook-ids :func:`_event_id_parts` makes: the shared ``stamp`` and each 20 hex
    digits of ``noise`` (a batch row's body keeps the two, :func:`batch_parts` reads them)."""
    return [stamp + noise[i:i + 20] for i in range(0, len(noise), 20)]


def _row(event: Event | OrderChange) -> dict[str, Any]:
    return {"event_id": _event_id(), "type": event.type, "subject": event.subject,
            "activity_id": event.activity_id, "body": event.body().decode(),
            "created_ms": event.at_ms, "fanned": None, "dedupe": event.dedupe}


def _insert_ignoring_duplicates(conn: sa.Connection) -> Any:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(outbox).on_conflict_do_nothing(
            index_elements=["dedupe"], index_where=outbox.c.dedupe.isnot(None))
    if dialect == "sqlite":
        return sqlite.insert(outbox).on_conflict_do_nothing(
            index_elements=["dedupe"], index_where=outbox.c.dedupe.isnot(None))
    return outbox.insert().prefix_with("IGNORE")  # MySQL / MariaDB
