"""nginx's own counts for Prometheus, read from its access log.

nginx answers some requests without the gateway (its per-IP 429, a 502/504 when no instance
answered, and the activity-level refusals it repeats from its edge cache,
``seckill/web/edge_cache.py``); those never reach the gateway's ``/metrics``. ``seckill up``
runs this exporter (``seckill nginx exporter``) beside nginx: at each scrape it reads what the
access log gained since the last one (in either of the stack's formats, and the text format's
lines from before ``cache=``/``edge=`` were logged; a truncated or replaced file is read from
its start) and counts it. The operator listener serves it at ``/metrics/nginx``.

The edge cache's answers are counted under the gateway's own family,
``seckill_activity_outcomes_total{activity,outcome}``, with one more label,
``answered_by="nginx"``: the gateway counts what it answered, this exporter what nginx repeated
in its place (``cache=HIT``, never sent to an instance), so the two never count one answer
twice and ``sum by (activity, outcome)`` over both endpoints is every answer the crowd got
(the dashboard's query, unchanged), while ``{answered_by=""}`` still selects the gateway's
alone. A name of its own would make every such query a sum of two names. The label set stays
bounded: the activity is the edge key's id (nginx's map only makes one of an id-shaped path),
and an id only gets its own series when the gateway's answer was not ``unknown_activity``,
that is for activities that exist; made-up ids are all counted under ``activity=""``.
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
from typing import NamedTuple

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from seckill import logs

METRIC_NAMES = (
    "seckill_nginx_requests_total",
    "seckill_nginx_rate_limited_total",
    "seckill_nginx_upstream_errors_total",
    "seckill_activity_outcomes_total",  # {activity,outcome,answered_by="nginx"}: see above
)
# The text format's tail (nginx/nginx.conf.template, log_format seckill); cache= and edge= are
# absent from the lines nginx wrote before they were logged.
_TEXT = re.compile(r'" (\d{3}) \d+ \S+s outcome=(\S*)(?: cache=(\S*) edge=(\S*))? '
                   r"upstream=(.*)$")
UPSTREAM_ERRORS = frozenset({"502", "504"})  # nginx's answer when no instance answered
# Answers nginx took from its cache without an instance answering (only HIT while the edge
# cache serves no stale copies; STALE and UPDATING would be nginx's too).
FROM_CACHE = frozenset({"HIT", "STALE", "UPDATING"})
# The edge cache's key (the template's map $seckill_edge_key): route and activity id.
_EDGE = re.compile(r"(?:url|buy):([A-Za-z0-9_-]{1,64})")
UNKNOWN = "unknown_activity"  # a made-up id: counted under activity="", never a series of its own


class Line(NamedTuple):
    """What the exporter reads of one access-log line ("-" where nginx logged nothing)."""

    status: str
    upstream: str
    outcome: str = "-"
    cache: str = "-"
    edge: str = "-"


def _field(value: object) -> str:
    """A logged value as the text format writes it: "-" for none (JSON logs it as "")."""
    text = "" if value is None else str(value).strip()
    return text or "-"


def parse(line: str) -> Line | None:
    """One access-log line, in either format; None if it is not one."""
    line = line.strip()
    if line.startswith("{"):
        try:
            entry = json.loads(line)
            return Line(str(entry["status"]), _field(entry.get("upstream")),
                        _field(entry.get("outcome")), _field(entry.get("cache")),
                        _field(entry.get("edge")))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
    found = _TEXT.search(line)
    if found is None:
        return None
    status, outcome, cache, edge, upstream = found.groups()
    return Line(status, _field(upstream), _field(outcome), _field(cache), _field(edge))


def edge_answer(line: Line) -> tuple[str, str] | None:
    """(activity, outcome) of an answer nginx repeated from its edge cache; None for any other
    line (the gateway answered it and counted it itself, or it is not a hot route's)."""
    if line.cache not in FROM_CACHE or line.outcome == "-":
        return None
    found = _EDGE.fullmatch(line.edge)
    if found is None:  # the micro-cache's pages (no edge key) are not per-activity answers
        return None
    return ("" if line.outcome == UNKNOWN else found.group(1)), line.outcome


@dataclasses.dataclass
class Counts:
    """What the log has said so far."""

    statuses: Counter[str] = dataclasses.field(default_factory=Counter)
    rate_limited: int = 0
    upstream_errors: int = 0
    edge: Counter[tuple[str, str]] = dataclasses.field(default_factory=Counter)

    def add(self, line: Line) -> None:
        """Count one request nginx answered."""
        self.statuses[line.status] += 1
        if line.status == "429" and line.upstream == "-":  # no instance asked: nginx's limit
            self.rate_limited += 1
        if line.status in UPSTREAM_ERRORS:
            self.upstream_errors += 1
        answer = edge_answer(line)
        if answer is not None:
            self.edge[answer] += 1


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
                    self.counts.add(parsed)
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
            # The gateway's family (seckill/metrics.py) plus answered_by: see the docstring.
            edge = CounterMetricFamily(
                "seckill_activity_outcomes", "Answers of the hot routes per activity, by "
                "outcome: here those nginx repeated from its edge cache (answered_by=nginx; "
                'made-up ids under activity="").', labels=["activity", "outcome", "answered_by"])
            for (activity, outcome), n in sorted(self.counts.edge.items()):
                edge.add_metric([activity, outcome, "nginx"], n)
            yield edge


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
