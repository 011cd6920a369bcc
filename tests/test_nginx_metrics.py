"""The exporter of nginx's counts: both log formats parsed (the text format's lines from before
cache=/edge= too), a rotated or truncated log read from its start, partial lines kept for the
next read; the answers nginx repeated from its edge cache counted per activity and outcome, made-up
ids under one label value. tests/test_nginx_exporter_edge.py counts a real nginx's."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seckill.ops.stack.nginx_metrics import METRIC_NAMES, Line, LogTail, NginxCollector, parse

# The text format before cache= and edge= were logged, then as nginx.conf.template writes it.
OLD = ('2026-11-24T20:55:59+00:00 nginx.access INFO 127.0.0.1 "GET /seckill/url?activity=a '
       'HTTP/1.1" {status} 88 0.000s outcome={outcome} upstream={upstream}')
NEW = ('2026-11-24T20:55:59+00:00 nginx.access INFO 127.0.0.1 "GET {path} HTTP/1.1" {status} 88 '
       '0.000s outcome={outcome} cache={cache} edge={edge} upstream={upstream}')


def text(status: int, outcome: str = "-", upstream: str = "-") -> str:
    return OLD.format(status=status, outcome=outcome, upstream=upstream)


def new_text(status: int, outcome: str = "-", cache: str = "-", edge: str = "-",
             upstream: str = "-", path: str = "/seckill/url?activity=a") -> str:
    return NEW.format(status=status, outcome=outcome, cache=cache, edge=edge, upstream=upstream,
                      path=path)


def as_json(status: int, outcome: str = "", cache: str = "", edge: str = "",
            upstream: str = "") -> str:
    """A seckill_json line: nginx writes an empty variable as ""."""
    return json.dumps({"ts": "x", "component": "nginx.access", "level": "INFO",
                       "message": "GET /seckill/url?activity=a 410", "client": "127.0.0.1",
                       "status": status, "bytes": 88, "seconds": 0.0, "outcome": outcome,
                       "cache": cache, "edge": edge, "upstream": upstream})


def test_both_formats_are_read():
    assert parse(text(429)) == Line("429", "-")
    assert parse(text(200, "ok", "200")) == Line("200", "200", "ok")
    assert parse(text(502, "-", "502, 502")) == Line("502", "502, 502")
    assert parse(new_text(410, "sold_out", "HIT", "url:a")) == Line(
        "410", "-", "sold_out", "HIT", "url:a")
    assert parse(new_text(410, "sold_out", "MISS", "buy:a", "410")) == Line(
        "410", "410", "sold_out", "MISS", "buy:a")
    assert parse(new_text(429)) == Line("429", "-")
    assert parse(new_text(502, "-", "MISS", "url:a", "502, 502")) == Line(
        "502", "502, 502", "-", "MISS", "url:a")
    entry = {"ts": "x", "component": "nginx.access", "status": 410, "upstream": "410"}
    assert parse(json.dumps(entry)) == Line("410", "410")
    assert parse(as_json(503, "paused", "HIT", "buy:a")) == Line(
        "503", "-", "paused", "HIT", "buy:a")
    assert parse(as_json(429)) == Line("429", "-")
    assert parse("not a log line") is None
    assert parse("{broken") is None
    assert parse("[1, 2]") is None


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


def scrape(log: Path, lines: list[str]) -> str:
    log.write_text("\n".join(lines) + "\n")
    registry = CollectorRegistry()
    registry.register(NginxCollector(log))
    return generate_latest(registry).decode()


def answers(scraped: str) -> dict[tuple[str, str, str], float]:
    """seckill_activity_outcomes_total as (activity, outcome, answered_by) -> count."""
    return {(s.labels["activity"], s.labels["outcome"], s.labels["answered_by"]): s.value
            for family in text_string_to_metric_families(scraped)
            if family.name == "seckill_activity_outcomes"
            for s in family.samples if s.name.endswith("_total")}


def test_the_edge_caches_answers_are_counted_per_activity_and_outcome(tmp_path: Path):
    made_up = [new_text(404, "unknown_activity", "HIT", f"url:x{i}") for i in range(50)]
    scraped = scrape(tmp_path / "access.log", [
        *[new_text(410, "sold_out", "HIT", "url:a1")] * 3,
        new_text(410, "sold_out", "MISS", "url:a1", "410"),  # the gateway's: counted there
        new_text(410, "sold_out", "EXPIRED", "url:a1", "410"),
        new_text(409, "ended", "HIT", "buy:a1", path="/seckill/a1/tok/buy"),
        new_text(503, "paused", "HIT", "buy:a2", path="/seckill/a2/tok/buy"),
        new_text(200, "ok", "HIT", "-", path="/seckill/activities/a1"),  # the micro-cache's
        new_text(200, "ok", "MISS", "url:a2", "200"),
        new_text(429, "-", "-", "url:a2"),  # nginx's per-IP limit, before the cache
        *made_up,
        as_json(503, "paused", "HIT", "url:a2"),
        as_json(503, "paused", "MISS", "url:a2", "503"),
        as_json(404, "unknown_activity", "HIT", "buy:y"),
        text(410, "sold_out", "410"),  # an old line: no cache, the gateway's
    ])
    assert answers(scraped) == {
        ("a1", "sold_out", "nginx"): 3, ("a1", "ended", "nginx"): 1,
        ("a2", "paused", "nginx"): 2,
        ("", "unknown_activity", "nginx"): 51,  # made-up ids: one series, however many
    }
    # The other counts as before.
    assert 'seckill_nginx_requests_total{status="410"} 6.0' in scraped
    assert "seckill_nginx_rate_limited_total 1.0" in scraped
    assert all(name in scraped for name in METRIC_NAMES)


def test_the_edge_counts_grow_with_the_log(tmp_path: Path):
    log = tmp_path / "access.log"
    log.write_text(new_text(410, "sold_out", "HIT", "url:a1") + "\n")
    registry = CollectorRegistry()
    registry.register(NginxCollector(log))
    assert answers(generate_latest(registry).decode()) == {("a1", "sold_out", "nginx"): 1}
    with log.open("a") as handle:
        handle.write(as_json(410, "sold_out", "HIT", "url:a1") + "\n")
    assert answers(generate_latest(registry).decode()) == {("a1", "sold_out", "nginx"): 2}
