"""What nginx answers from its edge cache still counts: real nginx in front of two
real gunicorn instances, its access log on (either format) and ``seckill nginx exporter``
reading it, served at ``/metrics/nginx`` on the operator listener as ``seckill up`` does.

* Every answer nginx repeated (``X-Cache: HIT``) is in the exporter's
  ``seckill_activity_outcomes_total{answered_by="nginx"}`` for its activity and outcome, and
  that plus the gateway's own counts is every answer the activity's crowd got, each once.
* Made-up ids (``unknown_activity``) never make a series of their own.
* The console's chart counts them: its rate of ``paused`` answers is the crowd's, not the
  handful that reached an instance.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from seckill.ops.stack.ports import free_listen_port
from tests.support.nginx import Instances, call, create_activity, front
from tests.support.servers import NginxFront, running_server
from tests.support.tokens import ADMIN, ADMIN_TOKEN, METRICS, user_headers

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.

Counts = dict[tuple[str, str], float]


@contextlib.contextmanager
def counted_front(instances: Instances, tmp: Path, log_json: bool = False
                  ) -> Iterator[NginxFront]:
    """nginx with its access log, and the exporter of its counts behind /metrics/nginx."""
    log = tmp / "access.log"
    log.touch()
    port = free_listen_port()
    exporter = [sys.executable, "-m", "seckill.ops.cli", "nginx", "exporter", "--log", str(log),
                "--port", str(port)]
    with running_server(exporter, f"http://127.0.0.1:{port}/metrics", name="nginx-exporter"), \
            front(instances, tmp, ip_rate="off", access_log=True, access_log_path=log,
                  log_json=log_json, metrics_port=port) as proxy:
        yield proxy


def user() -> dict[str, str]:
    """A user of one request: the per-user limit (5/s) never answers for the activity."""
    return user_headers(f"u-{uuid.uuid4().hex[:10]}")


def outcomes(http: urllib3.PoolManager, url: str, answered_by: str = "") -> Counts:
    """seckill_activity_outcomes_total at ``url`` as (activity, outcome) -> count, of the
    series whose answered_by is ``answered_by`` ("" : the gateway's, which has no such label)."""
    # The gateway's /metrics wants the scraper's token; the exporter's is loopback-only.
    answer = http.request("GET", url, headers=METRICS, timeout=10.0, retries=False)
    assert answer.status == 200, answer.status
    found: Counts = {}
    for family in text_string_to_metric_families(answer.data.decode()):
        if family.name != "seckill_activity_outcomes":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and \
                    sample.labels.get("answered_by", "") == answered_by:
                key = (sample.labels["activity"], sample.labels["outcome"])
                found[key] = found.get(key, 0) + sample.value
    return found


def gateways(http: urllib3.PoolManager, instances: Instances) -> Counts:
    """Both instances' own counts, added up."""
    total: Counts = {}
    for backend in instances.backends:
        for key, n in outcomes(http, f"http://{backend}/metrics").items():
            total[key] = total.get(key, 0) + n
    return total


def of(counts: Counts, activity: str) -> float:
    return sum(n for (aid, _), n in counts.items() if aid == activity)


@pytest.mark.parametrize("log_json", [False, True], ids=["text", "json"])
def test_the_answers_nginx_repeats_are_counted_per_activity(
        http, instances, tmp_path, log_json: bool) -> None:
    with counted_front(instances, tmp_path, log_json) as proxy:
        aid = create_activity(http, proxy.admin_base, total=5)
        buyer = user()
        issued = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}", buyer)
        assert issued.status == 200, issued.body
        purchase = f"{proxy.base}{issued.body['url']}"
        paused = call(http, "POST", f"{proxy.admin_base}/admin/activities/{aid}/pause", ADMIN)
        assert paused.status == 200, paused.body
        # Both instances know of the pause (asked straight, so nginx has counted nothing).
        for backend in instances.backends:
            deadline = time.monotonic() + 5
            while call(http, "GET", f"http://{backend}/seckill/url?activity={aid}",
                       user()).body.get("error") != "paused":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        before = gateways(http, instances)

        hits = {"url": 0, "buy": 0, "unknown": 0}
        sent = {"url": 60, "buy": 20, "unknown": 40}
        for _ in range(sent["url"]):
            answer = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}", user())
            assert answer.status == 503 and answer.body["error"] == "paused", answer.body
            hits["url"] += answer.headers.get("X-Cache") == "HIT"
        for _ in range(sent["buy"]):  # the purchase's copy is keyed by the activity alone
            answer = call(http, "POST", purchase, buyer)
            assert answer.body["error"] in ("paused", "rate_limited"), answer.body
            hits["buy"] += answer.headers.get("X-Cache") == "HIT"
        made_up = [f"none{uuid.uuid4().hex[:8]}" for _ in range(4)]
        for i in range(sent["unknown"]):
            answer = call(http, "GET", f"{proxy.base}/seckill/url?activity={made_up[i % 4]}",
                          user())
            assert answer.body["error"] == "unknown_activity", answer.body
            hits["unknown"] += answer.headers.get("X-Cache") == "HIT"
        # Most of the crowd is nginx's (a copy lives for the rest of its second).
        assert hits["url"] >= sent["url"] // 2 and hits["unknown"] >= sent["unknown"] // 2, hits
        assert hits["buy"] >= 1, hits

        # The log is flushed every second: the exporter's count comes within a few.
        nginx_metrics = f"{proxy.admin_base}/metrics/nginx"
        expected = {(aid, "paused"): hits["url"] + hits["buy"],
                    ("", "unknown_activity"): hits["unknown"]}
        deadline = time.monotonic() + 15
        while (counted := outcomes(http, nginx_metrics, "nginx")) != expected:
            assert time.monotonic() < deadline, (counted, expected)
            time.sleep(0.2)
        # With the gateway's own: every answer of the activity, each once. Each instance
        # keeps its /metrics body for the metrics interval, so wait for bodies made after
        # the crowd; counters only grow, so a double count could never come back down.
        deadline = time.monotonic() + 10
        while of(after := gateways(http, instances), aid) - of(before, aid) \
                + of(counted, aid) != sent["url"] + sent["buy"]:
            assert time.monotonic() < deadline, (before, after, counted)
            time.sleep(0.2)
        assert not any(activity in made_up for activity, _ in after)


