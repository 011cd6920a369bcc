"""The sale's numbers per activity, as ``/metrics`` and the operator console show them.

Read at scrape time from where they live (Redis for stock, buyers, holds, the queue and the
orders streams; the database for stored orders), through the same code as the operator's
stats, and kept for ``ttl`` seconds so that several scrapers (Prometheus on every instance,
the console every second) cost one round of reads. Only activities that have not been over
for more than ``RECENT_MS`` are counted, at most ``MAX_ACTIVITIES``: the cost stays bounded
however many old sales the database holds.

A reading that fails (Redis down, a master restarting and still loading its data) never passes
for "no activities": the census then says why (``error``) and carries the last complete
reading's counts with the moment they were read (``read_ms``), and each Redis server (each
master of a cluster) is asked on its own, so the console can say which one is down.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

import redis

from seckill.domain.activities import Activity, counters_disagree
from seckill.domain.clock import now_ms
from seckill.store.plumbing.connection import Client, address_of, is_cluster_client, masters
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.shards import part_tags
from seckill.store.plumbing.storage import refuses_writes
from seckill.store.sale.controls import SaleControls
from seckill.store.sale.payments import Payments
from seckill.store.sale.queue import AdmissionQueue
from seckill.store.sale.recovery import ORDERS_GROUP
from seckill.store.sale.stats import StockStats

log = logging.getLogger("seckill.census")

COUNTERS = ("total", "remaining", "sold", "held", "unlimited")  # counters_disagree's order
RECENT_MS = 86_400_000  # a day after its end, an activity leaves the census
MAX_ACTIVITIES = 500


@dataclasses.dataclass(frozen=True, slots=True)
class Count:
    """One activity's numbers at one moment."""

    activity: Activity
    remaining: int | None
    sold: int
    buyers: int
    orders: dict[str, int]  # pending, confirmed, cancelled
    holds: int  # payments due
    waiting: int  # in the queue (queue and draw activities)
    oldest_pending_s: float  # age of the oldest decided order not yet stored (0: none)
    dead_letters: int
    # Its counters disagree (on some part): every purchase answers 503 inconsistent until
    # `seckill reconcile --repair` (lua/purchase.lua).
    inconsistent: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """One Redis server (the single one, or a master of a cluster), and whether it answered."""

    address: str
    role: str  # "server" or "master"
    ok: bool
    error: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Census:
    """Every recent activity's numbers, and whether Redis answered."""

    taken_ms: int
    redis_up: bool
    counts: list[Count]
    # Why this reading failed (None: it did not), and when ``counts`` were read: taken_ms when
    # fresh, the last complete reading's time when stale, None when this process has none.
    error: str | None = None
    read_ms: int | None = None
    nodes: tuple[Node, ...] = ()

    @property
    def stale(self) -> bool:
        """Whether ``counts`` are an earlier reading's (or none), not this moment's."""
        return self.error is not None


