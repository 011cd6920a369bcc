"""What ``/metrics`` reads from the store is read once per interval for the whole deployment,
shared through Redis, and each process keeps its whole body for the interval. Two apps over
one real Valkey (or cluster) stand for two workers; the census' readings are counted with the
server's own ``INFO commandstats`` (each reading asks ``XINFO GROUPS`` of every part)."""

from __future__ import annotations

import functools
import time
from typing import Any

from redis.cluster import RedisCluster, key_slot

from seckill.store.plumbing.keys import KeySpace
from tests.support.api import buy, create_activity, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import wait_until
from tests.support.tokens import METRICS


def _census_readings(rds: Any) -> int:
    """``XINFO GROUPS`` calls on every node (a cluster's INFO answers per node)."""
    stats: Any = (rds.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
                  if isinstance(rds, RedisCluster) else rds.info("commandstats"))
    nodes = [stats] if any(name.startswith("cmdstat_") for name in stats) else stats.values()
    return sum(int(node.get("cmdstat_xinfo|groups", {}).get("calls", 0)) for node in nodes)


def _scrape(app: Any) -> bytes:
    response = app.test_client().get("/metrics", headers=METRICS)
    assert response.status_code == 200
    return bytes(response.get_data())


def _sold_one(app: Any, aid: str) -> bool:
    return _sold(_scrape(app), aid) == "1.0"


def _sold(text: bytes, aid: str) -> str:
    line = next(line for line in text.decode().splitlines()
                if line.startswith(f'seckill_activity_sold{{activity="{aid}"}}'))
    return line.split()[-1]


@BOTH_BACKENDS
def test_two_processes_share_one_census_reading_per_interval(make_app, rds, prefix):
    first, second = (make_app(SECKILL_METRICS_INTERVAL="60") for _ in range(2))
    aid = create_activity(first.test_client(), total=5)["id"]
    before = _census_readings(rds)
    one = _scrape(first)
    other = _scrape(second)
    assert _census_readings(rds) - before == 1  # one part, read once: by the first
    assert _sold(one, aid) == _sold(other, aid) == "0.0"
    assert 'seckill_redis_up 1.0' in other.decode()
    kept, reading = KeySpace(prefix).metrics_kept(), KeySpace(prefix).metrics_reading()
    assert key_slot(kept.encode()) == key_slot(reading.encode())  # one pipeline on a cluster
    assert rds.exists(kept) == 1 and rds.exists(reading) == 0  # shared; the claim ended


@BOTH_BACKENDS
def test_two_scraped_processes_read_about_once_per_interval_between_them(make_app, rds):
    apps = [make_app(SECKILL_METRICS_INTERVAL="1") for _ in range(2)]
    client = apps[0].test_client()
    aid = create_activity(client, total=5)["id"]
    before, started = _census_readings(rds), time.monotonic()
    for app in apps:
        assert _sold(_scrape(app), aid) == "0.0"
    assert buy(client, aid, "u1").status_code == 200
    # Both see the sale move on within an interval or two (stale while reading) ...
    for app in apps:
        wait_until(functools.partial(_sold_one, app, aid), 10, what="sold 1")
    while time.monotonic() - started < 5:  # ... and both are scraped every 50 ms
        for app in apps:
            _scrape(app)
        time.sleep(0.05)
    # Each on its own would read every second or so: about 8 readings in 5 s.
    assert _census_readings(rds) - before <= 5 + 1


def test_scrapes_within_the_interval_render_the_counters_once(make_app):
    app = make_app(SECKILL_METRICS_INTERVAL="60")
    client = app.test_client()
    first = _scrape(app)
    expect(client.get("/healthz"), 200)  # a request this process counts
    assert _scrape(app) == first  # the kept body, byte for byte: nothing rendered again


def test_the_counters_are_rendered_again_after_the_interval(make_app):
    app = make_app(SECKILL_METRICS_INTERVAL="0.3")
    client = app.test_client()
    first = _healthz_answers(_scrape(app))
    expect(client.get("/healthz"), 200)
    wait_until(lambda: _healthz_answers(_scrape(app)) == first + 1, 5, what="the count")


def _healthz_answers(text: bytes) -> float:
    return sum(float(line.split()[-1]) for line in text.decode().splitlines()
               if line.startswith('seckill_requests_total{endpoint="service.healthz"'))
