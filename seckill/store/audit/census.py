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
import time
from typing import Any

import redis

from seckill.domain.activities import Activity, counters_disagree
from seckill.domain.clock import now_ms
from seckill.metrics import Latest
from seckill.store.plumbing.connection import Client, address_of, is_cluster_client, masters
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.storage import refuses_writes
from seckill.store.sale.activity.controls import SaleControls
from seckill.store.sale.activity.recovery import ORDERS_GROUP
from seckill.store.sale.admission.queue import AdmissionQueue
from seckill.store.sale.orders.payments import Payments
from seckill.store.sale.orders.stats import StockStats

log = logging.getLogger(__name__)

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
        # Monotonic: the census's age, not a time of day (a reading is never shared).
        self._latest: Latest[Census] = Latest(self._timed, ttl, clock=time.monotonic)
        self._good: Census | None = None  # the last complete reading

    @property
    def ttl(self) -> float:
        """How long a census is kept before it is taken again, seconds."""
        return self._latest.ttl

    @ttl.setter
    def ttl(self, ttl: float) -> None:
        self._latest.ttl = ttl

    def take(self) -> Census:
        """The census, fresh or at most ``ttl`` seconds old; while another caller takes it,
        the last one at once (only the first ever waits: there is none yet)."""
        return self._latest.get()

    def _timed(self, _last: tuple[float, Census] | None) -> tuple[float, Census]:
        census = self._take()
        return time.monotonic(), census  # kept from its end, as a reading's age

    def _take(self) -> Census:
        at = now_ms()
        try:
            _ping(self.client)
            up = True
        except redis.RedisError as exc:
            return self._stale(at, False, exc, self._nodes(False, exc))
        nodes = self._nodes(True, None)
        try:
            counts = self._counts(self._recent(at))
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

    def _counts(self, activities: list[Activity]) -> list[Count]:
        """Every activity's numbers, read together: a few round trips and one query of the
        stored orders whatever their number (read one by one, a scrape's wait grew with every
        activity, and most with a busy Redis)."""
        stats = self.stats.of_all([a.id for a in activities])
        found = [(a, s) for a, s in zip(activities, stats, strict=True) if s is not None]
        ids = [a.id for a, _ in found]
        payments = self.payments.counts_all(ids)
        queued = [a.id for a, _ in found if a.queued]
        waiting = {aid: view.waiting for aid, view in zip(queued, self.queue.states(queued),
                                                           strict=True)}
        tags = {a.id: part_tags(a.id, a.shards) for a, _ in found}
        parts = self._parts([tag for aid in ids for tag in tags[aid]])
        counts = []
        for (activity, numbers), paid in zip(found, payments, strict=True):
            mine = [parts[tag] for tag in tags[activity.id]]
            counts.append(Count(
                activity=activity, remaining=numbers.remaining, sold=numbers.sold,
                buyers=numbers.buyers,
                orders={"pending": numbers.pending, "confirmed": numbers.confirmed,
                        "cancelled": numbers.cancelled},
                holds=paid["due"] if paid else 0, waiting=waiting.get(activity.id, 0),
                oldest_pending_s=max((part.oldest_pending_s for part in mine), default=0.0),
                dead_letters=sum(part.dead_letters for part in mine),
                # Whether the counters of one of the meta hashes disagree, as the purchase
                # script judges them (:func:`counters_disagree`).
                inconsistent=any(part.inconsistent for part in mine)))
        return counts

    def _parts(self, tags: list[str]) -> dict[str, _Part]:
        """Each part's orders stream, dead letters and counters, in two round trips."""
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.xinfo_groups(self.keys.orders(tag))
            pipe.xlen(self.keys.dead_letters(tag))
            pipe.hmget(self.keys.meta(tag), COUNTERS)
        replies = pipe.execute(raise_on_error=False)
        groups, dead, counters = replies[0::3], replies[1::3], replies[2::3]
        for reply in (*dead, *counters):
            if isinstance(reply, Exception):
                raise reply
        # The oldest entry the worker has not acknowledged: the oldest delivered but not
        # acknowledged, else the first never delivered (acknowledged ones may linger until
        # the worker trims them, so the stream's head is not the answer).
        pipe = self.client.pipeline(transaction=False)
        streams = []
        for tag, found in zip(tags, groups, strict=True):
            if isinstance(found, redis.ResponseError):  # no stream yet: nothing decided
                continue
            if isinstance(found, Exception):
                raise found
            group = next((g for g in found if g["name"] == ORDERS_GROUP), None)
            stream = self.keys.orders(tag)
            if group is not None:
                pipe.xpending(stream, ORDERS_GROUP)
            start = "-" if group is None else f"({group['last-delivered-id']}"
            pipe.xrange(stream, min=start, max="+", count=1)
            streams.append((tag, group is not None))
        replies = iter(pipe.execute() if streams else [])
        oldest: dict[str, str] = {}
        for tag, grouped in streams:
            summary: Any = next(replies) if grouped else None
            entries: Any = next(replies)
            if summary is not None and summary["pending"]:
                oldest[tag] = str(summary["min"])
            elif entries:
                oldest[tag] = str(entries[0][0])
        at = now_ms()
        return {tag: _Part(
            oldest_pending_s=(max(0.0, (at - int(oldest[tag].split("-")[0])) / 1000)
                              if tag in oldest else 0.0),
            dead_letters=int(dead_letters),
            inconsistent=counters_disagree(*fields))
            for tag, dead_letters, fields in zip(tags, dead, counters, strict=True)}


@dataclasses.dataclass(frozen=True, slots=True)
class _Part:
    """What the census reads of one part of an activity (the activity itself: unsharded)."""

    oldest_pending_s: float  # 0: none
    dead_letters: int
    inconsistent: bool


def _ping(client: Any) -> None:
    """PING ``client``; a server refusing writes for its disk (``MISCONF``, which refuses PING
    too) still answers reads, so it counts as up: the console's storage line says the rest."""
    try:
        client.ping()
    except redis.ResponseError as exc:
        if not refuses_writes(exc):
            raise
