"""Rebuilding an activity's Redis state from the database when Redis has lost it.

Redis can come back empty (a FLUSHALL, a replica promoted with no data, a restart without its
AOF). The purchase script then answers ``uninitialized``, never "sold out" nor "unlimited", and
the gateway rebuilds the activity from the database, the source of truth. One gateway rebuilds,
under a lock; the others wait briefly or answer 503. Comparing the two without writing, and
repairing on demand: ``seckill.store.reconcile``. What is rebuilt, and what can be lost:
docs/internals.md.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from typing import Any

from seckill.domain import errors, packets
from seckill.domain.activities import PACKETS, Activity, now_ms
from seckill.domain.orders import (
    StoredOrder,
    live_and_cancelled,
    order_seq,
)
from seckill.sql.book import OrderBook
from seckill.store.activities import ActivityStore
from seckill.store.connection import Client
from seckill.store.keys import CONFIRMED_SUFFIX, KeySpace
from seckill.store.scripts import Scripts

log = logging.getLogger("seckill.recovery")

LOCK_TTL_MS = 15_000
CHUNK = 1000
# The orders worker's consumer group on every activity's stream (seckill/worker/).
ORDERS_GROUP = "orders-worker"


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
        self, client: Client, keys: KeySpace, scripts: Scripts, book: OrderBook,
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
        for stale in (buyers_key, cancelled_key, amounts_key):  # one DEL each (a cluster
            pipe.delete(stale)  # pipeline refuses a DEL of several keys, even in one slot)
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
            unclaimed, given = unclaimed_packets(activity, list(live.values()))
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


def unclaimed_packets(activity: Activity, live: list[StoredOrder]) -> tuple[list[int], int]:
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
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


def _set_field(fields: list[str | int], name: str, value: int) -> list[str | int]:
    out = list(fields)
    out[out.index(name) + 1] = value
    return out
