"""Rebuilding an activity's Redis state from the database when Redis has lost it.

Redis can come back empty (a FLUSHALL, a replica promoted with no data, a restart without its
AOF). The purchase script then answers ``uninitialized``, never "sold out" nor "unlimited", and
the gateway rebuilds the activity from the database, the source of truth. One gateway rebuilds,
under a lock; the others wait briefly or answer 503. ``reconcile`` compares the two (stock,
buyers, each buyer's order and its mark) and, asked to, repairs Redis. What is rebuilt, and
what can be lost: docs/internals.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from seckill.domain import errors, packets
from seckill.domain.activities import PACKETS, Activity, now_ms
from seckill.domain.orders import (
    CANCELLED,
    CONFIRMED,
    NO_ORDER,
    PENDING,
    StoredOrder,
    Told,
    disagree,
    live_and_cancelled,
    order_seq,
    told_body,
    told_by_database,
)
from seckill.sql.book import OrderBook
from seckill.store.activities import ActivityStore
from seckill.store.keys import CONFIRMED_SUFFIX, KeySpace, split_buyer_entry
from seckill.store.scripts import Scripts

log = logging.getLogger("seckill.recovery")

LOCK_TTL_MS = 15_000
_CHUNK = 1000
# The orders worker's consumer group on every activity's stream (seckill/worker/).
ORDERS_GROUP = "orders-worker"
# reconcile: at most this many stream entries are read to know which orders are in flight.
IN_FLIGHT_LIMIT = 100_000


@dataclasses.dataclass(frozen=True)
class RebuildReport:
    """What a rebuild found in the database and wrote to Redis (or found already there)."""

    activity: str
    rebuilt: bool
    total: int | None
    remaining: int | None
    sold: int
    buyers: int
    cancelled: int
    amount_given: int | None = None

    def body(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return dataclasses.asdict(self)


class KnownActivities:
    """The ids the database knows, refreshed at most every ``refresh`` seconds, so that a flood
    of made-up activity ids never turns into database queries."""

    def __init__(self, book: OrderBook, refresh: float = 5.0) -> None:
        self.book = book
        self.refresh = refresh
        self._ids: set[str] = set()
        self._loaded_at = float("-inf")
        # Callers that arrive while the ids are being loaded wait for them: without the lock
        # they would see the old (at first empty) set and call a real activity unknown (404).
        self._lock = threading.Lock()

    def __contains__(self, aid: object) -> bool:
        if aid in self._ids:
            return True
        with self._lock:
            if aid not in self._ids and time.monotonic() - self._loaded_at >= self.refresh:
                self._loaded_at = time.monotonic()
                self._ids = self.book.activity_ids()
        return aid in self._ids


class Restorer:
    """Puts an activity's state back into Redis from the database, one gateway at a time."""

    def __init__(
        self, client: redis.Redis, keys: KeySpace, scripts: Scripts, book: OrderBook,
        wait_seconds: float = 3.0,
    ) -> None:
        self.known = KnownActivities(book)
        self.client = client
        self.keys = keys
        self.scripts = scripts
        self.book = book
        self.wait_seconds = wait_seconds

    def ensure(self, aid: str) -> bool:
        """Make sure the activity's state is in Redis. Returns False if the database does not
        know the activity either; raises Unavailable if another gateway's rebuild is taking
        too long."""
        if self.client.exists(self.keys.meta(aid)):
            return True
        if aid not in self.known:
            return False
        lock = self.keys.rebuild_lock(aid)
        token = secrets.token_hex(16)
        if self.client.set(lock, token, nx=True, px=LOCK_TTL_MS):
            try:
                # Another gateway may have rebuilt between our EXISTS and our SET: rebuilding
                # again would replace the buyers who bought since with the database's list.
                if not self.client.exists(self.keys.meta(aid)):
                    self.rebuild(aid)
            finally:
                self.scripts.unlock(keys=[lock], args=[token])
            return True
        deadline = time.monotonic() + self.wait_seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self.client.exists(self.keys.meta(aid)):
                return True
        raise errors.Uninitialized()

    def rebuild(self, aid: str) -> RebuildReport:
        """Write the activity's state from the database. Call with the lock held (or from the
        CLI, when the operator knows no gateway is serving it)."""
        activity = self.book.load_activity(aid)
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        stored = self.book.orders_of(aid)
        live, cancelled = live_and_cancelled(stored)
        sold = sum(o.quantity for o in live.values())
        remaining: int | None = None
        if activity.total is not None:
            remaining = activity.total - sold
            if remaining < 0:
                log.error("activity %s: database holds %d units of %d; clamping remaining to 0",
                          aid, sold, activity.total)
                remaining = 0
        seq = max((order_seq(o.order_id) for o in stored), default=0)

        buyers_key, cancelled_key = self.keys.buyers(aid), self.keys.cancelled(aid)
        amounts_key = self.keys.amounts(aid)
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(buyers_key, cancelled_key, amounts_key)
        for chunk in _chunks([(u, o.order_id + CONFIRMED_SUFFIX) for u, o in live.items()]):
            pipe.hset(buyers_key, mapping=dict(chunk))
        cancelled_only = [(u, o.order_id) for u, o in cancelled.items() if u not in live]
        for chunk in _chunks(cancelled_only):
            pipe.hset(cancelled_key, mapping=dict(chunk))
        if activity.kind == PACKETS:
            grabbed = [(u, str(o.amount)) for u, o in live.items() if o.amount is not None]
            for chunk in _chunks(grabbed):
                pipe.hset(amounts_key, mapping=dict(chunk))
        pipe.execute()

        restored = dataclasses.replace(activity, remaining=remaining)
        fields = restored.redis_fields(now_ms())
        fields = _set_field(_set_field(fields, "sold", sold), "seq", seq)
        # Meta last: until it exists every purchase answers "uninitialized", so nobody can buy
        # against a half-restored buyer list.
        given: int | None = None
        if activity.kind == PACKETS:
            unclaimed, given = _unclaimed_packets(activity, list(live.values()))
            fields = _set_field(_set_field(fields, "remaining", len(unclaimed)),
                                "amount_given", given)
            remaining = len(unclaimed)
            store = ActivityStore(self.client, self.keys, self.scripts)
            created = store.publish_packets(activity, unclaimed, fields)
        else:
            created = bool(self.scripts.create_activity(keys=[self.keys.meta(aid)], args=fields))
        log.warning(
            "activity %s: Redis state %s from the database: remaining=%s sold=%d buyers=%d%s",
            aid, "rebuilt" if created else "was already present, left", remaining, sold,
            len(live), "" if given is None else f" amount_given={given}",
        )
        return RebuildReport(aid, bool(created), activity.total, remaining, sold, len(live),
                             len(cancelled_only), given)


