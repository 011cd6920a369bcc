"""A master of the cluster dies (kill -9) and its replica takes over: what the gateway then
keeps of what it answered, per ``SECKILL_DURABILITY`` (issue 12).

* ``local`` and ``replica``, made deterministic in-process: the replica is frozen (SIGSTOP)
  and its link cut, so the master's next write exists on the master only; the master is
  killed, the replica thawed and promoted. With ``local`` that write had been answered 200 and
  is gone; with ``replica`` it had been answered 503 and nothing acknowledged is lost.

Every test runs a cluster of its own (tests/cluster_faults.py), REDIS_URL naming the master it
kills: the gateway must find the cluster again through the nodes it discovered.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from seckill.ops.cluster import EmbeddedCluster
from seckill.store.routing import slot_of
from tests.cluster_faults import (
    activity_on,
    cut_replication,
    frozen,
    gateway_app,
    masters,
    private_cluster,
    replicas_of,
    wait_replicated,
)
from tests.conftest import ADMIN, buy, create_activity, user_headers

RECOVERY_BOUND = 10.0  # seconds from the kill until the gateway answers for the slot again


@contextlib.contextmanager
def sale(cluster: EmbeddedCluster, tmp_path: Path, prefix: str, database_url: str, total: int,
         **overrides: str) -> Iterator[tuple[Flask, str, int]]:
    """An activity of ``total`` units on the cluster's first master, sold by an in-process
    gateway whose REDIS_URL names that master: (the app, the activity id, the master)."""
    master = masters(cluster)[0]
    aid = activity_on(cluster, master)
    with gateway_app(cluster, master, prefix, tmp_path, database_url, **overrides) as app:
        create_activity(app.test_client(), id=aid, total=total)
        yield app, aid, master


def status_of(client: FlaskClient, aid: str, uid: str) -> tuple[int, dict[str, Any]]:
    """``GET /seckill/<aid>/order`` for ``uid``: the status code and body."""
    response = client.get(f"/seckill/{aid}/order", headers=user_headers(uid))
    return response.status_code, response.get_json()


def answered_again(client: FlaskClient, aid: str, uid: str, started: float
                   ) -> tuple[dict[str, Any], float, int]:
    """Ask ``uid``'s order status until the gateway answers 200 (within RECOVERY_BOUND of
    ``started``); the body, the seconds since ``started`` and the 503s seen meanwhile."""
    unavailable = 0
    while True:
        code, body = status_of(client, aid, uid)
        if code == 200:
            return body, time.monotonic() - started, unavailable
        assert code == 503, (code, body)
        unavailable += 1
        assert time.monotonic() - started < RECOVERY_BOUND, f"no answer: {body}"
        time.sleep(0.05)


def stats(client: FlaskClient, aid: str) -> dict[str, Any]:
    """The operator's view of the activity's stock."""
    response = client.get(f"/admin/activities/{aid}/stats", headers=ADMIN)
    assert response.status_code == 200, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def buy_when_copy_refreshed(client: FlaskClient, aid: str, uid: str) -> tuple[Any, float]:
    """``buy`` again while this process's copy still says sold out (it is refreshed every
    SECKILL_META_TTL); the response and the seconds it took."""
    started = time.monotonic()
    while True:
        response = buy(client, aid, uid)
        if response.status_code != 410 or time.monotonic() - started > 5:
            return response, time.monotonic() - started
        time.sleep(0.1)


def master_dies_with_a_write_the_replica_lacks(
    cluster: EmbeddedCluster, app: Flask, aid: str, master: int
) -> tuple[Any, dict[str, Any], float]:
    """The deterministic loss: zoe buys (replicated), then with the replica frozen and its link
    cut alice buys, the master is killed, the replica thawed and promoted. Returns alice's
    purchase response, her order status on the dead master just before the kill, and the
    seconds from the kill until the gateway answered for the slot again."""
    client = app.test_client()
    (replica,) = replicas_of(cluster, master)
    zoe = buy(client, aid, "zoe")
    assert zoe.status_code == 200, zoe.get_json()
    wait_replicated(cluster, master)
    with frozen(cluster, [replica]):
        assert cut_replication(cluster, master) == 1
        alice = buy(client, aid, "alice")
        code, before = status_of(client, aid, "alice")
        assert code == 200, before
        killed = time.monotonic()
        cluster.kill(master)
    # Thawed: it reads its link's end, finds the master gone, and is elected in its place.
    status, took, unavailable = answered_again(client, aid, "zoe", killed)
    assert status == {"status": "pending", "order_id": zoe.get_json()["order_id"]}
    assert cluster.master_of_slot(slot_of(f"{{{aid}}}")) == replica
    print(f"\nrecovered {took:.1f}s after the kill ({unavailable} answers 503 meanwhile)")
    return alice, before, took


def test_local_a_failover_loses_a_200_the_replica_had_not_received(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """With ``local``, a 200 means the master's own AOF: alice's 200 was never on the replica,
    so after the failover her order is gone (status ``none``) and her unit is sold again."""
    with private_cluster(tmp_path / "cluster", replicas=1) as cluster, sale(
        cluster, tmp_path, prefix, database_url, total=2, SECKILL_DURABILITY="local"
    ) as (app, aid, master):
        client = app.test_client()
        alice, before, _ = master_dies_with_a_write_the_replica_lacks(
            cluster, app, aid, master)
        assert alice.status_code == 200, alice.get_json()
        assert before == {"status": "pending", "order_id": alice.get_json()["order_id"]}

        # The promoted replica never had it: the acknowledged order is gone.
        assert status_of(client, aid, "alice") == (200, {"status": "none"})
        assert (stats(client, aid)["remaining"], stats(client, aid)["sold"]) == (1, 1)
        # Alice's unit is sold again, once this process's copy of the activity (which
        # said 0 left after alice) is refreshed from the new master: within a second or so.
        bob, waited = buy_when_copy_refreshed(client, aid, "bob")
        assert bob.status_code == 200, bob.get_json()
        print(f"alice's unit sold again to bob {waited:.1f}s after the recovery")
        carol = buy(client, aid, "carol")
        assert (carol.status_code, carol.get_json()["error"]) == (410, "sold_out")
        assert (stats(client, aid)["remaining"], stats(client, aid)["sold"]) == (0, 2)


def test_replica_no_200_for_a_write_the_replica_did_not_get(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """With ``replica``, alice's purchase (taken on the master, never on the replica) is
    answered 503 ``durability`` after SECKILL_DURABILITY_TIMEOUT_MS: no 200 is lost."""
    with private_cluster(tmp_path / "cluster", replicas=1) as cluster, sale(
        cluster, tmp_path, prefix, database_url, total=3, SECKILL_DURABILITY="replica",
        SECKILL_DURABILITY_TIMEOUT_MS="500",
    ) as (app, aid, master):
        client = app.test_client()
        started = time.monotonic()
        alice, before, _ = master_dies_with_a_write_the_replica_lacks(
            cluster, app, aid, master)
        assert alice.status_code == 503, alice.get_json()
        assert alice.get_json()["detail"] == "durability", alice.get_json()
        # The decision had been taken on the master (it was pending there)...
        assert before["status"] == "pending", before
        # ...and died with it: nothing the buyer was told was lost.
        assert status_of(client, aid, "alice") == (200, {"status": "none"})
        assert (stats(client, aid)["remaining"], stats(client, aid)["sold"]) == (2, 1)

        # The new master has no replica (the old master is dead): bob's purchase is decided
        # but cannot be confirmed, 503 again, and his order stands (pending).
        bob = buy(client, aid, "bob")
        assert (bob.status_code, bob.get_json()["detail"]) == (503, "durability")
        assert status_of(client, aid, "bob")[1]["status"] == "pending"
        # The old master, restarted from its folder, rejoins as the new master's replica:
        # 200s again.
        cluster.restart(master, timeout=30)
        carol = buy(client, aid, "carol")
        assert carol.status_code == 200, carol.get_json()
        assert (stats(client, aid)["remaining"], stats(client, aid)["sold"]) == (0, 3)
        print(f"sequence took {time.monotonic() - started:.1f}s")


def test_replica_a_200_waits_for_the_replica_fsync_not_for_its_once_a_second_ack(
    valkey_cluster: EmbeddedCluster, tmp_path: Path, prefix: str, database_url: str
) -> None:
    """A replica answers the master's ``REPLCONF GETACK`` before its own fsync of the write
    that came in the same read, and otherwise reports its fsync once a second: ``WAITAOF 1 1``
    sent right after the script alone would wait for that (0.5 s on average, often past the
    timeout). The durability wait must make the replica report its fsync at once."""
    with sale(valkey_cluster, tmp_path, prefix, database_url, total=100,
              SECKILL_DURABILITY="replica") as (app, aid, _):
        client = app.test_client()
        took = []
        for i in range(20):
            started = time.monotonic()
            response = buy(client, aid, f"quick{i}")
            took.append(time.monotonic() - started)
            assert response.status_code == 200, response.get_json()
    took.sort()
    print(f"\nreplica durability: purchase median {took[10] * 1000:.0f} ms, "
          f"max {took[-1] * 1000:.0f} ms")
    assert took[10] < 0.1 and took[-2] < 0.3, took
