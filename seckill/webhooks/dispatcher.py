"""The dispatcher's loop: fan out, claim, send on each endpoint's own pool, record.

One thread runs the rounds; sends run on each endpoint's pool of ``per_endpoint`` threads, so a
hanging endpoint fills only its own pool and the loop waits on nothing but the outcomes' queue
(at most ``idle`` seconds). A round is one transaction: the outcomes of the attempts finished
since the last round, the fan-out of new events, and new claims for every endpoint with room
(claims an endpoint cannot finish within its lease are not taken; a claim whose lease ends too
soon to send within it is given back unsent). Several dispatchers may run at once: a delivery
is leased to one of them; a killed one's leases lapse and another sends the event again,
with the same ``webhook-id``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import random
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from seckill.domain.clock import now_ms
from seckill.sql import deliveries, outbox
from seckill.sql.deliveries import Claimed, Endpoint, Outcome
from seckill.sql.sealed_rows import WEBHOOK_SECRET
from seckill.sql.sealing import Keyring
from seckill.webhooks.options import DispatchOptions
from seckill.webhooks.sender import Attempt, Sender

log = logging.getLogger(__name__)

Clock = Callable[[], int]


@dataclasses.dataclass(eq=False)
class _Lane:
    """One endpoint's sender, its pool of threads, and its claims not finished yet."""

    endpoint: Endpoint
    sender: Sender
    pool: concurrent.futures.ThreadPoolExecutor
    outstanding: int = 0

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.sender.close()


@dataclasses.dataclass(frozen=True)
class _Done:
    lane: _Lane
    claimed: Claimed
    started_ms: int
    attempt: Attempt | None  # None: not attempted (stopping, or the lease too close to its end)


