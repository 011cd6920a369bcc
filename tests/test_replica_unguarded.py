"""``SECKILL_DURABILITY=replica`` on masters that do not refuse writes without a replica
(``min-replicas-to-write`` 0: a user's own cluster, or a managed one that hides its CONFIG).

Seen before the fix: a failover or a dead replica sold every purchase with a 503
``durability`` (200 units to 200 buyers told 503), and the gateway only said so once in its
log. Now it fails closed:

* in production it refuses to start where it can read the setting and finds it missing,
  naming the masters and the fix, unless ``SECKILL_DURABILITY_UNGUARDED=1``; in development
  it starts with a loud warning;
* where it starts anyway, the first durability wait that finds no replica on a master stops
  the purchases there (503 ``no_replica``, before any script runs) until a probe sees a
  replica acknowledge a write again: only the purchases already in flight are decided
  unconfirmed.

Each test runs a cluster of its own (3 masters, 1 replica each, no guard) and freezes a
replica with SIGSTOP, which makes the moment deterministic. One server with no replica (the
red team's 200 buyers): tests/test_red_team_durability.py.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import urllib3
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import ConfigError
from seckill.ops.stack.cluster import EmbeddedCluster
from tests.support.api import buy, create_activity
from tests.support.cluster_faults import (
    activity_on,
    cluster_env,
    frozen,
    gateway_app,
    http_buyer,
    masters,
    private_cluster,
    refused,
    replicas_of,
    stats,
    status_of,
)
from tests.support.race import Gateway
from tests.support.servers import gunicorn_server
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

TIMEOUT_MS = 1000  # SECKILL_DURABILITY_TIMEOUT_MS
THREADS = 8  # purchases in flight at once
CROWD = 48  # buyers during the freeze
BACK_BOUND = 10.0  # seconds from the thaw until a purchase is decided again


def unconfirmed(response: Any) -> bool:
    """Whether a response is a decision no replica confirmed."""
    body = response.get_json() or {}
    return (response.status_code, body.get("detail")) == (503, "durability")


def test_production_refuses_to_start_on_masters_without_the_guard(
    tmp_path: Path, prefix: str, database_url: str, caplog: Any
) -> None:
    """A production gateway with ``replica`` on a cluster whose masters lack
    ``min-replicas-to-write`` refuses to start, naming every master and the fix; the override
    starts it with a warning; development starts it with a warning."""
    with private_cluster(tmp_path / "cluster", replicas=1) as cluster:
        master = masters(cluster)[0]
        env = cluster_env(cluster, master, prefix, tmp_path, database_url,
                          SECKILL_DURABILITY="replica")
        with pytest.raises(ConfigError) as refusal, gateway_app(env):
            pass
        said = str(refusal.value)
        for port in masters(cluster):
            assert f":{port}" in said, said
        assert "min-replicas-to-write 1" in said and "SECKILL_DURABILITY_UNGUARDED" in said

        for override in ({"SECKILL_DURABILITY_UNGUARDED": "1"}, {"SECKILL_ENV": "development"}):
            caplog.clear()
            with caplog.at_level(logging.WARNING), gateway_app({**env, **override}) as app:
                aid = activity_on(cluster, master)
                create_activity(app.test_client(), id=aid, total=5)
                assert buy(app.test_client(), aid, "zoe").status_code == 200
            warned = [r.getMessage() for r in caplog.records
                      if "min-replicas-to-write" in r.getMessage()]
            assert len(warned) == 1 and r"no_replica" in warned[0], warned

        # Guarded (as an operator sets it): it starts, and says nothing.
        for port in cluster.ports:
            with contextlib.closing(cluster.client(port)) as conn:
                conn.config_set("min-replicas-to-write", 1)
                conn.config_set("min-replicas-max-lag", 2)
        caplog.clear()
        with caplog.at_level(logging.WARNING), gateway_app(env):
            pass
        assert not [r for r in caplog.records if "min-replicas" in r.getMessage()]


@dataclasses.dataclass
class Sale:
    """An unguarded cluster, an in-process gateway started with the override, and an activity
    of 1000 units on the first master (whose one replica the test freezes)."""

    cluster: EmbeddedCluster
    app: Flask
    client: FlaskClient
    master: int
    replica: int
    aid: str

    def sold(self) -> int:
        """The activity's sold counter, as its master holds it."""
        return int(stats(self.client, self.aid)["sold"])

    def crowd(self, tag: str) -> list[tuple[Any, float]]:
        """``CROWD`` new buyers, ``THREADS`` at a time: each response and its seconds."""

        def one(i: int) -> tuple[Any, float]:
            started = time.monotonic()
            response = buy(self.app.test_client(), self.aid, f"{tag}{i:03d}")
            return response, time.monotonic() - started

        with ThreadPoolExecutor(THREADS) as pool:
            return list(pool.map(one, range(CROWD)))


