"""The webhooks' deliveries: the dispatcher's reads and writes.

* :func:`fan_out`: outbox rows not yet fanned out, in ``seq`` order, become one pending
  delivery per endpoint subscribed to their type (one transaction; on PostgreSQL under an
  advisory lock, so that two dispatchers never fan out side by side and out of order).
* :func:`claim`: an endpoint's due deliveries, each the earliest pending one of its subject
  to that endpoint (a later event waits while an earlier one is pending), leased to one
  dispatcher until ``lease_ms`` (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: one writer).
* :func:`record` / :func:`release`: the attempts' outcomes, many rows in one statement, only
  where the lease is still the caller's; the endpoint's counters move with them.
* :func:`webhook_numbers`: what ``/metrics`` shows (counters, backlog, oldest undelivered).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from seckill.domain.events import matches
from seckill.metrics import WebhookNumbers
from seckill.sql.outbox import BATCH, batch_parts
from seckill.sql.schema import outbox, webhook_deliveries, webhook_endpoints

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
FAN_OUT_LOCK = 0x5EC_27_0F  # PostgreSQL advisory lock key of the fan-out
OUTCOMES = ("delivered", "retried", "failed")  # the endpoint's counters, one per attempt

d = webhook_deliveries


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An endpoint as the dispatcher needs it; ``secret`` as stored (sealed: the dispatcher
    opens it, seckill/sql/sealing.py)."""

    id: str
    url: str
    events: tuple[str, ...]
    secret: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Claimed:
    """A delivery leased to this dispatcher: what to send, and its attempts so far."""

    endpoint_id: str
    seq: int
    event_id: str
    body: str
    attempts: int
    first_ms: int | None
    lease_until: int


@dataclasses.dataclass(frozen=True)
class Outcome:
    """An attempt's result as stored: the row's new ``status`` (pending: retried at
    ``next_ms``), and which counter it moves (``counted``: one of :data:`OUTCOMES`)."""

    endpoint_id: str
    seq: int
    status: str
    attempts: int
    next_ms: int
    first_ms: int
    at_ms: int
    code: int | None
    error: str | None
    counted: str

    @property
    def done_ms(self) -> int | None:
        """When the delivery ended (delivered or failed), or None while pending."""
        return None if self.status == PENDING else self.at_ms


def endpoints(bind: sa.Engine | sa.Connection, *, share: bool = False) -> list[Endpoint]:
    """Every endpoint; with ``share``, their rows locked against removal until the caller's
    transaction ends (PostgreSQL ``FOR SHARE``)."""
    e = webhook_endpoints
    query = sa.select(e.c.id, e.c.url, e.c.events, e.c.secret).order_by(e.c.id)
    if share:
        query = query.with_for_update(read=True)
    with _connection(bind) as conn:
        return [Endpoint(i, u, tuple(json.loads(ev)), s) for i, u, ev, s in conn.execute(query)]


