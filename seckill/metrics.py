"""Prometheus metrics, defined once per process.

Under gunicorn each worker is a process; when ``PROMETHEUS_MULTIPROC_DIR`` is set (``seckill
up`` sets it) ``/metrics`` aggregates every worker's numbers, otherwise it shows this one.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

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

log = logging.getLogger(__name__)


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


class Shared(Protocol):
    """Where the processes of a deployment share ``Kept``'s text (seckill.store.audit.shared):
    each call may raise (the store is away), and :class:`Kept` then reads on its own."""

    def fetch(self) -> tuple[float, bytes] | None:
        """The shared text and when its reading began (Unix seconds); None: there is none."""

    def claim(self) -> bool:
        """Whether this process may read now (no other is reading)."""

    def publish(self, taken: float, text: bytes) -> None:
        """Share ``text``, read from ``taken``, and end this process's claim."""


T = TypeVar("T")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_PLAIN_TYPES = {"gauge": "gauge", "counter": "counter", "unknown": "untyped"}


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


class _Listed:
    """Metric families already collected, as a registry gives them (for generate_latest)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def text_of(registry: CollectorRegistry) -> bytes:
    """``generate_latest(registry)``, byte for byte, made faster for what the census and its
    kin collect (gauges and counters of plain names, thousands of samples): prometheus_client
    checks and formats each sample through several calls, most of a reading's rendering.
    Anything else (histograms, timestamps, OpenMetrics' extra samples) goes to
    generate_latest whole."""
    families = list(registry.collect())
    out: list[str] = []
    for metric in families:
        kind = _PLAIN_TYPES.get(metric.type)
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        if kind is None or not _NAME.fullmatch(name):
            return generate_latest(_Listed(families))
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for sample in metric.samples:
            if (sample.timestamp is not None or sample.name != name
                    or not all(_LABEL.fullmatch(k) for k in sample.labels)):
                return generate_latest(_Listed(families))
            if sample.labels:
                labels = ",".join(f'{k}="{_label_value(v)}"'
                                  for k, v in sorted(sample.labels.items()))
                out.append(f"{name}{{{labels}}} {floatToGoString(sample.value)}\n")
            else:
                out.append(f"{name} {floatToGoString(sample.value)}\n")
    return "".join(out).encode("utf-8")


class Latest(Generic[T]):
    """A value made by ``make`` (given the last (made, value), it returns the new one and when
    it was made, by ``clock``) and made again once it is ``ttl`` seconds old. One making at a
    time: a caller that arrives during it gets the last value at once (at most a making's
    time older), so any number of callers cost one making per ``ttl`` and none waits behind
    a slow one; only a caller with no value yet waits for the first (the lock is gevent's in
    a gevent worker)."""

    def __init__(self, make: Callable[[tuple[float, T] | None], tuple[float, T]],
                 ttl: float, clock: Callable[[], float] = time.time) -> None:
        self.make = make
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, T] | None = None

    def get(self) -> T:
        """The value, made now if it is ``ttl`` seconds old and no other making is under way."""
        last = self._last
        if last is not None and (self.clock() - last[0] < self.ttl
                                 or not self._lock.acquire(blocking=False)):
            return last[1]
        if last is None:
            self._lock.acquire()
        try:
            last = self._last
            if last is None or self.clock() - last[0] >= self.ttl:
                last = self._last = self.make(last)
            return last[1]
        finally:
            self._lock.release()


class Kept:
    """The text of ``collectors`` (what is read from the store and the database at a scrape,
    the same in every process), read at most once every ``ttl`` seconds, as :class:`Latest`.
    With ``shared``, once per ``ttl`` for the whole deployment: a process whose text is old
    takes the shared one if it is newer; only if that is old too does it claim the reading,
    and if another process has it, it keeps serving its own text (stale while reading). When
    the store is away, each process reads on its own, as without ``shared`` (its census then
    says so: ``seckill_redis_up`` 0, no stale numbers)."""

    def __init__(self, *collectors: Collector, ttl: float = 1.0,
                 shared: Shared | None = None) -> None:
        self.shared = shared
        self._registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self._registry.register(collector)
        self._latest = Latest(self._read, ttl)

    @property
    def ttl(self) -> float:
        """How long a text is served before it is read again, seconds."""
        return self._latest.ttl

    def text(self) -> bytes:
        """The collectors' text, at most ``ttl`` seconds old unless a reading is under way."""
        return self._latest.get()

    def _read(self, last: tuple[float, bytes] | None) -> tuple[float, bytes]:
        claimed = False
        if self.shared is not None:
            try:
                found = self.shared.fetch()
                if found is not None and (last is None or found[0] > last[0]):
                    last = found
                if last is not None and time.time() - last[0] < self.ttl:
                    return last
                claimed = self.shared.claim()
                if not claimed and last is not None:
                    return last
            except Exception:  # a scrape never fails for it: read here, as unshared
                log.debug("shared metrics unavailable",
                                                           exc_info=True)
        taken = time.time()  # from its start: a slow reading is not followed at once
        text = text_of(self._registry)
        if claimed and self.shared is not None:
            try:
                self.shared.publish(taken, text)
            except Exception:  # the others read on their own once the claim lapses
                log.debug("metrics not shared", exc_info=True)
        return taken, text


def own_text() -> bytes:
    """This process's counters (every worker's in multiprocess mode) as Prometheus text."""
    multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc_dir:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
        return generate_latest(registry)
    return generate_latest()


def render(kept: Kept | None = None) -> tuple[bytes, str]:
    """The ``/metrics`` body, read now, and its content type (every worker's numbers in
    multiprocess mode), then ``kept``'s text."""
    body = own_text()
    if kept is not None:
        body += kept.text()
    return body, CONTENT_TYPE_LATEST


class Scrape:
    """The whole ``/metrics`` body, made at most once every ``ttl`` seconds per process (as
    :class:`Latest`): merging the workers' counters and rendering them costs a few ms, which
    a scraper every 100 ms would pay ten times a second in each process. Its gzip form too,
    made once per body: Prometheus asks for it, and sending a tenth of the bytes is most of
    what a scrape between two makings costs."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, kept: Kept, ttl: float = 1.0) -> None:
        self.kept = kept
        self._latest = Latest(lambda last: (time.time(), own_text() + kept.text()), ttl)
        self._packed: tuple[bytes, bytes] | None = None  # (body, its gzip)

    def body(self) -> bytes:
        """The body, at most ``ttl`` seconds old unless one is being made."""
        return self._latest.get()

    def packed(self) -> bytes:
        """:meth:`body`, gzipped (level 1: the scrape's CPU matters more than its bytes)."""
        body = self.body()
        packed = self._packed
        if packed is None or packed[0] is not body:
            packed = self._packed = (body, gzip.compress(body, compresslevel=1, mtime=0))
        return packed[1]


# Webhooks: read from the database at scrape time (the deliveries' rows and the
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
            log.warning("webhook metrics unavailable",
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
            log.warning("storage metrics unavailable",
                                                         exc_info=True)
            return
        yield GaugeMetricFamily(
            "seckill_storage_writable", "0 while the store refuses writes for its disk (Redis "
            "cannot append to its AOF, or the data folder is full): purchases answer 503 "
            "storage.", value=1 if found.writable else 0)
        if found.available_bytes is not None:
            yield GaugeMetricFamily("seckill_data_disk_available_bytes", "Bytes left on the "
                                    "data folder's disk.", value=found.available_bytes)
