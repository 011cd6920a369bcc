"""With ``SECKILL_DURABILITY=replica``, a write that no replica can confirm is refused before
anything is decided: 503 ``unavailable``, ``"detail": "no_replica"``, and
Redis unchanged; the sale goes on within seconds of a replica coming back.

The embedded cluster of ``seckill up`` sets ``min-replicas-to-write 1`` on every node when
the durability is ``replica`` (``seckill.ops.stack.replica_guard``): a master with no
replica online (its replica killed, a promoted replica whose master died, a replica still in
its first sync) refuses a script's first write with ``NOREPLICAS``, so the script changes
nothing. Each test runs a cluster of its own (3 masters, 1 replica each) and kills nodes of it.

* the issue's case: a master killed, its replica promoted with no replica of its own, a crowd
  buying: every answer ``no_replica``, nothing sold; the old master restarted rejoins as a
  replica and the sale goes on;
* a packet grab, a payment, a cancel and a restock on a master whose replica was killed:
  each refused with ``no_replica``, nothing changed;
* a replica in its first sync counts as none (the master made to wait before it starts the
  sync: the moment is held as long as the test wants), then every write works again;
* a replica falling behind (frozen) mid-write: the one case left for 503 ``durability``,
  until the master stops counting it (``min-replicas-max-lag``), then ``no_replica``;
* an external server without the setting (started with the override): the gateway says so
  in the log, once, and stops the master after the first unconfirmed purchase;
* the orders worker, whose stream reads are writes too, waits a master with no replica out;
* ``seckill up``'s cluster nodes carry the setting for ``replica`` (and need a replica).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import ConfigError
from seckill.ops.stack.cluster import EmbeddedCluster, up_cluster
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import slot_of
from tests.support.api import buy, create_activity
from tests.support.cluster_faults import (
    activity_on,
    answered_again,
    cluster_env,
    frozen,
    gateway_app,
    masters,
    refused,
    replica_state,
    replicas_of,
    status_of,
)
from tests.support.orders import WorkerThread, built_worker, stored_orders
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

TIMEOUT_MS = 3000  # SECKILL_DURABILITY_TIMEOUT_MS: a refusal must not wait for it
BACK_BOUND = 15.0  # seconds from a replica's restart until a purchase succeeds again
CROWD = 40  # concurrent purchases refused


@contextlib.contextmanager
def guarded_cluster(folder: Path) -> Iterator[EmbeddedCluster]:
    """3 masters with 1 replica each, as ``seckill up`` makes it for ``replica``."""
    cluster = EmbeddedCluster(folder, masters=3, replicas=1, node_timeout_ms=1000,
                              durability="replica", durability_timeout_ms=TIMEOUT_MS)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def gateway(cluster: EmbeddedCluster, master: int, tmp_path: Path, prefix: str,
            database_url: str) -> Iterator[Flask]:
    """An in-process gateway with ``replica`` durability, REDIS_URL naming ``master``."""
    env = cluster_env(cluster, master, prefix, tmp_path, database_url,
                      SECKILL_DURABILITY="replica",
                      SECKILL_DURABILITY_TIMEOUT_MS=str(TIMEOUT_MS))
    with gateway_app(env) as app:
        yield app


def snapshot(cluster: EmbeddedCluster, prefix: str, aid: str) -> dict[str, Any]:
    """What Redis holds of an activity, from the master that owns it now: its meta hash,
    buyers, cancels, payments and the length of its orders stream."""
    keys = KeySpace(prefix)
    master = cluster.master_of_slot(slot_of(f"{{{aid}}}"))
    with contextlib.closing(cluster.client(master)) as conn:
        return {
            "meta": conn.hgetall(keys.meta(aid)),
            "buyers": conn.hgetall(keys.buyers(aid)),
            "cancelled": conn.hgetall(keys.cancelled(aid)),
            "payments": conn.hgetall(keys.payments(aid)),
            "orders": conn.xlen(keys.orders(aid)),
        }


def crowd_buys(app: Flask, aid: str, tag: str) -> list[tuple[Any, float]]:
    """``CROWD`` new buyers purchase at once (8 threads); their responses, each with the
    seconds it took."""

    def one(i: int) -> tuple[Any, float]:
        started = time.monotonic()
        response = buy(app.test_client(), aid, f"{tag}{i:03d}")
        return response, time.monotonic() - started

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(CROWD)))


def sells_again(client: FlaskClient, aid: str, tag: str, started: float) -> float:
    """Buy as new buyers until one gets a 200 (every other answer a refusal); the seconds
    from ``started``."""
    for i in range(10_000):
        response = buy(client, aid, f"{tag}{i:04d}")
        if response.status_code == 200:
            return time.monotonic() - started
        assert refused(response), (response.status_code, response.get_json())
        assert time.monotonic() - started < BACK_BOUND, "no sale after the replica came back"
        time.sleep(0.05)
    raise AssertionError("unreachable")


def test_a_promoted_replica_with_no_replica_refuses_every_purchase_before_deciding(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The issue's case: the master of an activity is killed, its replica promoted (with no
    replica of its own), a crowd buys: every answer is 503 ``no_replica`` and Redis shows
    nothing sold (seen before the fix: every purchase decided, then 503 ``durability``), each
    answered at once. The old master, restarted, rejoins as a replica: purchases succeed again
    within seconds."""
    with guarded_cluster(tmp_path / "cluster") as cluster:
        master = masters(cluster)[0]
        (replica,) = replicas_of(cluster, master)
        aid = activity_on(cluster, master)
        with gateway(cluster, master, tmp_path, prefix, database_url) as app:
            client = app.test_client()
            create_activity(client, id=aid, total=100)
            zoe = buy(client, aid, "zoe")
            assert zoe.status_code == 200, zoe.get_data(as_text=True)
            killed = time.monotonic()
            cluster.kill(master)
            answered_again(client, aid, "zoe", killed, 10.0)
            assert cluster.master_of_slot(slot_of(f"{{{aid}}}")) == replica
            before = snapshot(cluster, prefix, aid)

            started = time.monotonic()
            answers = crowd_buys(app, aid, "crowd")
            took = time.monotonic() - started
            wrong = [(r.status_code, r.get_json()) for r, _ in answers if not refused(r)]
            assert wrong == [], wrong
            assert snapshot(cluster, prefix, aid) == before
            assert before["meta"]["sold"] == "1" and before["orders"] == 1
            # A refusal is answered at once, not after the durability wait's timeout (which
            # the wire sent with the script: with no replica it would wait it out).
            slowest = max(seconds for _, seconds in answers)
            assert slowest < TIMEOUT_MS / 2000, slowest
            print(f"\n{CROWD} purchases refused no_replica in {took:.2f}s "
                  f"(slowest {slowest * 1000:.0f} ms)")

            restarted = time.monotonic()
            cluster.restart(master, timeout=30)
            back = sells_again(client, aid, "again", restarted)
            print(f"sold again {back:.1f}s after the old master's restart began")


