"""The transactional outbox (issue #27): events written in the caller's transaction.

Every change the shop hears about (an order stored, paid, expired, cancelled; a refund due;
an activity sold out) writes its event with :func:`add_events` on the connection of the very
transaction that makes the change: the event exists exactly when the change does, whichever
process is killed at whichever moment. The dispatcher (``seckill/webhooks/``) reads them from
here.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from seckill.domain import errors
from seckill.domain.events import ORDER_REFUND_DUE, Event, order_event
from seckill.sql.order_events import ORDER_COLUMNS, order_data
from seckill.sql.schema import activities, orders, outbox, webhook_deliveries

DONE = ("delivered", "failed")  # a delivery's final statuses


def add_events(conn: sa.Connection, events: Sequence[Event]) -> None:
    """Write ``events`` on ``conn`` (inside the caller's transaction), in order; an event
    whose ``dedupe`` key is already in the outbox is not written again."""
    if not events:
        return
    mark = _PLACEHOLDERS.get(conn.dialect.name)
    if mark is not None and all(e.dedupe is None for e in events):
        # A worker's batch: one prepared INSERT run for every event, straight to the driver
        # (SQLAlchemy's per-row parameter processing was a fifth of the outbox's cost).
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
    with _transaction(db) as conn:
        found = conn.execute(
            sa.select(*ORDER_COLUMNS, activities.c.rehearsal)
            .select_from(orders.outerjoin(activities, activities.c.id == orders.c.activity_id))
            .where(orders.c.order_id == order_id)).first()
        if found is None:
            raise errors.UnknownOrder(order_id=order_id[:120])
        if found.rehearsal:
            return False
        data = {**order_data(found._mapping), "payment_ref": payment_ref}
        if amount is not None:  # the provider's; "amount" stays the order's own (a packet's)
            data["payment_amount"] = amount
        event = order_event(ORDER_REFUND_DUE, data, at_ms,
                            dedupe=f"refund_due:{order_id}:{payment_ref}")
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
    """``count`` webhook-ids (:func:`_event_id`), their randomness drawn in one call (a
    worker's batch writes hundreds)."""
    stamp = f"msg_{time.time_ns() // 1_000_000:012x}"
    noise = secrets.token_hex(10 * count)
    return [stamp + noise[i:i + 20] for i in range(0, 20 * count, 20)]


def _row(event: Event) -> dict[str, Any]:
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