def test_the_consoles_chart_counts_nginxs_answers(http, instances, tmp_path, new_page) -> None:
    """A paused activity's crowd at ~40 requests a second: nginx answers almost all of them
    from its copy, the gateway about one a second; the chart's paused rate is the crowd's."""
    with counted_front(instances, tmp_path) as proxy:
        aid = create_activity(http, proxy.admin_base, total=5)
        paused = call(http, "POST", f"{proxy.admin_base}/admin/activities/{aid}/pause", ADMIN)
        assert paused.status == 200, paused.body
        stop = threading.Event()
        sent: list[Any] = []

        def crowd() -> None:
            pool = urllib3.PoolManager(maxsize=2)
            while not stop.is_set():
                answer = call(pool, "GET", f"{proxy.base}/seckill/url?activity={aid}", user())
                sent.append(answer.headers.get("X-Cache"))
                stop.wait(0.025)

        worker = threading.Thread(target=crowd, daemon=True)
        worker.start()
        try:
            tab = new_page()
            tab.goto(f"{proxy.admin_base}/admin/")
            tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
            tab.get_by_role("button", name="Open the console").click()
            rates = tab.locator("#rates")
            best = 0.0
            deadline = time.monotonic() + 20
            while best < 10 and time.monotonic() < deadline:
                found = re.search(r"\bpaused (\d+(?:\.\d+)?)/s", rates.inner_text())
                best = max(best, float(found.group(1)) if found else 0.0)
                tab.wait_for_timeout(250)
        finally:
            stop.set()
            worker.join(10)
        hits = sum(1 for cache in sent if cache == "HIT")
        assert hits >= len(sent) // 2, (hits, len(sent))
        assert best >= 10, f"the chart's paused rate peaked at {best}/s ({len(sent)} sent)"