def reconcile(restorer: Restorer, aid: str, repair: bool = False) -> dict[str, Any]:
    """Compare an activity's Redis state with the database and say what differs; write
    nothing unless ``repair``.

    Compared: the stock and buyer counts, and each buyer's order as Redis tells it (pending,
    confirmed, cancelled) against the database, leaving out the orders still in flight in the
    stream. With ``repair``: a missing state is rebuilt; an order stored but still marked
    pending is marked confirmed (safe at any time); any other difference rebuilds Redis from
    the database, refused while orders wait in the stream (rebuilding would forget them).
    """
    keys, client = restorer.keys, restorer.client
    activity = restorer.book.load_activity(aid)
    if not client.exists(keys.meta(aid)):
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        if not repair:
            return {"activity": aid, "action": "none", "differences": {
                "redis": "the activity's state is missing; --repair rebuilds it"}}
        if not restorer.ensure(aid):
            raise errors.UnknownActivity(activity=aid)
        return {"activity": aid, "action": "rebuilt", "differences": {}}
    if activity is None:
        return {"activity": aid, "action": "none",
                "differences": {"database": "the database does not know this activity"}}
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.meta(aid), "total", "remaining", "sold", "amount_given")
    pipe.hlen(keys.buyers(aid))
    pipe.xlen(keys.orders(aid))
    pipe.llen(keys.packets(aid))
    (total_raw, remaining_raw, sold_raw, given_raw), buyers, backlog, listed = pipe.execute()
    told_redis = _told_by_redis(client, keys, aid)
    in_flight = orders_in_flight(client, keys.orders(aid))
    stored = restorer.book.orders_of(aid)
    live, _ = live_and_cancelled(stored)
    db_sold = sum(o.quantity for o in live.values())
    expected = {
        "total": -1 if activity.total is None else activity.total,
        "remaining": -1 if activity.total is None else activity.total - db_sold,
        "sold": db_sold,
        "buyers": len(live),
    }
    actual = {"total": int(total_raw), "remaining": int(remaining_raw),
              "sold": int(sold_raw or 0), "buyers": int(buyers)}
    if activity.kind == PACKETS:
        unclaimed, given = _unclaimed_packets(activity, list(live.values()))
        expected.update(remaining=len(unclaimed), packets=len(unclaimed), amount_given=given)
        actual.update(packets=int(listed), amount_given=int(given_raw or 0))
    differences: dict[str, Any] = {
        name: {"redis": actual[name], "database": expected[name]}
        for name in expected if actual[name] != expected[name]
    }
    marks = _mark_differences(restorer, aid, told_redis, in_flight, stored)
    if marks is None:
        differences["marks"] = f"not compared: over {IN_FLIGHT_LIMIT} entries wait in the stream"
    elif marks:
        differences["marks"] = {"count": len(marks), "orders": [
            {"user": u, "redis": told_body(r), "database": told_body(d)}
            for u, (r, d) in sorted(marks.items())[:100]]}
    unmarked = [(u, str(r[1])) for u, (r, d) in (marks or {}).items()
                if r[0] == PENDING and d == (CONFIRMED, r[1])]
    report: dict[str, Any] = {"activity": aid, "action": "none", "stream_backlog": int(backlog),
                              "differences": differences}
    if not repair:
        return report
    if len(unmarked) < len(marks or {}) or set(differences) - {"marks"}:
        if int(backlog):
            report["action"] = ("refused: orders are still waiting in the stream; "
                                "run the worker first")
        else:
            _rebuild_now(restorer, aid)
            report["action"] = "rebuilt"
            return report
    if unmarked:
        args = [ORDERS_GROUP, "0", *itertools.chain.from_iterable(unmarked)]
        marked = restorer.scripts.confirm(keys=[keys.buyers(aid), keys.orders(aid)], args=args)
        report["marked"] = int(marked[0])
        if report["action"] == "none":
            report["action"] = "marked"
    return report


