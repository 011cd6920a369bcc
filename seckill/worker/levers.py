"""The database catching up with the operator's levers: a pause, an end or a restock that took
effect in the sale while the database was away is recorded once it answers
(``seckill.store.sale.activity.levers``), in the orders worker, which writes the database anyway."""

from __future__ import annotations

import logging
import time

import redis

from seckill.store.plumbing.storage import RefusalNotice, refuses_writes
from seckill.store.sale.activity.levers import LeverRecords
from seckill.worker.stop import StopFlag

log = logging.getLogger(__name__)


class LeverCatchUp:
    """Every ``interval`` seconds, record the levers of the activities marked as lagging."""

    def __init__(self, levers: LeverRecords, interval: float = 1.0) -> None:
        self.levers = levers
        self.interval = interval
        self.storage = RefusalNotice(log, "the database catches up with the levers later")

    def run(self, stop: StopFlag) -> None:
        """Rounds until ``stop``; trouble is logged and the next round tries again (the marks
        stay in Redis until the database has the levers)."""
        while not stop:
            started = time.monotonic()
            try:
                done = self.levers.catch_up_all()
                if done:
                    log.info("recorded the levers of %d activities in the database", done)
                self.storage.passed()
            except (redis.RedisError, OSError) as exc:
                if refuses_writes(exc):  # a full disk: said once, not every second
                    self.storage.refused(exc)
                else:
                    log.warning("levers not caught up (%s: %s); retrying", type(exc).__name__,
                                exc)
            except Exception:  # a bug must not stop the orders worker: logged, next round
                log.exception("levers not caught up; retrying")
            stop.event.wait(max(0.0, self.interval - (time.monotonic() - started)))
