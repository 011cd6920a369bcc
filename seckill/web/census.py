"""The per-activity series of ``/metrics``, read from the census at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from seckill.domain.activities import CONSOLE_STATES
from seckill.store.audit.census import CensusTaker


class CensusCollector(Collector):
    """Gauges per activity (label ``activity``) and ``seckill_redis_up``."""

    def __init__(self, taker: CensusTaker) -> None:
        self.taker = taker

    def collect(self) -> Iterator[Metric]:
        """The census as Prometheus gauges."""
        census = self.taker.take()
        yield GaugeMetricFamily("seckill_redis_up", "1 when Redis answered this scrape's PING.",
                                value=1 if census.redis_up else 0)

        def family(name: str, text: str, *labels: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=["activity", *labels])

        remaining = family("seckill_activity_remaining", "Units (packets) left; absent when "
                           "unlimited.")
        sold = family("seckill_activity_sold", "Units (packets) sold.")
        buyers = family("seckill_activity_buyers", "Users who bought.")
        orders = family("seckill_activity_orders", "Orders by status: pending (decided, not yet "
                        "stored), confirmed, cancelled.", "status")
        holds = family("seckill_activity_holds", "Orders held for payment (payment window).")
        waiting = family("seckill_activity_queue_waiting", "Users waiting in the queue.")
        paused = family("seckill_activity_paused", "1 while the operator has paused the sale.")
        state = family("seckill_activity_state", "1 for the activity's state (paused: paused "
                       "and not ended).", "state")
        oldest = family("seckill_orders_oldest_pending_seconds", "Age of the oldest decided "
                        "order the orders worker has not stored yet (0: none).")
        dead = family("seckill_dead_letters", "Entries in the activity's dead-letter stream.")
        inconsistent = family("seckill_activity_inconsistent", "1 while the activity's stock "
                              "counters disagree: purchases answer 503 inconsistent until "
                              "`seckill reconcile --repair`.")
        for count in [] if census.stale else census.counts:  # no stale numbers as current
            aid = count.activity.id
            # The deployment's health counts a rehearsal's orders too; the sale's numbers not.
            oldest.add_metric([aid], count.oldest_pending_s)
            dead.add_metric([aid], count.dead_letters)
            inconsistent.add_metric([aid], 1 if count.inconsistent else 0)
            if count.activity.rehearsal:
                continue
            if count.remaining is not None:
                remaining.add_metric([aid], count.remaining)
            sold.add_metric([aid], count.sold)
            buyers.add_metric([aid], count.buyers)
            for status, n in count.orders.items():
                orders.add_metric([aid, status], n)
            holds.add_metric([aid], count.holds)
            waiting.add_metric([aid], count.waiting)
            paused.add_metric([aid], 1 if count.activity.paused else 0)
            now = count.activity.console_state(census.taken_ms)
            for name in CONSOLE_STATES:
                state.add_metric([aid, name], 1 if name == now else 0)
        yield from (remaining, sold, buyers, orders, holds, waiting, paused, state, oldest, dead,
                    inconsistent)
