"""The shop's webhook endpoints in the database: the operator's list, a removal
(its deliveries go too), an endpoint's deliveries, a replay, and each endpoint's summary for the
console. The tables are ``seckill.sql.schema``'s; the dispatcher (``seckill/webhooks/``) makes
and attempts the deliveries, the outbox (``seckill.sql.outbox``) holds the events.

A removal and a replay take the endpoint's row first (an update that changes nothing): on
PostgreSQL its row lock, on SQLite the writer's lock, so that a replay never inserts deliveries
for an endpoint a removal is taking away at the same moment.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
from typing import Any

import orjson
import sqlalchemy as sa

from seckill.domain import errors
from seckill.domain.clock import iso_from_ms, now_ms
from seckill.domain.events import ALL_EVENTS
from seckill.sql.schema import ensure_schema, outbox, webhook_deliveries, webhook_endpoints
from seckill.sql.sealed_rows import WEBHOOK_SECRET, check
from seckill.sql.sealing import Keyring

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
STATUSES = (PENDING, DELIVERED, FAILED)

_E, _D = webhook_endpoints, webhook_deliveries


def new_endpoint_id(at_ms: int) -> str:
    """An endpoint id that sorts by creation: ``ep_``, the time (12 hex digits of epoch ms)
    and 32 random bits. The list is in this order, and its cursor is the last id."""
    return f"ep_{at_ms:012x}{secrets.token_hex(4)}"


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint: where its events go, which types (or ``["*"]``), its signing secret and
    when it was registered; ``summary``, when read for the list, what became of its events."""

    id: str
    url: str
    events: list[str]
    secret: str = dataclasses.field(repr=False)
    created_ms: int
    summary: dict[str, Any] | None = None

    def body(self, with_secret: bool = False) -> dict[str, Any]:
        """The contract's view: the secret only in the answer to its registration."""
        shown: dict[str, Any] = {"id": self.id, "url": self.url, "events": list(self.events),
                                 "created_at": iso_from_ms(self.created_ms)}
        if with_secret:
            shown["secret"] = self.secret
        if self.summary is not None:
            shown["summary"] = self.summary
        return shown


def _endpoint(row: Any, keys: Keyring, summary: dict[str, Any] | None = None) -> Endpoint:
    return Endpoint(id=row.id, url=row.url, events=list(orjson.loads(row.events)),
                    secret=keys.open(row.secret, WEBHOOK_SECRET.context(row.id)),
                    created_ms=int(row.created_ms), summary=summary)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else iso_from_ms(int(ms))


def delivery_body(row: Any) -> dict[str, Any]:
    """One delivery as the operator reads it: the event (its webhook-id, type, subject, when it
    happened; null when the event was pruned), the status and the last attempt's answer."""
    shown: dict[str, Any] = {"event_id": row.event_id, "type": row.type,
                             "subject": row.subject}
    if row.subject.startswith("order:"):
        shown["order_id"] = row.subject.removeprefix("order:")
    shown.update({
        "status": row.status, "attempts": int(row.attempts),
        "created_at": _iso(row.created_ms), "last_attempt_at": _iso(row.last_ms),
        "last_code": row.last_code, "last_error": row.last_error,
        "next_attempt_at": _iso(row.next_ms) if row.status == PENDING else None,
    })
    return shown


