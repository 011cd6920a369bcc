"""The exporter of nginx's counts: both log formats parsed, a rotated or truncated log read
from its start, partial lines kept for the next read."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from seckill.ops.nginx_metrics import METRIC_NAMES, LogTail, NginxCollector, parse

TEXT = ('2026-11-24T20:55:59+00:00 nginx.access INFO 127.0.0.1 "GET /seckill/url?activity=a '
        'HTTP/1.1" {status} 88 0.000s outcome={outcome} upstream={upstream}')


def text(status: int, outcome: str = "-", upstream: str = "-") -> str:
    return TEXT.format(status=status, outcome=outcome, upstream=upstream)


def test_both_formats_are_read():
    assert parse(text(429)) == ("429", "-")
    assert parse(text(200, "ok", "200")) == ("200", "200")
    assert parse(text(502, "-", "502, 502")) == ("502", "502, 502")
    entry = {"ts": "x", "component": "nginx.access", "status": 410, "upstream": "410"}
    assert parse(json.dumps(entry)) == ("410", "410")
    assert parse("not a log line") is None
    assert parse("{broken") is None


def test_the_tail_follows_appends_truncation_and_replacement(tmp_path: Path):
    log = tmp_path / "access.log"
    tail = LogTail(log)
    assert tail.read() == []
    log.write_text("a\nb\npart")
    assert tail.read() == ["a", "b"]
    with log.open("a") as handle:
        handle.write("ial\nc\n")
    assert tail.read() == ["partial", "c"]
    log.write_text("d\n")  # truncated (rotated by copy-truncate): from the start
    assert tail.read() == ["d"]
    log.rename(tmp_path / "access.log.1")
    log.write_text("e\nf\n")  # replaced (rotated by rename): the new file from its start
    assert tail.read() == ["e", "f"]


def test_the_counts_split_nginx_429s_from_the_gateways_and_count_upstream_errors(
        tmp_path: Path):
    log = tmp_path / "access.log"
    log.write_text("\n".join([text(200, "ok", "200"), text(429), text(429),
                              text(429, "rate_limited", "429"), text(502, "-", "502"),
                              text(504)]) + "\n")
    registry = CollectorRegistry()
    registry.register(NginxCollector(log))
    scraped = generate_latest(registry).decode()
    assert 'seckill_nginx_requests_total{status="429"} 3.0' in scraped
    assert "seckill_nginx_rate_limited_total 2.0" in scraped
    assert "seckill_nginx_upstream_errors_total 2.0" in scraped
    assert all(name in scraped for name in METRIC_NAMES)