def orders_in_flight(client: redis.Redis, stream: str) -> set[str] | None:
    """The order ids of the stream's entries the worker has not acknowledged yet (never
    delivered, or delivered and pending); None past ``IN_FLIGHT_LIMIT`` entries."""
    if not client.exists(stream):
        return set()
    try:
        groups: Any = client.xinfo_groups(stream)
    except redis.ResponseError:
        groups = []
    group = next((g for g in groups if g["name"] == ORDERS_GROUP), None)
    after = str(group["last-delivered-id"]) if group else "0-0"
    undelivered = _pages(lambda start: client.xrange(stream, min=start, max="+", count=_CHUNK),
                         "(" + after, lambda entry: str(entry[0]))
    delivered: Iterator[list[Any]] = iter(())
    if group is not None and int(group["pending"]):
        pel = _pages(lambda start: client.xpending_range(stream, ORDERS_GROUP, start, "+", _CHUNK),
                     "-", lambda item: str(item["message_id"]))
        delivered = (_entries(client, stream, [str(i["message_id"]) for i in page])
                     for page in pel)
    found: set[str] = set()
    seen = 0
    for entries in itertools.chain(undelivered, delivered):
        found.update(f["order_id"] for _, f in entries if f.get("order_id"))
        seen += len(entries)
        if seen > IN_FLIGHT_LIMIT:
            return None
    return found


def _pages(
    fetch: Callable[[str], Any], start: str, id_of: Callable[[Any], str]
) -> Iterator[list[Any]]:
    """A range read ``_CHUNK`` at a time from ``start``, each page after the last id before."""
    while True:
        page = list(fetch(start))
        yield page
        if len(page) < _CHUNK:
            return
        start = "(" + id_of(page[-1])