def fan_out(conn: sa.Connection, now_ms: int, limit: int) -> tuple[int, list[Endpoint]]:
    """Make the deliveries of about ``limit`` events not fanned out yet (in ``seq`` order; a
    worker batch's row is expanded into its events' rows, whole), due now, one per endpoint
    subscribed to the event's type, and mark the events fanned;
    the number of events and the endpoints (read after the events: an endpoint added before
    an event was written gets it). Inside the caller's transaction."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(FAN_OUT_LOCK)))
    found = conn.execute(sa.select(outbox.c.seq, outbox.c.type, outbox.c.subject)
                         .where(outbox.c.fanned.is_(None))
                         .order_by(outbox.c.seq).limit(limit)).all()
    # A prefix of them, in seq order, of about ``limit`` events: a worker batch's row holds
    # hundreds, each expanded into its events' own rows (_expand).
    plain: list[int] = []
    events: list[tuple[int, str, str]] = []
    for seq, kind, subject in found:
        if len(events) >= limit:
            break
        if kind == BATCH:
            events.extend(_expand(conn, int(seq)))
        else:
            plain.append(int(seq))
            events.append((int(seq), kind, subject))
    # Shared locks: an endpoint removed meanwhile (its row locked, its deliveries deleted, by
    # seckill.sql.webhooks) waits for this transaction, then takes the deliveries made here
    # with it; one removed before is not read. Without them, PostgreSQL could leave pending
    # deliveries of an endpoint that no longer exists. (SQLite has one writer at a time.)
    targets = endpoints(conn, share=conn.dialect.name == "postgresql")
    if not events:
        return 0, targets
    made = [{"endpoint_id": t.id, "seq": seq, "subject": subject, "status": PENDING,
             "attempts": 0, "next_ms": now_ms}
            for seq, kind, subject in events for t in targets if matches(list(t.events), kind)]
    if made:
        # A replay may have made one already (the events of an endpoint since a moment).
        conn.execute(_insert_missing(conn), made)
    if plain:
        conn.execute(sa.update(outbox).where(outbox.c.seq.in_(plain)).values(fanned=True))
    return len(events), targets


def _expand(conn: sa.Connection, seq: int) -> list[tuple[int, str, str]]:
    """Replace the batch's row ``seq`` by its events' own rows, fanned out, at the seqs
    reserved for them when the batch was written (seckill.sql.outbox); the events' (seq,
    type, subject). Read and replaced in one transaction (PostgreSQL: under the fan-out's
    lock; SQLite: a second writer that read the row before fails to write): once."""
    body = conn.execute(sa.select(outbox.c.body).where(outbox.c.seq == seq,
                                                       outbox.c.type == BATCH)).scalar()
    if body is None:
        return []
    parts = batch_parts(seq, body)
    conn.execute(outbox.delete().where(outbox.c.seq == seq, outbox.c.type == BATCH))
    conn.execute(outbox.insert(), [
        {"seq": e.seq, "event_id": e.event_id, "type": e.type, "subject": e.subject,
         "activity_id": e.activity_id, "body": e.body, "created_ms": e.created_ms,
         "fanned": True, "dedupe": None} for e in parts])
    return [(e.seq, e.type, e.subject) for e in parts]


def _insert_missing(conn: sa.Connection) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(d).on_conflict_do_nothing()
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(d).on_conflict_do_nothing()
    return d.insert().prefix_with("IGNORE")


def claim(conn: sa.Connection, endpoint_id: str, owner: str, now_ms: int, lease_ms: int,
          limit: int) -> list[Claimed]:
    """Lease up to ``limit`` of the endpoint's eligible due deliveries to ``owner`` until
    ``now_ms + lease_ms``: pending, due, not leased (or the lease lapsed), and no earlier
    pending delivery of the same subject to this endpoint. Inside the caller's transaction."""
    if limit <= 0:
        return []
    earlier = d.alias("earlier")
    free = sa.or_(d.c.lease_ms.is_(None), d.c.lease_ms <= now_ms)
    blocked = sa.exists().where(earlier.c.endpoint_id == d.c.endpoint_id,
                                earlier.c.subject == d.c.subject,
                                earlier.c.status == PENDING, earlier.c.seq < d.c.seq)
    pick = (sa.select(d.c.seq)
            .where(d.c.endpoint_id == endpoint_id, d.c.status == PENDING,
                   d.c.next_ms <= now_ms, free, ~blocked)
            .order_by(d.c.next_ms, d.c.seq).limit(limit)
            .with_for_update(skip_locked=True, of=d))
    until = now_ms + lease_ms
    leased = conn.execute(
        sa.update(d).where(d.c.endpoint_id == endpoint_id, d.c.seq.in_(pick),
                           d.c.status == PENDING, free)
        .values(lease_owner=owner, lease_ms=until)
        .returning(d.c.seq, d.c.attempts, d.c.first_ms)).all()
    if not leased:
        return []
    bodies = {seq: (event_id, body) for seq, event_id, body in conn.execute(
        sa.select(outbox.c.seq, outbox.c.event_id, outbox.c.body)
        .where(outbox.c.seq.in_([row[0] for row in leased])))}
    gone = [row[0] for row in leased if row[0] not in bodies]
    if gone:  # its event was pruned (it cannot be, while pending): nothing left to send
        conn.execute(sa.update(d).where(d.c.endpoint_id == endpoint_id, d.c.seq.in_(gone))
                     .values(status=FAILED, done_ms=now_ms, last_error="event pruned",
                             lease_owner=None, lease_ms=None))
    return sorted((Claimed(endpoint_id, seq, *bodies[seq], attempts, first_ms, until)
                   for seq, attempts, first_ms in leased if seq in bodies),
                  key=lambda c: c.seq)


