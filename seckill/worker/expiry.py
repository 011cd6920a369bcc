"""The payment window's expiry (``lua/expire.lua``), run by every orders worker in a thread of
its own: every ``EXPIRY_INTERVAL`` it expires the held orders past their pay_by on every
activity with a window (``seckill.store.sale.orders.payments`` says how holds work).

Why in the worker: it already runs wherever orders are stored, under ``seckill up``'s
supervision (restarted when it dies), with the Redis and database connections this needs; a
process of its own would be one more thing to deploy and supervise for a loop this small.
Several workers expiring at once is safe: an order leaves the set in the step that expires it.
"""

from __future__ import annotations

import logging
import time

import redis

from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.storage import RefusalNotice, refuses_writes
from seckill.store.sale.activity.recovery import Restorer
from seckill.worker.stop import StopFlag

log = logging.getLogger(__name__)

EXPIRY_INTERVAL = 0.25  # seconds between expiry rounds: a hold goes within this of pay_by
MAX_CALLS_PER_ROUND = 10_000  # per part: bounds a round (10,000 x the batch orders)


class Expirer:
    """Expires held orders past their pay_by on every activity with a payment window, every
    ``interval`` seconds; units that come back are announced (every process's sold-out flag
    for the activity drops)."""

    def __init__(self, client: Client, keys: KeySpace, book: OrderBook, batch: int = 200,
                 interval: float = EXPIRY_INTERVAL, refresh_seconds: float = 2.0) -> None:
        self.client = client
        self.keys = keys
        self.book = book
        self.scripts = Scripts(client)
        # Redis lost an activity: its holds come back with it, from the database.
        self.restorer = Restorer(client, keys, self.scripts, book)
        self.batch = batch
        self.interval = interval
        self.refresh_seconds = refresh_seconds
        self._activities: dict[str, int] = {}  # activity id -> parts
        self._refreshed_at = float("-inf")
        self.storage = RefusalNotice(log, "unpaid holds wait for their expiry")

    def activities(self) -> dict[str, int]:
        """The activities whose holds may still be due (re-read every ``refresh_seconds``)."""
        if time.monotonic() - self._refreshed_at >= self.refresh_seconds:
            self._refreshed_at = time.monotonic()
            try:
                # A day's grace past the last possible pay_by: holds a long outage left go too.
                self._activities = self.book.windowed_activities(
                    int(time.time() * 1000) - 86_400_000)
            except Exception as exc:  # the database away: the holds are Redis's business
                log.warning("could not list the activities with a payment window (%s); "
                            "expiring the %d known", type(exc).__name__, len(self._activities))
        return self._activities

    def expire(self, aid: str, shards: int) -> tuple[int, int]:
        """Expire every held order of ``aid`` past its pay_by; (orders expired, units back)."""
        orders = units = 0
        for tag in part_tags(aid, shards):
            for _ in range(MAX_CALLS_PER_ROUND):
                reply = self.scripts.expire(keys=self.keys.expire_keys(tag),
                                            args=[aid, self.batch])
                if reply[0] == "uninitialized":
                    # Redis lost it (a master's data, a FLUSHALL): rebuild it from the
                    # database, holds and deadlines included, and expire on the next round.
                    self.restorer.ensure(aid)
                    break
                if reply[0] != "expired":
                    break
                orders, units = orders + int(reply[1]), units + int(reply[2])
                if int(reply[3]) == 0:
                    break
        if units:
            try:
                self.client.publish(self.keys.stock_returned_channel(), aid)
            except redis.RedisError:
                log.warning("could not announce the units of %s's expired holds; the "
                            "sold-out flags' own check finds them", aid)
        if orders:
            log.info("activity %s: %d unpaid orders expired, %d units back on sale",
                     aid, orders, units)
        return orders, units

    def step(self) -> int:
        """One round over every activity with a payment window; the orders expired."""
        return sum(self.expire(aid, shards)[0] for aid, shards in self.activities().items())

    def run(self, stop: StopFlag) -> None:
        """Rounds every ``interval`` until ``stop``; Redis or database trouble is logged and
        the next round tries again (nothing is lost: the deadlines are in Redis)."""
        while not stop:
            started = time.monotonic()
            try:
                self.step()
                self.storage.passed()
            except (redis.RedisError, OSError) as exc:
                if refuses_writes(exc):  # a full disk: said once, not four times a second
                    self.storage.refused(exc)
                else:
                    log.warning("expiry round failed (%s: %s); retrying", type(exc).__name__,
                                exc)
            except Exception:  # the database away, among others: next round
                log.exception("expiry round failed; retrying")
            stop.event.wait(max(0.0, self.interval - (time.monotonic() - started)))