def _entries(client: redis.Redis, stream: str, ids: list[str]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xrange(stream, min=entry_id, max=entry_id)
    return [entry for found in pipe.execute() for entry in found]


def _told_by_redis(
    client: redis.Redis, keys: KeySpace, aid: str, users: list[str] | None = None
) -> dict[str, Told]:
    """Each buyer's order as Redis tells it (all of them, or ``users``)."""
    if users is None:
        buyers = dict(client.hscan_iter(keys.buyers(aid), count=_CHUNK))
        cancelled = dict(client.hscan_iter(keys.cancelled(aid), count=_CHUNK))
    else:
        pipe = client.pipeline(transaction=False)  # reads only: no MULTI
        pipe.hmget(keys.buyers(aid), users)
        pipe.hmget(keys.cancelled(aid), users)
        buyers, cancelled = ({u: v for u, v in zip(users, got, strict=True) if v is not None}
                             for got in pipe.execute())
    told: dict[str, Told] = {u: (CANCELLED, str(o)) for u, o in cancelled.items()}
    for uid, value in buyers.items():
        order_id, confirmed = split_buyer_entry(str(value))
        told[str(uid)] = (CONFIRMED if confirmed else PENDING, order_id)
    return told


def _mark_differences(
    restorer: Restorer, aid: str, told_redis: dict[str, Told], in_flight: set[str] | None,
    stored: list[StoredOrder],
) -> dict[str, tuple[Told, Told]] | None:
    """The buyers whose order Redis and the database tell differently, read twice: Redis, then
    the stream, then the database (an order moves from the first to the last, so an order
    caught moving between two reads is seen again, settled, on the second pass)."""
    if in_flight is None:
        return None
    told_db = told_by_database(stored)
    suspects = [u for u in told_redis.keys() | told_db.keys()
                if disagree(told_redis.get(u, NO_ORDER), told_db.get(u, NO_ORDER), in_flight)]
    if not suspects:
        return {}
    again = _told_by_redis(restorer.client, restorer.keys, aid, suspects)
    in_flight = orders_in_flight(restorer.client, restorer.keys.orders(aid))
    if in_flight is None:
        return None
    told_db = told_by_database(restorer.book.orders_of(aid))
    found = {u: (again.get(u, NO_ORDER), told_db.get(u, NO_ORDER)) for u in suspects}
    return {u: pair for u, pair in found.items() if disagree(*pair, in_flight)}


def _rebuild_now(restorer: Restorer, aid: str) -> None:
    """Rebuild an activity whose state is present (and wrong), under the rebuild lock."""
    keys, client = restorer.keys, restorer.client
    lock, token = keys.rebuild_lock(aid), secrets.token_hex(16)
    if not client.set(lock, token, nx=True, px=LOCK_TTL_MS):
        raise errors.Uninitialized("another rebuild of this activity is in progress")
    try:
        client.delete(keys.meta(aid))
        restorer.rebuild(aid)
    finally:
        restorer.scripts.unlock(keys=[lock], args=[token])


def _unclaimed_packets(activity: Activity, live: list[StoredOrder]) -> tuple[list[int], int]:
    """The packets no live grab holds, in the split's order, and the amount the grabs hold."""
    assert activity.amount is not None and activity.total is not None
    if activity.seed is None:
        raise errors.SeckillError("a packets activity without a seed cannot be rebuilt",
                                  activity=activity.id)
    split = packets.split(activity.amount, activity.total, activity.seed)
    held = [o.amount for o in live if o.amount is not None]
    if len(held) != len(live):
        log.error("activity %s: %d live grabs have no amount in the database",
                  activity.id, len(live) - len(held))
    left, unknown = packets.unclaimed(split, held)
    if unknown:
        log.error("activity %s: live grabs hold amounts the split does not have: %s",
                  activity.id, unknown[:20])
    return left, sum(held)


def _chunks(items: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _set_field(fields: list[str | int], name: str, value: int) -> list[str | int]:
    out = list(fields)
    out[out.index(name) + 1] = value
    return out
