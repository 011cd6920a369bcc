"""Prometheus metrics, defined once per process.

Under gunicorn each worker is a process; when ``PROMETHEUS_MULTIPROC_DIR`` is set (``seckill
up`` sets it) ``/metrics`` aggregates every worker's numbers, otherwise it shows this one.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

REQUESTS = Counter(
    "seckill_requests_total",
    "Requests answered, by endpoint and outcome (ok or the contract's error code).",
    ["endpoint", "outcome"],
)
PURCHASE_SECONDS = Histogram(
    "seckill_purchase_seconds",
    "Time to answer a purchase, edge included, by outcome.",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
RATELIMIT_FAILURES = Counter(
    "seckill_ratelimit_failures_total",
    "Requests let through because the rate limiter's Redis could not be reached (fail open).",
)

_answered: dict[tuple[str, str], Any] = {}
_purchase_seconds: dict[str, Any] = {}


def answered(endpoint: str, outcome: str) -> None:
    """Count one answered request. The labelled children are kept (``labels()`` looks them
    up under a lock on every call); endpoints and outcomes are a small fixed set."""
    child = _answered.get((endpoint, outcome))
    if child is None:
        child = _answered[endpoint, outcome] = REQUESTS.labels(endpoint, outcome)
    child.inc()


def purchase_took(outcome: str, seconds: float) -> None:
    """Record how long a purchase took to answer, by outcome (children kept, as in ``answered``)."""
    child = _purchase_seconds.get(outcome)
    if child is None:
        child = _purchase_seconds[outcome] = PURCHASE_SECONDS.labels(outcome)
    child.observe(seconds)


ACTIVITY_OUTCOMES = Counter(
    "seckill_activity_outcomes_total",
    "Answers of the hot routes (purchase URL, purchase, queue) per activity this process knows, "
    "by outcome (ok or the contract's error code).",
    ["activity", "outcome"],
)
_activity_answered: dict[tuple[str, str], Any] = {}


def activity_answered(activity: str, outcome: str) -> None:
    """Count one hot-route answer for an activity; the caller passes known activities only,
    so a flood of made-up ids cannot grow the label set."""
    child = _activity_answered.get((activity, outcome))
    if child is None:
        child = _activity_answered[activity, outcome] = ACTIVITY_OUTCOMES.labels(activity, outcome)
    child.inc()


CLUSTER_RESENDS = Counter(
    "seckill_cluster_resends_total",
    "Calls sent again on a Redis Cluster because the reply proved they had not run, by reason "
    "(moved, ask, tryagain, clusterdown, not_connected).",
    ["reason"],
)
ORDERS_STORED = Counter(
    "seckill_orders_stored_total",
    "Orders the worker committed to the database and acknowledged.",
)
DEAD_LETTERS = Counter(
    "seckill_orders_dead_lettered_total",
    "Stream entries moved to a dead-letter stream (bad data, or refused too often).",
)


class Kept:
    """The text of ``collectors`` (what is read from the store and the database at a scrape,
    the same in every process), generated at most once every ``ttl`` seconds per process; a
    scrape in between gets the last text. One reading at a time: a scrape that arrives during
    it gets the last text at once (its numbers at most a reading's time older), so any number
    of scrapers cost one reading a second and none waits behind a slow one; only a scrape
    with no text yet waits for the first (the lock is gevent's in a gevent worker)."""

    def __init__(self, *collectors: Collector, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self._registry.register(collector)
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._text: bytes | None = None

    def text(self) -> bytes:
        """The collectors' text, read now if the last reading began ``ttl`` seconds ago and
        no other is under way."""
        kept = self._text
        if kept is not None and (time.monotonic() - self._read_at < self.ttl
                                 or not self._lock.acquire(blocking=False)):
            return kept
        if kept is None:
            self._lock.acquire()
        try:
            now = time.monotonic()
            if self._text is None or now - self._read_at >= self.ttl:
                self._read_at = now  # from its start: a slow reading is not followed at once
                self._text = generate_latest(self._registry)
            return self._text
        finally:
            self._lock.release()


def render(kept: Kept | None = None) -> tuple[bytes, str]:
    """The ``/metrics`` body and its content type (every worker's numbers in multiprocess mode),
    then ``kept``'s text."""
    multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc_dir:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
        body = generate_latest(registry)
    else:
        body = generate_latest()
    if kept is not None:
        body += kept.text()
    return body, CONTENT_TYPE_LATEST


# Webhooks (issue #27): read from the database at scrape time (the deliveries' rows and the
# endpoints' counters), the same in every process; seckill.sql.deliveries.webhook_numbers.
@dataclasses.dataclass(frozen=True)
class WebhookNumbers:
    """Per endpoint (id, delivered, retried, failed) attempts; the pending deliveries; the
    age of the oldest event not yet delivered (0: none)."""

    endpoints: list[tuple[str, int, int, int]]
    backlog: int
    oldest_undelivered_s: float


class WebhookCollector(Collector):
    """``seckill_webhook_deliveries_total{endpoint,outcome}``, ``seckill_webhook_backlog`` and
    ``seckill_webhook_oldest_undelivered_seconds``, from ``read()`` at each scrape (nothing
    when it fails: the database's own health is ``/healthz``'s)."""

    def __init__(self, read: Callable[[], WebhookNumbers]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        """The webhooks' series, read now."""
        try:
            numbers = self.read()
        except Exception:  # a scrape must not fail for a database blip
            logging.getLogger("seckill.metrics").warning("webhook metrics unavailable",
                                                         exc_info=True)
            return
        attempts = CounterMetricFamily(
            "seckill_webhook_deliveries", "Webhook delivery attempts by endpoint and outcome "
            "(delivered; retried: failed, tried again later; failed: given up).",
            labels=["endpoint", "outcome"])
        for endpoint, delivered, retried, failed in numbers.endpoints:
            attempts.add_metric([endpoint, "delivered"], delivered)
            attempts.add_metric([endpoint, "retried"], retried)
            attempts.add_metric([endpoint, "failed"], failed)
        yield attempts
        yield GaugeMetricFamily("seckill_webhook_backlog", "Webhook deliveries pending.",
                                value=numbers.backlog)
        yield GaugeMetricFamily("seckill_webhook_oldest_undelivered_seconds",
                                "Age of the oldest event not yet delivered to every endpoint "
                                "(0: none).", value=numbers.oldest_undelivered_s)


class StorageReading(Protocol):
    """What :class:`StorageCollector` reads (``seckill.store.plumbing.storage.Storage``)."""

    @property
    def writable(self) -> bool:
        """Whether the store takes writes."""

    @property
    def available_bytes(self) -> int | None:
        """The room left on the local data folder (None: no such folder here)."""


class StorageCollector(Collector):
    """``seckill_storage_writable`` and ``seckill_data_disk_available_bytes``, from ``read()``
    at each scrape (nothing when it fails)."""

    def __init__(self, read: Callable[[], StorageReading]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        """The storage's series, read now."""
        try:
            found = self.read()
        except Exception:  # a scrape must not fail for it
            logging.getLogger("seckill.metrics").warning("storage metrics unavailable",
                                                         exc_info=True)
            return
        yield GaugeMetricFamily(
            "seckill_storage_writable", "0 while the store refuses writes for its disk (Redis "
            "cannot append to its AOF, or the data folder is full): purchases answer 503 "
            "storage.", value=1 if found.writable else 0)
        if found.available_bytes is not None:
            yield GaugeMetricFamily("seckill_data_disk_available_bytes", "Bytes left on the "
                                    "data folder's disk.", value=found.available_bytes)
