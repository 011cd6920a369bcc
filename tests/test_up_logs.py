"""``seckill up`` as an operator sees it: one log format on its output (text, or JSON with
``--log-json``), an access log with each answer's outcome, and nginx's own counts (its per-IP
429s) for Prometheus on the operator port."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import call
from tests.support.upstack import UpStack, running_up, user_token

LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (\S+) "
                  r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) .*")
BANNER = re.compile(r"(\s.*|Try it, in another terminal:|)")  # the "up" banner's own lines


def nginx_counts(stack: UpStack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{stack.admin_base}/metrics/nginx", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sale_traffic(stack: UpStack) -> tuple[int, int]:
    """A won purchase, a sold-out one, then a burst over the per-IP rate: (200s, 429s)."""
    aid = stack.create_activity(total=1)
    outcomes = []
    for uid in ("winner", "late"):
        token = user_token(uid)
        status, body = call(stack.port, "GET", f"/seckill/url?activity={aid}", token)
        if status == 200:
            status, body = call(stack.port, "POST", body["url"], token)
        outcomes.append(status)
    assert outcomes == [200, 410], outcomes
    refused = sum(call(stack.port, "GET", f"/seckill/url?activity={aid}",
                       user_token("flood"))[0] == 429 for _ in range(60))
    assert refused > 0
    return 1, refused


def access_lines(stack: UpStack, wanted: int) -> list[str]:
    """The access log's lines, once it has at least ``wanted`` (nginx flushes each second)."""
    log = stack.data / "logs" / "access.log"
    deadline = time.monotonic() + 10
    while True:
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= wanted or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


def test_up_logs_in_one_format_with_an_access_log_and_nginx_counts(world_readable_tmp: Path):
    with running_up(world_readable_tmp, "--ip-rate", "5r/s") as stack:
        _, refused = sale_traffic(stack)
        lines = access_lines(stack, 64)  # the creation, two URLs, a purchase, the burst
        assert any(re.search(r"POST /seckill/\S+/buy \S+\" 200 .* outcome=ok ", x)
                   for x in lines), lines[:5]
        assert any(re.search(r"\" 410 .* outcome=sold_out ", x) for x in lines)
        all_429 = [x for x in lines if re.search(r"\" 429 ", x)]
        assert len(all_429) == refused
        # nginx's own (its per-IP rate; no instance asked) and the gateway's (per user).
        # (Between the outcome and the upstream: the edge cache's status and key.)
        own_429 = [x for x in all_429 if re.search(r" outcome=- cache=\S* edge=\S* upstream=-$", x)]
        assert own_429 and len(own_429) + len(
            [x for x in all_429 if re.search(r" outcome=rate_limited .* upstream=429$", x)]
        ) == refused
        for line in lines:
            assert LINE.fullmatch(line), line
            assert " nginx.access INFO " in line
        counts = nginx_counts(stack)
        assert counts[("seckill_nginx_rate_limited_total", ())] == len(own_429)
        assert counts[("seckill_nginx_requests_total", (("status", "429"),))] == refused
        assert counts[("seckill_nginx_upstream_errors_total", ())] == 0
        assert f"Access log: {stack.data / 'logs' / 'access.log'}" in stack.text()
    output = stack.text().splitlines()
    framed = [x for x in output if not BANNER.fullmatch(x)]
    assert len(framed) > 10
    for line in framed:
        assert LINE.fullmatch(line), line
    components = {found.group(3) for found in map(LINE.fullmatch, framed) if found}
    assert {"seckill-up", "gunicorn-1", "gunicorn-2"} <= components, components


def test_up_log_json_writes_one_json_object_per_line(world_readable_tmp: Path):
    with running_up(world_readable_tmp, "--log-json") as stack:
        sale_traffic(stack)
        lines = access_lines(stack, 3)
        entries = [json.loads(x) for x in lines]
        assert {"ok", "sold_out"} <= {e["outcome"] for e in entries}
        assert all(e["component"] == "nginx.access" for e in entries)
    output = [x for x in stack.text().splitlines() if x.startswith("{")]
    assert len(output) > 10
    parsed = [json.loads(x) for x in output]
    assert all({"ts", "component", "level", "message"} <= set(p) for p in parsed)
    assert {"seckill-up", "gunicorn-1"} <= {p["component"] for p in parsed}
    assert not [x for x in stack.text().splitlines()
                if x and not x.startswith("{") and not BANNER.fullmatch(x)]