def unguarded_env(cluster: EmbeddedCluster, tmp_path: Path, prefix: str, database_url: str
                  ) -> tuple[int, int, str, dict[str, str]]:
    """The cluster's first master, its replica, an activity id on it, and a production
    gateway's environment with ``replica`` durability and the override."""
    master = masters(cluster)[0]
    (replica,) = replicas_of(cluster, master)
    env = cluster_env(cluster, master, prefix, tmp_path, database_url,
                      SECKILL_DURABILITY="replica", SECKILL_DURABILITY_TIMEOUT_MS=str(TIMEOUT_MS),
                      SECKILL_DURABILITY_UNGUARDED="1")
    return master, replica, activity_on(cluster, master), env


@contextlib.contextmanager
def unguarded_sale(tmp_path: Path, prefix: str, database_url: str) -> Iterator[Sale]:
    """:class:`Sale`, with a first purchase (zoe's) confirmed."""
    with private_cluster(tmp_path / "cluster", replicas=1) as cluster:
        master, replica, aid, env = unguarded_env(cluster, tmp_path, prefix, database_url)
        with gateway_app(env) as app:
            client = app.test_client()
            create_activity(client, id=aid, total=1000)
            assert buy(client, aid, "zoe").status_code == 200
            yield Sale(cluster, app, client, master, replica, aid)