class Dispatcher:
    """Delivers the outbox's events to the endpoints until :meth:`run`'s ``stop`` is set."""

    def __init__(self, engine: sa.Engine, options: DispatchOptions | None = None,
                 clock: Clock | None = None, rng: random.Random | None = None, *,
                 keys: Keyring | None = None) -> None:
        self.engine = engine
        self.keys = keys or Keyring.from_environment()
        self.options = options or DispatchOptions()
        self.clock: Clock = clock or now_ms
        self.rng = rng or random.Random()
        self._lanes: dict[str, _Lane] = {}
        self._done: queue.Queue[_Done] = queue.Queue()
        self._outcomes: list[Outcome] = []
        self._releases: list[tuple[str, int]] = []
        # Claims being attempted here: one claimed again after its lease lapsed (a long pause)
        # is not sent a second time alongside.
        self._in_hand: set[tuple[str, int]] = set()
        self._stopping = threading.Event()
        self._targets: list[Endpoint] = []
        self._pruned_ms: int | None = None
        self._held = 0.0  # seconds the last round's transaction took
        self.sent = 0  # attempts finished, for the curious (bench)

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Rounds until ``stop`` is set; then the attempts in flight are finished, their
        outcomes stored, and the claims not attempted given back."""
        log.info("webhook dispatcher %s running", self.options.owner)
        try:
            while not stop.is_set():
                started = time.monotonic()
                if not self.step():
                    self._wait(self.options.idle)
                    continue
                rest = self._gap() - (time.monotonic() - started)
                if rest > 0:
                    stop.wait(rest)  # the attempts finishing meanwhile go in the next round
        finally:
            self.close()
        log.info("webhook dispatcher %s stopped", self.options.owner)

    def _gap(self) -> float:
        """The shortest time from one busy round's start to the next's. SQLite has one writer
        at a time and no queue for it: a writer waiting for the lock (an operator's lever,
        the orders worker) retries every 100 ms or so, and a dispatcher that took the lock
        back at a steady beat could starve it. So on SQLite the lock is left free at least
        twice as long as the round held it, 150 ms at least (more than one retry), at a
        jittered beat that no retrier can fall in step with."""
        if self.engine.dialect.name != "sqlite":
            return self.options.round_s
        gap = max(self.options.round_s, 3 * self._held, self._held + 0.15)
        return gap * self.rng.uniform(1.0, 1.5)

    def step(self) -> bool:
        """One round; whether it found anything to do (then the next round comes at once)."""
        self._collect()
        now = self.clock()
        try:
            progressed = self._round(now)
        except sa.exc.DBAPIError as exc:  # the database away a moment: try again next round
            log.warning("webhook dispatcher: database error (%s); trying again",
                        type(exc.orig).__name__ if exc.orig else exc)
            return False
        self._maybe_prune(now)
        return progressed

    def close(self) -> None:
        """Finish the attempts in flight (the claims not started are given back), store
        every outcome; the pools closed."""
        self._stopping.set()
        for lane in list(self._lanes.values()):
            lane.close()
        self._collect()
        for _ in range(3):
            try:
                with self.engine.begin() as conn:
                    self._store(conn)
                break
            except sa.exc.DBAPIError:
                log.warning("webhook dispatcher: could not store the last outcomes; "
                            "their leases lapse and they are sent again", exc_info=True)
                time.sleep(0.5)
        self._lanes.clear()

    # --- a round ---------------------------------------------------------------------------

    def _round(self, now: int) -> bool:
        options = self.options
        stored = len(self._outcomes) + len(self._releases)
        began = time.monotonic()
        # No network I/O in here: the sends run on the endpoints' pools, after the commit.
        with self.engine.begin() as conn:
            self._store(conn)
            fanned, targets = deliveries.fan_out(conn, now, options.batch)
            self._update_lanes(targets)
            claims: list[tuple[_Lane, list[Claimed]]] = []
            for lane in self._lanes.values():
                if lane.endpoint not in self._targets:
                    continue  # removed, or changed: finishing what it has
                room = min(options.batch, options.outstanding - lane.outstanding)
                got = deliveries.claim(conn, lane.endpoint.id, options.owner, now,
                                       options.lease_ms, room)
                if got:
                    claims.append((lane, got))
        self._held = time.monotonic() - began
        self._outcomes.clear()
        self._releases.clear()
        for lane, got in claims:
            for claimed in got:
                key = (claimed.endpoint_id, claimed.seq)
                if key in self._in_hand:
                    continue
                self._in_hand.add(key)
                lane.outstanding += 1
                lane.pool.submit(self._attempt, lane, claimed)
        return bool(stored or fanned or claims)

    def _store(self, conn: sa.Connection) -> None:
        deliveries.record(conn, self.options.owner, self._outcomes)
        deliveries.release(conn, self.options.owner, self._releases)

    def _update_lanes(self, targets: list[Endpoint]) -> None:
        """A lane for each new endpoint; a removed or changed one's lane closed once it has
        nothing in flight (a changed one gets a new lane then)."""
        self._targets = targets
        for endpoint_id, lane in list(self._lanes.items()):
            if lane.endpoint not in targets and lane.outstanding == 0:
                del self._lanes[endpoint_id]
                lane.close()
        for endpoint in targets:
            if endpoint.id not in self._lanes:
                self._lanes[endpoint.id] = self._lane(endpoint)

    def _lane(self, endpoint: Endpoint) -> _Lane:
        options = self.options
        # Opened once per lane: a lane lives as long as its endpoint's row is unchanged.
        opened = dataclasses.replace(
            endpoint, secret=self.keys.open(endpoint.secret, WEBHOOK_SECRET.context(endpoint.id)))
        sender = Sender(opened, attempt_timeout=options.attempt_timeout,
                        connect_timeout=options.connect_timeout,
                        connections=options.per_endpoint)
        pool = concurrent.futures.ThreadPoolExecutor(options.per_endpoint,
                                                     thread_name_prefix=f"webhook-{endpoint.id}")
        return _Lane(endpoint, sender, pool)

    # --- attempts (on the endpoint's pool) -------------------------------------------------

    def _attempt(self, lane: _Lane, claimed: Claimed) -> None:
        started = self.clock()
        attempt: Attempt | None = None
        try:
            margin = int(self.options.attempt_timeout * 1000) + 1000
            if not self._stopping.is_set() and started + margin < claimed.lease_until:
                attempt = lane.sender.send(claimed.event_id, claimed.body)
        except Exception as exc:  # never lose a claim: a bug is a failed attempt
            log.exception("webhook attempt of %s failed unexpectedly", claimed.event_id)
            attempt = Attempt(False, None, f"{type(exc).__name__}: {exc}"[:300])
        self._done.put(_Done(lane, claimed, started, attempt))

    def _wait(self, timeout: float) -> None:
        """Wait until an attempt finishes, ``timeout`` seconds at most."""
        try:
            self._take(self._done.get(timeout=timeout))
        except queue.Empty:
            return

    def _collect(self) -> None:
        while True:
            try:
                self._take(self._done.get_nowait())
            except queue.Empty:
                return

    def _take(self, done: _Done) -> None:
        done.lane.outstanding -= 1
        claimed, attempt = done.claimed, done.attempt
        self._in_hand.discard((claimed.endpoint_id, claimed.seq))
        if attempt is None:
            self._releases.append((claimed.endpoint_id, claimed.seq))
            return
        self.sent += 1
        at = self.clock()
        first = claimed.first_ms if claimed.first_ms is not None else done.started_ms
        attempts = claimed.attempts + 1
        if attempt.ok:
            status, counted, next_ms = deliveries.DELIVERED, "delivered", at
        elif at - first >= self.options.retry_hours * 3_600_000:
            status, counted, next_ms = deliveries.FAILED, "failed", at
        else:
            status, counted = deliveries.PENDING, "retried"
            next_ms = at + self.options.backoff_ms(attempts, self.rng)
        self._outcomes.append(Outcome(
            claimed.endpoint_id, claimed.seq, status, attempts, next_ms, first,
            done.started_ms, attempt.code, attempt.error, counted))

    # --- retention -------------------------------------------------------------------------

    def _maybe_prune(self, now: int) -> None:
        every = self.options.prune_every_s * 1000
        if self._pruned_ms is not None and now - self._pruned_ms < every:
            return
        self._pruned_ms = now
        try:
            gone = outbox.prune(self.engine, now - self.options.retention_s * 1000)
        except sa.exc.DBAPIError:
            log.warning("webhook dispatcher: pruning failed; trying again later", exc_info=True)
            return
        if gone:
            log.info("webhook retention: %d event(s) older than %d s pruned", gone,
                     self.options.retention_s)