def test_every_durable_write_is_refused_while_no_replica_and_a_first_sync_counts_as_none(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The replica of a master is killed: a purchase, a packet grab, a payment, a cancel and a
    restock on that master are each refused with ``no_replica`` and change nothing. The
    replica restarts and asks for a full sync, which its master holds back (a long
    ``repl-diskless-sync-delay``): still refused. Once the sync runs, each write works."""
    with guarded_cluster(tmp_path / "cluster") as cluster:
        master = masters(cluster)[0]
        (replica,) = replicas_of(cluster, master)
        stock, packets, held, levered = (activity_on(cluster, master, tag) for tag in "spwl")
        with gateway(cluster, master, tmp_path, prefix, database_url) as app:
            client = app.test_client()
            create_activity(client, id=stock, total=10)
            create_activity(client, id=packets, kind="packets", amount=1000, count=10)
            create_activity(client, id=held, total=10, payment_window=600)
            create_activity(client, id=levered, total=10)
            cancel_me = buy(client, stock, "carol").get_json()["order_id"]
            pay_me = buy(client, held, "bob").get_json()["order_id"]
            cluster.kill(replica)

            def attempts() -> dict[str, Any]:
                return {
                    "purchase": buy(client, stock, "dave"),
                    "grab": buy(client, packets, "erin"),
                    "pay": client.post(f"/admin/orders/{pay_me}/pay",
                                       json={"payment_ref": "ref-1"}, headers=ADMIN),
                    "cancel": client.post(f"/admin/orders/{cancel_me}/cancel", headers=ADMIN),
                    "restock": client.post(f"/admin/activities/{stock}/stock",
                                           json={"add": 5}, headers=ADMIN),
                }

            def unchanged_when_refused() -> None:
                before = {aid: snapshot(cluster, prefix, aid) for aid in (stock, packets, held)}
                answers = attempts()
                wrong = {name: (r.status_code, r.get_json()) for name, r in answers.items()
                         if not refused(r)}
                assert wrong == {}, wrong
                after = {aid: snapshot(cluster, prefix, aid) for aid in (stock, packets, held)}
                assert after == before

            unchanged_when_refused()
            # Any other route's write (here an operator's lever) names the refusal the same way.
            lever = client.post(f"/admin/activities/{levered}/pause", headers=ADMIN)
            assert (lever.status_code, lever.get_json().get("detail")) == (503, "no_replica"), (
                lever.get_json())

            with contextlib.closing(cluster.client(master)) as conn:
                conn.config_set("repl-diskless-sync-delay", 3600)
                server = cluster.servers[replica]
                server.start()
                wait_until(lambda: replica_state(conn) not in (None, "online"), 10,
                           what="the replica asking for its first sync")
                unchanged_when_refused()
                assert replica_state(conn) != "online"
                released = time.monotonic()
                conn.config_set("repl-diskless-sync-delay", 0)
            cluster.wait_healthy(30)
            sells_again(client, stock, "again", released)
            answers = attempts()
            codes = {name: r.status_code for name, r in answers.items()}
            assert codes == {"purchase": 200, "grab": 200, "pay": 200, "cancel": 200,
                             "restock": 200}, {n: r.get_json() for n, r in answers.items()}


def test_a_replica_falling_behind_mid_write_is_the_only_503_after_a_decision(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The replica is frozen (SIGSTOP): its master still counts it for
    ``min-replicas-max-lag`` seconds, so a purchase right after is decided and, unconfirmed,
    answered 503 ``durability`` (its order pending). Once the lag is past, purchases are
    refused with ``no_replica``; thawed, the replica confirms again and purchases succeed."""
    with guarded_cluster(tmp_path / "cluster") as cluster:
        master = masters(cluster)[0]
        (replica,) = replicas_of(cluster, master)
        aid = activity_on(cluster, master)
        with gateway(cluster, master, tmp_path, prefix, database_url) as app:
            client = app.test_client()
            create_activity(client, id=aid, total=100)
            assert buy(client, aid, "zoe").status_code == 200
            with frozen(cluster, [replica]):
                alice = buy(client, aid, "alice")
                assert (alice.status_code, alice.get_json()["detail"]) == (503, "durability")
                assert status_of(client, aid, "alice")[1]["status"] == "pending"
                frozen_at = time.monotonic()
                buyers = (f"bob{i:03d}" for i in range(1000))  # each a new buyer

                def refused_buyer() -> str | None:
                    uid = next(buyers)
                    return uid if refused(buy(client, aid, uid)) else None

                bob = wait_until(refused_buyer, 15, interval=0.2,
                                 what="a refusal once the replica lags")
                print(f"\nrefused {time.monotonic() - frozen_at:.1f}s after the freeze")
                assert status_of(client, aid, bob) == (200, {"status": "none"})
            thawed = time.monotonic()
            back = sells_again(client, aid, "again", thawed)
            print(f"sold again {back:.1f}s after the thaw")


def test_an_external_server_without_min_replicas_is_named_in_the_log_once(
    private_valkey: Any, make_app: Any, caplog: Any
) -> None:
    """``replica`` on a server that does not refuse writes without a replica, started with
    SECKILL_DURABILITY_UNGUARDED=1 (in production it would not start otherwise,
    tests/test_replica_unguarded.py): the gateway says so once; the first purchase is decided
    unconfirmed, the next refused before deciding (this process stopped the master). With
    ``min-replicas-to-write 1`` set by its operator, the same server (no replica) refuses
    with ``no_replica`` from the first purchase, nothing sold."""
    env = {"REDIS_URL": private_valkey.url, "SECKILL_DURABILITY": "replica",
           "SECKILL_DURABILITY_TIMEOUT_MS": "50"}
    client = make_app(**env, SECKILL_DURABILITY_UNGUARDED="1").test_client()
    aid = create_activity(client, total=5)["id"]
    for uid, detail in (("ann", "durability"), ("ben", "no_replica")):
        answer = buy(client, aid, uid)
        assert (answer.status_code, answer.get_json()["detail"]) == (503, detail)
    said = [r.getMessage() for r in caplog.records if "min-replicas-to-write is 0" in
            r.getMessage()]
    assert len(said) == 1, said

    with contextlib.closing(redis.Redis.from_url(private_valkey.url)) as conn:
        conn.config_set("min-replicas-to-write", 1)
        conn.config_set("min-replicas-max-lag", 2)
    caplog.clear()
    guarded = make_app(**env).test_client()
    before = guarded.get(f"/admin/activities/{aid}/stats", headers=ADMIN).get_json()
    answer = buy(guarded, aid, "cid")
    assert refused(answer), answer.get_json()
    after = guarded.get(f"/admin/activities/{aid}/stats", headers=ADMIN).get_json()
    assert (after["sold"], after["remaining"]) == (before["sold"], before["remaining"]) == (1, 4)
    assert not [r for r in caplog.records if "min-replicas" in r.getMessage()]


def test_the_orders_worker_waits_out_a_master_with_no_replica(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """The orders worker's reads (``XREADGROUP``, ``XAUTOCLAIM``) are writes to the server: a
    master with no replica refuses them too. The worker waits that out as an outage, and
    stores the orders once a replica is back."""
    with guarded_cluster(tmp_path / "cluster") as cluster:
        master = masters(cluster)[0]
        (replica,) = replicas_of(cluster, master)
        aid = activity_on(cluster, master)
        with gateway(cluster, master, tmp_path, prefix, database_url) as app, built_worker(
                app.extensions["seckill"].settings, block_ms=100) as worker, WorkerThread(
                worker) as running:
            client = app.test_client()
            create_activity(client, id=aid, total=10)
            assert buy(client, aid, "zoe").status_code == 200
            wait_until(lambda: stored_orders(database_url, aid), 15, interval=0.1,
                       what="zoe's order stored")
            cluster.kill(replica)
            until = time.monotonic() + 2.5  # the worker's housekeeping runs every second
            while time.monotonic() < until:
                assert refused(buy(client, aid, f"x{time.monotonic_ns()}"))
                time.sleep(0.2)
            assert running.alive(), running.error
            cluster.restart(replica, timeout=30)
            sells_again(client, aid, "amy", time.monotonic())
            rows = wait_until(lambda: len(found := stored_orders(database_url, aid)) == 2
                              and found, 15, interval=0.1, what="the new order stored")
            assert sorted(row.user_id for row in rows)[1] == "zoe"


def test_seckill_up_sets_min_replicas_on_every_node_for_replica_and_needs_a_replica(
    tmp_path: Path
) -> None:
    """``seckill up --redis-nodes 3 --replicas 1`` with ``replica``: every node's command line
    sets min-replicas-to-write 1 and a lag of the durability timeout (at least 2 s); the other
    modes leave it out; ``--replicas 0`` with ``replica`` is refused at once."""
    env = {"SECKILL_DURABILITY": "replica", "SECKILL_DURABILITY_TIMEOUT_MS": "3500"}
    _, _, specs = up_cluster(tmp_path / "replica", 3, 1, env)
    for spec in specs:
        line = " ".join(spec.argv)
        assert "--min-replicas-to-write 1 --min-replicas-max-lag 4" in line, line
    _, _, specs = up_cluster(tmp_path / "local", 3, 1, {"SECKILL_DURABILITY": "local"})
    assert not any("min-replicas" in " ".join(spec.argv) for spec in specs)
    with pytest.raises(ConfigError, match="--replicas 1 or more"):
        up_cluster(tmp_path / "none", 3, 0, env)
