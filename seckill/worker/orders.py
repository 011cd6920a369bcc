"""The orders worker: every activity's order stream into the database, exactly once.

The loop: read new entries through one consumer group (``XREADGROUP``, waiting at most
``block_ms``, so the stop flag is seen at least that often), store them in one transaction
(idempotent inserts), then mark the buyers confirmed and ``XACK`` the entries in one script
(``lua/confirm.lua``, keys in the activity's slot). Acknowledging only after the commit means a
crash anywhere leaves the entries pending; ``XAUTOCLAIM`` hands the entries a dead consumer left
pending to a live one, and a redelivered entry changes nothing in the database. The mark and the
acknowledgement are one step because they used to be two: a crash between an ``XACK`` and the
mark left orders stored but ``pending`` forever, since nothing retried the mark
(``tests/test_order_marks.py`` cuts the connection right after the acknowledgement). An update
read before its order is kept pending until the order is stored (``seckill.worker.deferred``).

Every command names one stream's keys (one slot), so all of it runs on a cluster too: how the
streams are read there, and how an ended activity's drained stream is retired and looked at
again, is ``seckill.worker.streams``'s; trimming acknowledged entries (by id, never by length)
and removing the consumers that are gone (once their entries are reclaimed) is
``seckill.worker.groups``'s; with ``SECKILL_DURABILITY=replica`` nothing is stored that no
replica of its master has (``seckill.worker.replicas``).

What each failure does:

* an entry that cannot be an order goes to its activity's dead-letter stream with the reason, is
  acknowledged and counted (``seckill.worker.letters``); it never blocks the rest. An entry the
  database rejects ``max_deliveries`` times goes the same way.
* the database down: the batch stays pending, the worker retries with backoff and says so in
  its log; nothing is read ahead, nothing is lost.
* Redis away (one server down, a cluster node down, a failover under way: ``ConnectionError``,
  ``TimeoutError``, ``CLUSTERDOWN``, ``TRYAGAIN``, a slot map that cannot be read yet), or
  refusing writes for a full disk: the worker logs it, waits 1 s and reads again, first
  re-reading its own pending entries (from id 0), since a read whose reply was lost leaves
  entries delivered to it and never stored. After a failover the replica is the master and may
  lack the last reads and acknowledgements of the old one: those entries are delivered again,
  and stored once (the database ignores an order it has; ``lua/confirm.lua`` marks and
  acknowledges again). One gap on a cluster: redis-py's cluster pipeline sends again, one by
  one, the commands of a node whose reply was cut (it does not know which ran); if that second
  read succeeds, the entries of the lost reply stay pending for this consumer until
  ``XAUTOCLAIM`` takes them back (``claim_idle_ms``): late, never lost.

The stop (``seckill.worker.stop``): on the first SIGTERM or SIGINT the worker finishes the batch
in hand (stores and acknowledges it), hands back the updates it holds and removes its own
consumer name, then exits; on the second it exits at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from typing import Any

import redis
import sqlalchemy as sa

from seckill import metrics
from seckill.domain.activities import is_activity_id
from seckill.domain.clock import now_ms
from seckill.domain.entries import Cancel, Paid, Poison, parse_entry
from seckill.domain.orders import OrderRow
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace, hash_tag
from seckill.store.plumbing.parts import activity_of_tag, part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.storage import RefusalNotice, refuses_writes
from seckill.worker import groups, replicas, streams
from seckill.worker.deferred import Deferred, Held
from seckill.worker.groups import GROUP
from seckill.worker.letters import Letters
from seckill.worker.options import WorkerOptions
from seckill.worker.stop import StopFlag
from seckill.worker.streams import Batch, Retirement, redis_away

log = logging.getLogger(__name__)

__all__ = ["GROUP", "OrdersWorker", "WorkerOptions"]


class OrdersWorker:
    """One consumer of the group: moves the activities' order streams into the database."""

    def __init__(self, client: Client, keys: KeySpace, book: OrderBook,
                 options: WorkerOptions | None = None) -> None:
        self.client = client
        self.keys = keys
        self.book = book
        self.options = options = options or WorkerOptions()
        self.scripts = Scripts(client)
        self.consumer = options.consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.roster = groups.Roster(self.scripts)
        # The updates read before their order (seckill.worker.deferred).
        self.deferred = Deferred(options.claim_idle_ms, options.max_deliveries)
        self.letters = Letters(client, keys)
        self._streams: dict[str, str] = {}  # the streams read: stream key -> activity id
        self.retirement = Retirement(options.retire_grace_ms, options.recheck_seconds)
        self._grouped: set[str] = set()
        self._refreshed_at = float("-inf")
        self._housekept_at = time.monotonic()
        # After a Redis failure, entries this consumer read may be unacknowledged (the XACK was
        # lost, or Redis restarted from its AOF): re-read them (XREADGROUP from id 0) before
        # new ones, rather than leave them for XAUTOCLAIM after ``claim_idle_ms``.
        self._own_pending = False
        # Its reads of the streams are writes: a full disk refuses them until it has room.
        self.storage = RefusalNotice(log, "the orders stay pending in their streams")

    # -- streams and groups --------------------------------------------------------------

    def refresh_streams(self, force: bool = False) -> None:
        """Follow new activities' streams (at most every ``refresh_seconds``, unless ``force``);
        an activity already ended starts retired, to be checked before it is read."""
        if not force and time.monotonic() - self._refreshed_at < self.options.refresh_seconds:
            return
        self._refreshed_at = time.monotonic()
        try:
            known = self.book.activity_ends()
        except sa.exc.OperationalError as exc:
            # Database away: keep serving the streams already known; the store step retries.
            log.error("database unavailable (%s); cannot look for new activities yet",
                      exc.orig or exc)
            known = {}
        self.retirement.ends.update({aid: ends for aid, (ends, _) in known.items()})
        now = now_ms()
        for aid, (_, shards) in known.items():
            for tag in part_tags(aid, shards):  # a sharded activity: one stream per part
                stream = self.keys.orders(tag)
                if stream in self._streams or stream in self.retirement.retired:
                    continue
                if self.retirement.ended(aid, now):
                    self.retirement.add(stream, aid)
                else:
                    self._streams[stream] = aid
        self.ensure_groups()

    def retire(self) -> None:
        """Stop reading the streams of activities ended and drained; read again the retired
        ones on which something turned up (the rule: :class:`Retirement`)."""
        retire, revive = self.retirement.review(self.client, self._streams, now_ms())
        for stream in retire:
            del self._streams[stream]
            groups.trim(self.client, stream)
            self.roster.leave(stream, self.consumer)
            self._grouped.discard(stream)
            log.info("%s: the activity has ended and its stream is drained: no longer read",
                     stream)
        for stream, aid in revive.items():
            log.info("%s: entries after the activity's end: reading it again", stream)
            self._streams[stream] = aid
        if revive:
            self.ensure_groups()

    def ensure_groups(self) -> None:
        """Create the consumer group on every followed stream that does not have it yet."""
        for stream in self._streams:
            if stream in self._grouped:
                continue
            try:
                # From id 0, never "$": entries written before the group existed are orders too.
                self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._grouped.add(stream)

    # -- the loop ------------------------------------------------------------------------

    def run(self, stop: StopFlag) -> None:
        """Run cycles until ``stop`` is set, waiting out Redis outages (on a cluster: a node
        down, a failover under way, until a replica has taken over) and its refusals of
        writes for a full disk."""
        log.info("orders worker %s started", self.consumer)
        while not stop:
            try:
                self.step(stop)
                self.storage.passed()
            except streams.CAUGHT as exc:
                if refuses_writes(exc):
                    self.storage.refused(exc)
                elif redis_away(exc):
                    log.warning("Redis unreachable (%s: %s); retrying in 1s",
                                type(exc).__name__, exc)
                else:
                    raise
                self._own_pending = True
                self._sleep(1.0, stop)
        self.deferred.hand_back(self.client, self.consumer)  # the next worker takes them now
        self.leave()
        log.info("orders worker %s stopped", self.consumer)

    def step(self, stop: StopFlag | None = None) -> int:
        """One cycle: read (or reclaim) a batch, store it, acknowledge it. Returns entries seen."""
        self.refresh_streams()
        if time.monotonic() - self._housekept_at >= 1.0:
            self._housekept_at = time.monotonic()
            self.retry_deferred()
            handled = self.reclaim(stop)
            self.trim()
            self.retire()
            if handled:
                return handled
        if not self._streams:
            self._sleep(self.options.block_ms / 1000, stop)
            return 0
        own = self._own_pending
        got = streams.read(self.client, self.consumer, list(self._streams), "0" if own else ">",
                           self.options.batch, None if own else self.options.block_ms)
        if got.missing:
            # The stream or its group vanished (Redis lost its data): recreate, read again.
            log.warning("consumer group missing on %d stream(s); recreating", len(got.missing))
            self._grouped.difference_update(got.missing)
            self.ensure_groups()
        batch = got.batch
        if not own and not got.entries and not got.missing and streams.is_cluster_client(
                self.client):
            self._sleep(self.options.poll_ms / 1000, stop)  # nothing anywhere: the cluster's BLOCK
        if own:
            # The updates held on purpose are pending too: re-reading them is no progress.
            batch = [(s, [(i, f) for i, f in entries if (s, i) not in self.deferred])
                     for s, entries in self._ack_deleted(batch)]
            if not any(entries for _, entries in batch):
                self._own_pending = False
                return 0
            log.info("re-reading %d entries read before Redis failed",
                     sum(len(entries) for _, entries in batch))
        return self.handle(batch, stop)

    def _ack_deleted(self, batch: Batch) -> Batch:
        """Our pending history may name entries deleted from the stream since: nothing to store."""
        kept = []
        for stream, entries in batch:
            gone = [entry_id for entry_id, fields in entries if not fields]
            if gone:
                self.client.xack(stream, GROUP, *gone)
            kept.append((stream, [(i, f) for i, f in entries if f]))
        return kept

    def handle(self, batch: Batch, stop: StopFlag | None, reclaimed: bool = False) -> int:
        """Parse a batch (``reclaimed``: taken over from another consumer), dead-letter the
        poison, store the rest; returns the entries seen."""
        if self.options.replicas:
            batch, held = replicas.confirmed(self.client, self.keys, batch, self.options.replicas,
                                             self.options.replica_timeout_ms)
            self._own_pending = self._own_pending or held
        rows: list[tuple[str, str, OrderRow]] = []
        cancels: list[tuple[str, str, Cancel | Paid]] = []
        seen = 0
        for stream, entries in batch:
            aid = self._streams.get(stream) or _aid_of_stream(stream)
            for entry_id, fields in entries:
                seen += 1
                try:
                    parsed = parse_entry(aid, fields)
                except Poison as exc:
                    self.dead_letter(stream, aid, entry_id, fields, str(exc))
                    continue
                if isinstance(parsed, Cancel | Paid):
                    cancels.append((stream, entry_id, parsed))
                else:
                    rows.append((stream, entry_id, parsed))
        if rows or cancels:
            self.store(rows, cancels, stop, reclaimed)
        return seen

    def store(
        self,
        rows: list[tuple[str, str, OrderRow]],
        cancels: list[Held],
        stop: StopFlag | None,
        reclaimed: bool = False,
    ) -> None:
        """Store and acknowledge a batch (one transaction), retrying while the database is
        down; the updates held for their orders go with it (:mod:`seckill.worker.deferred`)."""
        reclaimed_ids = {(s, e) for s, e, _ in cancels} if reclaimed else set()
        cancels = self.deferred.with_batch(cancels)
        delay = 0.2
        while True:
            try:
                outcome = self.book.store([r for _, _, r in rows], [c for _, _, c in cancels])
                break
            except sa.exc.OperationalError as exc:
                # Connection refused, database locked or read-only, server gone: transient.
                log.error("database unavailable (%s); %d entries stay pending, retrying in %.1fs",
                          exc.orig or exc, len(rows) + len(cancels), delay)
                if stop:
                    log.warning("stopping with %d entries pending; the next worker claims them",
                                len(rows) + len(cancels))
                    return
                self._sleep(delay, stop)
                delay = min(delay * 2, self.options.backoff_max)
            except sa.exc.DBAPIError as exc:
                # Something in the batch itself is refused: store one by one to isolate it.
                log.error("database refused a batch (%s); isolating the bad entries", exc.orig)
                self._store_one_by_one(rows, cancels, reclaimed_ids)
                return
        stored = [(s, e, r) for s, e, r in rows if r.order_id not in outcome.conflicted]
        for stream, entry_id, row in rows:
            if row.order_id in outcome.conflicted:
                self.dead_letter(stream, row.activity_id, entry_id, dataclasses.asdict(row),
                                 "the buyer already holds another live order")
        self._acknowledge(stored, self.deferred.settle(cancels, outcome.orphans, reclaimed_ids,
                                                       self.letters))

    def retry_deferred(self) -> None:
        """Apply the held updates whose order is stored by now; acknowledge them."""
        self._acknowledge([], self.deferred.retry(self.book, self.letters))

    def _store_one_by_one(
        self, rows: list[tuple[str, str, OrderRow]], cancels: list[Held],
        reclaimed: set[tuple[str, str]],
    ) -> None:
        for stream, entry_id, row in rows:
            try:
                conflicted = self.book.store(
                    [row], [c for _, _, c in cancels if c.order_id == row.order_id]).conflicted
            except sa.exc.OperationalError:
                return  # the database went away: everything left stays pending
            except sa.exc.DBAPIError as exc:
                if self.letters.deliveries(stream, entry_id) >= self.options.max_deliveries:
                    self.dead_letter(stream, row.activity_id, entry_id,
                                     dataclasses.asdict(row), f"database refused it: {exc.orig}")
                continue
            if conflicted:
                self.dead_letter(stream, row.activity_id, entry_id, dataclasses.asdict(row),
                                 "the buyer already holds another live order")
            else:
                self._acknowledge([(stream, entry_id, row)], [])
        for stream, entry_id, cancel in cancels:
            try:
                orphans = self.book.store([], [cancel]).orphans
            except sa.exc.DBAPIError:
                continue
            self._acknowledge([], self.deferred.settle([(stream, entry_id, cancel)], orphans,
                                                   reclaimed, self.letters))

    def _acknowledge(
        self, rows: list[tuple[str, str, OrderRow]], cancels: list[Held]
    ) -> None:
        """Mark the stored orders confirmed and acknowledge their entries: one atomic script
        per stream (``lua/confirm.lua``), so an acknowledged order is never left unmarked."""
        ids: dict[str, list[str]] = {}
        pairs: dict[str, list[str]] = {}
        for stream, entry_id, row in rows:
            ids.setdefault(stream, []).append(entry_id)
            pairs.setdefault(stream, []).extend([row.user_id, row.order_id])
        for stream, entry_id, _ in cancels:
            ids.setdefault(stream, []).append(entry_id)
        for stream, acked in ids.items():
            self.scripts.confirm(keys=[self.keys.buyers(hash_tag(stream)), stream],
                                 args=[GROUP, len(acked), *acked, *pairs.get(stream, [])])
        metrics.ORDERS_STORED.inc(len(rows))

    # -- failures ------------------------------------------------------------------------

    def dead_letter(
        self, stream: str, aid: str, entry_id: str, fields: dict[str, Any], reason: str
    ) -> None:
        """Move an entry to its activity's dead-letter stream, with the reason; acknowledge it."""
        self.letters.send(stream, entry_id, fields, reason)

    def reclaim(self, stop: StopFlag | None) -> int:
        """Take over entries another consumer left pending for ``claim_idle_ms``."""
        handled = 0
        for stream in list(self._streams):
            try:
                reply: Any = self.client.xautoclaim(stream, GROUP, self.consumer,
                                                    self.options.claim_idle_ms, "0-0",
                                                    count=self.options.batch)
            except redis.ResponseError as exc:
                if "NOGROUP" in str(exc):
                    self._grouped.discard(stream)
                    self.ensure_groups()
                    continue
                raise
            entries = [(str(i), f) for i, f in reply[1] if f]
            if entries:
                log.info("reclaimed %d entries left pending on %s", len(entries), stream)
                handled += self.handle([(stream, entries)], stop, reclaimed=True)
            self.forget_dead(stream)
        return handled

    def forget_dead(self, stream: str) -> list[str]:
        """Remove the consumers of ``stream`` that are gone: silent for ``consumer_idle_ms``
        and holding nothing pending (their entries reclaimed first); never this one."""
        removed = self.roster.forget_dead(stream, self.options.gone_after_ms, self.consumer)
        if removed:
            log.info("removed consumers gone from %s: %s", stream, ", ".join(removed))
        return removed

    def leave(self) -> None:
        """On a warm stop: remove this consumer from every group where it holds nothing."""
        for stream in list(self._grouped):
            try:
                self.roster.leave(stream, self.consumer)
            except redis.RedisError as exc:
                log.warning("could not leave the group of %s (%s)", stream, exc)
                return

    def trim(self) -> None:
        """Drop acknowledged entries: everything below the oldest entry still needed."""
        for stream in list(self._grouped):
            groups.trim(self.client, stream)

    @staticmethod
    def _sleep(seconds: float, stop: StopFlag | None) -> None:
        if stop is not None:
            stop.event.wait(seconds)
        else:
            time.sleep(seconds)


def _aid_of_stream(stream: str) -> str:
    aid = activity_of_tag(hash_tag(stream))
    return aid if is_activity_id(aid) else ""