class CensusTaker:
    """Takes the census, at most once per ``ttl`` seconds."""

    def __init__(self, client: Client, keys: KeySpace, controls: SaleControls,
                 stats: StockStats, payments: Payments, queue: AdmissionQueue,
                 ttl: float = 1.0) -> None:
        self.client = client
        self.keys = keys
        self.controls = controls
        self.stats = stats
        self.payments = payments
        self.queue = queue
        self.ttl = ttl
        self._lock = threading.Lock()
        self._last: tuple[float, Census] | None = None
        self._good: Census | None = None  # the last complete reading

    def take(self) -> Census:
        """The census, fresh or at most ``ttl`` seconds old."""
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.ttl:
                return self._last[1]
            census = self._take()
            self._last = (time.monotonic(), census)
            return census

    def _take(self) -> Census:
        at = now_ms()
        try:
            _ping(self.client)
            up = True
        except redis.RedisError as exc:
            return self._stale(at, False, exc, self._nodes(False, exc))
        nodes = self._nodes(True, None)
        counts: list[Count] = []
        try:
            for activity in self._recent(at):
                count = self._count(activity)
                if count is not None:
                    counts.append(count)
        except Exception as exc:  # a scrape never fails: the last complete reading, said so
            log.warning("census incomplete: %s: %s", type(exc).__name__, exc)
            return self._stale(at, up, exc, nodes)
        census = Census(at, up, counts, None, at, nodes)
        self._good = census
        return census

    def _stale(self, at: int, up: bool, exc: BaseException, nodes: tuple[Node, ...]) -> Census:
        good = self._good
        return Census(at, up, good.counts if good else [], f"{type(exc).__name__}: {exc}",
                      good.read_ms if good else None, nodes)

    def _nodes(self, up: bool, exc: BaseException | None) -> tuple[Node, ...]:
        """Each server's answer: the single server's is the PING just sent; each master of a
        cluster is asked on its own (one down leaves the others answering)."""
        if not is_cluster_client(self.client):
            return (Node(address_of(self.client), "server", up,
                         None if exc is None else type(exc).__name__),)
        found: list[Node] = []
        for name, connection in masters(self.client):
            try:
                _ping(connection)
                found.append(Node(name, "master", True))
            except Exception as failed:  # refused, timed out, loading: down for the console
                found.append(Node(name, "master", False, type(failed).__name__))
        return tuple(found)

    def _recent(self, at: int) -> list[Activity]:
        found: list[Activity] = []
        cursor = None
        while len(found) < MAX_ACTIVITIES:
            page, cursor = self.controls.page(cursor, 200, None, rebuild=False)
            found += [a for a in page if a.ends_ms > at - RECENT_MS]
            if cursor is None:
                break
        return found[:MAX_ACTIVITIES]

    def _count(self, activity: Activity) -> Count | None:
        stats = self.stats.of(activity.id)
        if stats is None:
            return None
        payments = self.payments.counts(activity.id)
        waiting = self.queue.state(activity.id).waiting if activity.queued else 0
        tags = part_tags(activity.id, activity.shards)
        return Count(
            activity=activity, remaining=stats.remaining, sold=stats.sold, buyers=stats.buyers,
            orders={"pending": stats.pending, "confirmed": stats.confirmed,
                    "cancelled": stats.cancelled},
            holds=payments["due"] if payments else 0, waiting=waiting,
            oldest_pending_s=max((self._oldest_pending_s(tag) for tag in tags), default=0.0),
            dead_letters=sum(int(self.client.xlen(self.keys.dead_letters(t))) for t in tags),
            inconsistent=self._inconsistent(tags),
        )

    def _inconsistent(self, tags: tuple[str, ...]) -> bool:
        """Whether the counters of one of the meta hashes disagree, as the purchase script
        judges them (:func:`counters_disagree`), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.hmget(self.keys.meta(tag), COUNTERS)
        return any(counters_disagree(*fields) for fields in pipe.execute())

    def _oldest_pending_s(self, tag: str) -> float:
        """Age of the stream's oldest entry the worker has not acknowledged: the oldest
        delivered-but-unacknowledged one, else the first never delivered (acknowledged ones
        may linger until the worker trims them, so the stream's head is not the answer)."""
        stream = self.keys.orders(tag)
        oldest: str | None = None
        try:
            groups: Any = self.client.xinfo_groups(stream)
        except redis.ResponseError:  # no stream yet: nothing decided
            return 0.0
        group = next((g for g in groups if g["name"] == ORDERS_GROUP), None)
        if group is not None:
            summary: Any = self.client.xpending(stream, ORDERS_GROUP)
            if summary["pending"]:
                oldest = str(summary["min"])
            start = f"({group['last-delivered-id']}"
        else:
            start = "-"
        if oldest is None:
            entries: Any = self.client.xrange(stream, min=start, max="+", count=1)
            if not entries:
                return 0.0
            oldest = str(entries[0][0])
        return max(0.0, (now_ms() - int(oldest.split("-")[0])) / 1000)


def _ping(client: Any) -> None:
    """PING ``client``; a server refusing writes for its disk (``MISCONF``, which refuses PING
    too) still answers reads, so it counts as up: the console's storage line says the rest."""
    try:
        client.ping()
    except redis.ResponseError as exc:
        if not refuses_writes(exc):
            raise