class WebhookBook:
    """The endpoints and their deliveries in the database; the secrets sealed with ``keys``
    (default: the process's environment's)."""

    def __init__(self, engine: sa.Engine, keys: Keyring | None = None) -> None:
        self.engine = engine
        self.keys = keys or Keyring.from_environment()
        self._made = False  # the schema made (a write) or found (a read)
        self._lock = threading.Lock()

    def _ready(self, write: bool) -> bool:
        """Whether the tables are there: made for a write; for a read (which may be a
        read-only command's, on a database an older version made) only looked for."""
        if self._made:
            return True
        with self._lock:
            if not self._made:
                if write:
                    ensure_schema(self.engine)
                    self._made = True
                else:
                    self._made = sa.inspect(self.engine).has_table(_D.name)
                if self._made:
                    check(self.engine, self.keys)
        return self._made

    def add(self, url: str, events: list[str], secret: str) -> Endpoint:
        """Register an endpoint; returns it (with its new id)."""
        self._ready(True)
        at = now_ms()
        made = Endpoint(id=new_endpoint_id(at), url=url, events=events, secret=secret,
                        created_ms=at)
        with self.engine.begin() as conn:
            conn.execute(_E.insert().values(
                id=made.id, url=url, events=orjson.dumps(events).decode(),
                secret=self.keys.seal(secret, WEBHOOK_SECRET.context(made.id)), created_ms=at))
        return made

    def find(self, endpoint_id: str) -> Endpoint:
        """The endpoint of that id; UnknownWebhook if there is none."""
        if self._ready(False):
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(_E).where(_E.c.id == endpoint_id)).first()
            if row is not None:
                return _endpoint(row, self.keys)
        raise errors.UnknownWebhook(id=endpoint_id)

    def _take(self, conn: sa.Connection, endpoint_id: str) -> Endpoint:
        """Lock the endpoint's row (see the module's docstring) and read it; UnknownWebhook."""
        taken = conn.execute(_E.update().where(_E.c.id == endpoint_id).values(id=_E.c.id))
        row = conn.execute(sa.select(_E).where(_E.c.id == endpoint_id)).first()
        if taken.rowcount == 0 or row is None:
            raise errors.UnknownWebhook(id=endpoint_id)
        return _endpoint(row, self.keys)

    def remove(self, endpoint_id: str) -> Endpoint:
        """Remove an endpoint and every delivery of it (pending ones are never sent); returns
        it. UnknownWebhook if there is none."""
        self._ready(True)
        with self.engine.begin() as conn:
            found = self._take(conn, endpoint_id)
            conn.execute(_D.delete().where(_D.c.endpoint_id == endpoint_id))
            conn.execute(_E.delete().where(_E.c.id == endpoint_id))
        return found

    def page(self, after: str | None, limit: int) -> tuple[list[Endpoint], str | None]:
        """Up to ``limit`` endpoints in the order they were registered, after id ``after``
        (None: from the first), each with its summary; and the cursor of the next page."""
        if not self._ready(False):
            return [], None
        query = sa.select(_E).order_by(_E.c.id).limit(limit + 1)
        if after is not None:
            query = query.where(_E.c.id > after)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            more = len(rows) > limit
            rows = rows[:limit]
            summaries = self._summaries(conn, [row.id for row in rows])
        found = [_endpoint(row, self.keys, summaries[row.id]) for row in rows]
        return found, (found[-1].id if more else None)

    def _summaries(self, conn: sa.Connection, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Per endpoint: deliveries kept by status (``backlog`` = pending), its last attempt
        (when, the answer's code or the error, and the delivery's status) and the time of
        the oldest event still to deliver. Three grouped queries for the whole page."""
        found: dict[str, dict[str, Any]] = {
            i: {"backlog": 0, "failed": 0, "delivered": 0, "last_attempt": None,
                "oldest_pending_at": None} for i in ids}
        if not ids:
            return found
        mine = _D.c.endpoint_id.in_(ids)
        names = {PENDING: "backlog", FAILED: "failed", DELIVERED: "delivered"}
        for endpoint_id, status, count in conn.execute(
                sa.select(_D.c.endpoint_id, _D.c.status, sa.func.count())
                .where(mine).group_by(_D.c.endpoint_id, _D.c.status)):
            if status in names:
                found[endpoint_id][names[status]] = int(count)
        for endpoint_id, oldest in conn.execute(
                sa.select(_D.c.endpoint_id, sa.func.min(outbox.c.created_ms))
                .join(outbox, outbox.c.seq == _D.c.seq)
                .where(mine & (_D.c.status == PENDING)).group_by(_D.c.endpoint_id)):
            found[endpoint_id]["oldest_pending_at"] = _iso(oldest)
        latest = (sa.select(_D.c.endpoint_id, sa.func.max(_D.c.last_ms).label("at"))
                  .where(mine).group_by(_D.c.endpoint_id).subquery())
        for row in conn.execute(
                sa.select(_D.c.endpoint_id, _D.c.last_ms, _D.c.last_code, _D.c.last_error,
                          _D.c.status)
                .join(latest, (latest.c.endpoint_id == _D.c.endpoint_id)
                      & (latest.c.at == _D.c.last_ms))
                .order_by(_D.c.seq)):  # two attempts in one millisecond: the later event's
            found[row.endpoint_id]["last_attempt"] = {
                "at": iso_from_ms(int(row.last_ms)), "code": row.last_code,
                "error": row.last_error, "status": row.status}
        return found

    def deliveries(self, endpoint_id: str, status: str | None, after: int,
                   limit: int) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` deliveries of the endpoint (of ``status``, or all) in event order
        after event ``after`` (0: from the first), and the next page's cursor.
        UnknownWebhook if there is no such endpoint."""
        self.find(endpoint_id)
        where = (_D.c.endpoint_id == endpoint_id) & (_D.c.seq > after)
        if status is not None:
            where &= _D.c.status == status
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(_D, outbox.c.event_id, outbox.c.type, outbox.c.created_ms)
                .outerjoin(outbox, outbox.c.seq == _D.c.seq)
                .where(where).order_by(_D.c.seq).limit(limit + 1)).all()
        found = [delivery_body(row) for row in rows[:limit]]
        return found, (int(rows[limit - 1].seq) if len(rows) > limit else None)

    def replay(self, endpoint_id: str, since_ms: int) -> int:
        """Send again every event since ``since_ms`` the endpoint subscribes to, under its
        own webhook-id: its delivery (made if the event is older than the endpoint) becomes
        pending, due now, with no attempt and no lease. Events not fanned out yet are left
        to the fan-out (which makes their deliveries). Returns how many."""
        self._ready(True)
        at = now_ms()
        with self.engine.begin() as conn:
            found = self._take(conn, endpoint_id)
            chosen = (outbox.c.created_ms >= since_ms) & outbox.c.fanned.is_(True)
            if ALL_EVENTS not in found.events:
                chosen &= outbox.c.type.in_(found.events)
            mine = _D.c.endpoint_id == endpoint_id
            # Each chosen event's delivery is made pending or made: as many as are chosen
            # (counted, as an INSERT ... SELECT's rowcount is not told by every driver).
            count = conn.execute(sa.select(sa.func.count()).where(chosen)).scalar_one()
            conn.execute(
                _D.update().where(mine & _D.c.seq.in_(sa.select(outbox.c.seq).where(chosen)))
                .values(status=PENDING, attempts=0, next_ms=at, first_ms=None,
                        lease_owner=None, lease_ms=None, done_ms=None))
            missing = sa.select(
                sa.literal(endpoint_id), outbox.c.seq, outbox.c.subject,
                sa.literal(PENDING), sa.literal(0), sa.literal(at),
            ).where(chosen & ~sa.exists().where(mine & (_D.c.seq == outbox.c.seq)))
            conn.execute(_D.insert().from_select(
                ["endpoint_id", "seq", "subject", "status", "attempts", "next_ms"], missing))
        return int(count)
