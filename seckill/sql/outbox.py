"""The transactional outbox (issue #27): events written in the caller's transaction.

Every change the shop hears about (an order stored, paid, expired, cancelled; a refund due;
an activity sold out) writes its event with :func:`add_events` on the connection of the very
transaction that makes the change: the event exists exactly when the change does, whichever
process is killed at whichever moment. The dispatcher (``seckill/webhooks/``) reads them from
here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from seckill.domain.events import Event, new_event_id
from seckill.sql.schema import outbox


def add_events(conn: sa.Connection, events: Sequence[Event]) -> None:
    """Write ``events`` on ``conn`` (inside the caller's transaction), in order; an event
    whose ``dedupe`` key is already in the outbox is not written again."""
    if not events:
        return
    rows = [{"event_id": new_event_id(), "type": e.type, "subject": e.subject,
             "activity_id": e.activity_id, "body": e.body().decode(), "created_ms": e.at_ms,
             "fanned": None, "dedupe": e.dedupe} for e in events]
    if all(e.dedupe is None for e in events):
        conn.execute(outbox.insert(), rows)
        return
    conn.execute(_insert_ignoring_duplicates(conn), rows)


def _insert_ignoring_duplicates(conn: sa.Connection) -> Any:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(outbox).on_conflict_do_nothing(index_elements=["dedupe"])
    if dialect == "sqlite":
        return sqlite.insert(outbox).on_conflict_do_nothing(index_elements=["dedupe"])
    return outbox.insert().prefix_with("IGNORE")  # MySQL / MariaDB