def record(conn: sa.Connection, owner: str, outcomes: Sequence[Outcome]) -> None:
    """Store attempts' outcomes (where the lease is still ``owner``'s: a replay, or another
    dispatcher after a lapsed lease, wins), and move each endpoint's counters by them. Inside
    the caller's transaction."""
    if not outcomes:
        return
    b = sa.bindparam
    stmt = (sa.update(d)
            .where(d.c.endpoint_id == b("k_endpoint"), d.c.seq == b("k_seq"),
                   d.c.lease_owner == owner)
            .values(status=b("v_status"), attempts=b("v_attempts"), next_ms=b("v_next"),
                    first_ms=b("v_first"), last_ms=b("v_at"), last_code=b("v_code"),
                    last_error=b("v_error"), done_ms=b("v_done"), lease_owner=None,
                    lease_ms=None))
    conn.execute(stmt, [{"k_endpoint": o.endpoint_id, "k_seq": o.seq, "v_status": o.status,
                         "v_attempts": o.attempts, "v_next": o.next_ms, "v_first": o.first_ms,
                         "v_at": o.at_ms, "v_code": o.code,
                         "v_error": (o.error or None) and o.error[:300], "v_done": o.done_ms}
                        for o in outcomes])
    counts = Counter((o.endpoint_id, o.counted) for o in outcomes)
    e = webhook_endpoints
    for endpoint_id in sorted({o.endpoint_id for o in outcomes}):
        moves = {name: getattr(e.c, name) + counts[endpoint_id, name]
                 for name in OUTCOMES if counts[endpoint_id, name]}
        conn.execute(sa.update(e).where(e.c.id == endpoint_id).values(**moves))


def release(conn: sa.Connection, owner: str, keys: Iterable[tuple[str, int]]) -> None:
    """Give back leases never attempted (a stopping dispatcher's, a lease too close to its
    end to send within it): due again at once for whoever claims them."""
    rows = [{"k_endpoint": e, "k_seq": s} for e, s in keys]
    if rows:
        conn.execute(sa.update(d).where(d.c.endpoint_id == sa.bindparam("k_endpoint"),
                                        d.c.seq == sa.bindparam("k_seq"),
                                        d.c.lease_owner == owner)
                     .values(lease_owner=None, lease_ms=None), rows)


def webhook_numbers(bind: sa.Engine | sa.Connection, now_ms: int) -> WebhookNumbers:
    """Each endpoint's counters, the pending deliveries, and the age of the oldest event
    not yet delivered everywhere (pending, or not fanned out while an endpoint exists)."""
    e = webhook_endpoints
    with _connection(bind) as conn:
        counted = [(str(i), int(a), int(b), int(c)) for i, a, b, c in conn.execute(
            sa.select(e.c.id, e.c.delivered, e.c.retried, e.c.failed).order_by(e.c.id))]
        backlog = conn.execute(sa.select(sa.func.count()).select_from(d)
                               .where(d.c.status == PENDING)).scalar_one()
        oldest = conn.execute(sa.select(sa.func.min(outbox.c.created_ms)).where(
            outbox.c.seq.in_(sa.select(d.c.seq).where(d.c.status == PENDING)))).scalar()
        if counted:
            unfanned = conn.execute(sa.select(sa.func.min(outbox.c.created_ms))
                                    .where(outbox.c.fanned.is_(None))).scalar()
            oldest = min(x for x in (oldest, unfanned, now_ms) if x is not None)
    age = 0.0 if oldest is None else max(0.0, (now_ms - int(oldest)) / 1000)
    return WebhookNumbers(endpoints=counted, backlog=int(backlog), oldest_undelivered_s=age)


class _connection:
    """``bind`` itself when a connection, else a connection of the engine for the block."""

    def __init__(self, bind: sa.Engine | sa.Connection) -> None:
        self.bind = bind
        self.own: sa.Connection | None = None

    def __enter__(self) -> sa.Connection:
        if isinstance(self.bind, sa.Connection):
            return self.bind
        self.own = self.bind.connect()
        return self.own

    def __exit__(self, *exc: object) -> None:
        if self.own is not None:
            self.own.close()