def test_a_frozen_replica_stops_purchases_after_the_first_unconfirmed_wait(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The replica of an activity's master is frozen. The first purchase's wait finds no
    replica (503 ``durability``, decided); the ones after are refused before deciding
    (503 ``no_replica``, at once), so the sold counter does not grow. Another master's
    activity sells on. Thawed, a probe sees the replica and purchases are decided again."""
    with unguarded_sale(tmp_path, prefix, database_url) as sale:
        client, aid = sale.client, sale.aid
        other = masters(sale.cluster)[1]
        elsewhere = activity_on(sale.cluster, other)
        create_activity(client, id=elsewhere, total=1000)
        with frozen(sale.cluster, [sale.replica]):
            alice = buy(client, aid, "alice")
            assert unconfirmed(alice), alice.get_json()
            assert sale.sold() == 2

            started = time.monotonic()
            answers = sale.crowd("crowd")
            took = time.monotonic() - started
            wrong = [(r.status_code, r.get_json()) for r, _ in answers if not refused(r)]
            assert wrong == [], wrong
            assert sale.sold() == 2
            assert status_of(client, aid, "crowd000") == (200, {"status": "none"})
            # At once: only the one purchase that probes waits, for the probe's 200 ms.
            slowest = max(seconds for _, seconds in answers)
            assert slowest < TIMEOUT_MS / 2000, slowest
            print(f"\n{CROWD} purchases refused no_replica in {took:.2f}s "
                  f"(slowest {slowest * 1000:.0f} ms)")
            # Another master's replica confirms: its activity is not stopped.
            assert buy(client, elsewhere, "bea").status_code == 200
        thawed = time.monotonic()
        for i in range(10_000):
            response = buy(client, aid, f"again{i:04d}")
            if response.status_code == 200:
                break
            assert refused(response), response.get_json()
            assert time.monotonic() - thawed < BACK_BOUND, "no sale after the thaw"
            time.sleep(0.05)
        print(f"sold again {time.monotonic() - thawed:.2f}s after the thaw")


def test_only_the_purchases_in_flight_are_decided_unconfirmed(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The replica is frozen while nobody buys, then a crowd arrives (``THREADS`` at a time):
    the first ``THREADS`` are in flight together and are decided (503 ``durability``); every
    later one is refused before deciding. Before the fix, all ``CROWD`` were decided."""
    with unguarded_sale(tmp_path, prefix, database_url) as sale, frozen(
            sale.cluster, [sale.replica]):
        answers = sale.crowd("crowd")
        decided = [r for r, _ in answers if unconfirmed(r)]
        others = [(r.status_code, r.get_json()) for r, _ in answers
                  if not unconfirmed(r) and not refused(r)]
        assert others == [], others
        sold = sale.sold() - 1
        print(f"\n{CROWD} buyers, {THREADS} at a time, replica frozen: {sold} decided "
              f"unconfirmed, {CROWD - len(decided)} refused before deciding")
        assert sold == len(decided) <= THREADS, (sold, len(decided))


def test_a_probe_that_finds_no_replica_keeps_the_master_stopped(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """While the replica stays frozen, the probes (one every half second, by one purchase at
    a time) keep finding none: over 3 seconds nothing more is decided."""
    with unguarded_sale(tmp_path, prefix, database_url) as sale, frozen(
            sale.cluster, [sale.replica]):
        assert unconfirmed(buy(sale.client, sale.aid, "alice"))
        until, tried = time.monotonic() + 3.0, 0
        while time.monotonic() < until:
            answer = buy(sale.client, sale.aid, f"b{tried:04d}")
            assert refused(answer), answer.get_json()
            tried += 1
            time.sleep(0.05)
        assert sale.sold() == 2, tried


HTTP_THREADS = 32  # purchases in flight at once over HTTP
HTTP_BUYERS = 400


def test_gunicorn_workers_each_stop_after_their_own_first_failed_wait(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """A gunicorn with 2 gevent workers, a crowd over HTTP (``HTTP_THREADS`` at a time) while
    the replica is frozen: each worker decides only the purchases it had in flight when its
    first wait failed, then refuses before deciding; thawed, both sell again. Before the fix
    every purchase of the crowd was decided."""
    with private_cluster(tmp_path / "cluster", replicas=1) as cluster:
        _, replica, aid, env = unguarded_env(cluster, tmp_path, prefix, database_url)
        http = urllib3.PoolManager(maxsize=HTTP_THREADS + 4, block=True)
        with gunicorn_server(env, workers=2) as base:
            gateway = Gateway(base, prefix, http, env["REDIS_URL"], cluster)
            gateway.create_activity(100_000, aid)
            purchase = http_buyer(gateway)
            assert purchase("zoe", aid)[0] == 200

            def crowd(tag: str) -> collections.Counter[tuple[int, str | None]]:
                with ThreadPoolExecutor(HTTP_THREADS) as pool:
                    answers = pool.map(lambda i: purchase(f"{tag}{i:04d}", aid),
                                       range(HTTP_BUYERS))
                    return collections.Counter((status, body.get("detail"))
                                               for status, body in answers)

            with frozen(cluster, [replica]):
                answers = crowd("crowd")
                sold = stats_over_http(gateway, aid) - 1
            print(f"\n{HTTP_BUYERS} buyers over HTTP, {HTTP_THREADS} at a time, 2 workers, "
                  f"replica frozen: {sold} decided unconfirmed; {dict(answers)}")
            assert set(answers) <= {(503, "durability"), (503, "no_replica")}, answers
            assert sold == answers[(503, "durability")] <= HTTP_THREADS, (sold, answers)

            def sells() -> bool:
                return purchase(f"again{time.monotonic_ns()}", aid)[0] == 200

            # Both workers: each has its own view, and each must take the master again.
            assert wait_until(lambda: sum(sells() for _ in range(20)) == 20, BACK_BOUND,
                              interval=0.2, what="both workers selling again")


def stats_over_http(gateway: Gateway, aid: str) -> int:
    """The activity's sold counter, from the operator API."""
    status, body = gateway.call("GET", f"/admin/activities/{aid}/stats", headers=ADMIN)
    assert status == 200, body
    return int(body["sold"])
