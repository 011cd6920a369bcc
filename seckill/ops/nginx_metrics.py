"""nginx's own counts for Prometheus, read from its access log.

nginx answers some requests without the gateway (its per-IP 429, a 502/504 when no instance
answered); those never reach the gateway's ``/metrics``. ``seckill up`` runs this exporter
(``seckill nginx exporter``) beside nginx: at each scrape it reads what the access log gained
since the last one (in either of the stack's formats; a truncated or replaced file is read from
its start) and counts it. The operator listener serves it at ``/metrics/nginx``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from seckill import logs

METRIC_NAMES = (
    "seckill_nginx_requests_total",
    "seckill_nginx_rate_limited_total",
    "seckill_nginx_upstream_errors_total",
)
# The text format's tail (nginx/nginx.conf.template, log_format seckill).
_TEXT = re.compile(r'" (\d{3}) \d+ \S+s outcome=\S* upstream=(.*)$')
UPSTREAM_ERRORS = frozenset({"502", "504"})  # nginx's answer when no instance answered


def parse(line: str) -> tuple[str, str] | None:
    """(status, upstream status) of one access-log line, in either format; None if it is not
    one."""
    line = line.strip()
    if line.startswith("{"):
        try:
            entry = json.loads(line)
            return str(entry["status"]), str(entry.get("upstream") or "-")
        except (ValueError, KeyError, TypeError):
            return None
    found = _TEXT.search(line)
    return None if found is None else (found.group(1), found.group(2).strip() or "-")


@dataclasses.dataclass
class Counts:
    """What the log has said so far."""

    statuses: Counter[str] = dataclasses.field(default_factory=Counter)
    rate_limited: int = 0
    upstream_errors: int = 0

    def add(self, status: str, upstream: str) -> None:
        """Count one request nginx answered."""
        self.statuses[status] += 1
        if status == "429" and upstream == "-":  # no instance was asked: nginx's own limit
            self.rate_limited += 1
        if status in UPSTREAM_ERRORS:
            self.upstream_errors += 1


class LogTail:
    """The lines a file gained since the last read (from its start if truncated or replaced)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""

    def read(self) -> list[str]:
        """The complete lines added since the last call."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._offset, self._partial = stat.st_ino, 0, b""
        if stat.st_size == self._offset:
            return []
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read(stat.st_size - self._offset)
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in lines]


class NginxCollector(Collector):
    """Counts the access log's new lines at each scrape and shows the totals."""

    def __init__(self, path: Path) -> None:
        self.tail = LogTail(path)
        self.counts = Counts()
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        """The counters, after reading what the log gained."""
        with self._lock:
            for line in self.tail.read():
                parsed = parse(line)
                if parsed is not None:
                    self.counts.add(*parsed)
            requests = CounterMetricFamily(
                "seckill_nginx_requests", "Requests nginx answered, by HTTP status.",
                labels=["status"])
            for status, n in sorted(self.counts.statuses.items()):
                requests.add_metric([status], n)
            yield requests
            yield CounterMetricFamily(
                "seckill_nginx_rate_limited", "Requests nginx refused itself with 429 (its "
                "per-IP limit; the gateway was not asked).", value=self.counts.rate_limited)
            yield CounterMetricFamily(
                "seckill_nginx_upstream_errors", "Answers 502/504: no gateway instance "
                "answered (in time).", value=self.counts.upstream_errors)


def serve(log: Path, port: int, host: str = "127.0.0.1") -> int:
    """Serve the counts of ``log`` at ``http://host:port/metrics`` until SIGTERM/SIGINT."""
    registry = CollectorRegistry()
    registry.register(NginxCollector(log))
    server, thread = start_http_server(port, addr=host, registry=registry)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(logs.line("nginx-metrics", "INFO", f"counting {log} for http://{host}:{port}/metrics "
                    f"(pid {os.getpid()})", logs.json_wanted()), file=sys.stderr, flush=True)
    stop.wait()
    server.shutdown()
    thread.join(5)
    return 0
