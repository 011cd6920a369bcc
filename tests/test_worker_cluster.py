"""The orders worker on a Redis/Valkey Cluster, and the retirement of ended streams.

Everything is real: the session's 3+3 Valkey Cluster (and, for the retirement, the session's
single Valkey too), the test's own database, the worker run as ``seckill worker`` runs it
(``run`` in a thread). Activity ids are chosen so that their slots land on given masters.
"""

from __future__ import annotations

import contextlib
import logging
import time
from functools import partial
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from redis.cluster import key_slot

from seckill.config import Settings
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.keys import KeySpace
from seckill.worker import groups
from seckill.worker.groups import GROUP
from tests.support.api import buy_ok
from tests.support.backends import BOTH_BACKENDS
from tests.support.cluster_faults import activity_on, masters, wait_replicated
from tests.support.orders import (
    OrderCounter,
    WorkerThread,
    built_worker,
    consumer_names,
    pending,
    queue_purchases,
    stored_orders,
    stream_key,
)
from tests.support.timing import iso, wait_until
from tests.support.tokens import ADMIN

CLUSTER_ONLY = pytest.mark.parametrize("redis_backend", ["cluster"], indirect=True)


def xreadgroup_calls(cluster: EmbeddedCluster, port: int) -> int:
    """How many XREADGROUP commands the node has run since it started."""
    with contextlib.closing(cluster.client(port)) as conn:
        stats: Any = conn.info("commandstats")
    return int(stats.get("cmdstat_xreadgroup", {}).get("calls", 0))


def worker_complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The worker's warnings and errors (a cross-slot command, a crash, an outage)."""
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("seckill.worker.") and r.levelno >= logging.WARNING]


@CLUSTER_ONLY
def test_streams_on_every_master_are_all_drained_with_no_cross_slot_command(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str, valkey_cluster: EmbeddedCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two activities on each of the 3 masters, a backlog on each (300 orders, queued
    before the worker starts, one entry of each read by a consumer that then died) and
    orders bought while it runs: every one is stored once (the dead consumer's entries
    reclaimed on every master), nothing stays pending (``groups.pending_total`` over every
    master's streams), and the worker never complains (one XREADGROUP over several streams
    is refused on a cluster: 'all keys must map to the same key slot')."""
    owners = masters(valkey_cluster)
    assert len(owners) == 3
    aids = [make_activity(id=activity_on(valkey_cluster, port), total=400)["id"]
            for port in owners for _ in range(2)]
    keys = KeySpace(prefix)
    bought = {aid: queue_purchases(rds, keys, aid, [f"q{i:03d}" for i in range(50)])
              for aid in aids}
    streams = [stream_key(prefix, aid) for aid in aids]
    for stream in streams:
        rds.xgroup_create(stream, GROUP, id="0")
        rds.xreadgroup(GROUP, "ghost", {stream: ">"}, count=1)
    assert groups.pending_total(rds, [*streams, stream_key(prefix, "anone")]) == len(aids)
    counter = OrderCounter(database_url)
    try:
        with built_worker(settings, block_ms=100, poll_ms=20, claim_idle_ms=300) as worker, \
                WorkerThread(worker) as running:
            for aid in aids:
                bought[aid].update({f"live{i}": buy_ok(client, aid, f"live{i}") for i in range(3)})
            wait_until(lambda: all(counter(aid) == 53 for aid in aids), 20,
                       what="every master's orders stored")
            wait_until(lambda: groups.pending_total(worker.client, streams) == 0, 10,
                       what="nothing pending")
            assert running.alive(), running.error
            running.stop()
    finally:
        counter.close()
    for aid in aids:
        rows = stored_orders(database_url, aid)
        assert {o.order_id: o.user_id for o in rows} == {
            oid: uid for uid, oid in bought[aid].items()}
        assert {o.status for o in rows} == {"confirmed"}
    assert worker_complaints(caplog) == []


@BOTH_BACKENDS
def test_an_ended_drained_stream_is_no_longer_read_and_a_cancel_after_the_end_is_stored(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str, redis_backend: str, request: pytest.FixtureRequest,
) -> None:
    """An activity ending 2 s from now and one open for an hour, bought in both. Once the
    first has ended and its orders are stored, the worker retires its stream: trimmed, its
    consumer name gone, and no read of it any more (a read would bring the name back; on
    the cluster, its master counts no XREADGROUP while the worker keeps storing the other
    activity's orders). An order cancelled after the end is still stored as cancelled:
    retired streams are checked again every ``recheck_seconds``."""
    cluster: EmbeddedCluster | None = None
    ids: dict[str, str] = {}
    if redis_backend == "cluster":
        cluster = request.getfixturevalue("valkey_cluster")
        first, second = masters(cluster)[:2]
        ids = {"ended": activity_on(cluster, first), "live": activity_on(cluster, second)}
    ending = make_activity(total=5, ends_at=iso(2), **_id(ids, "ended"))["id"]
    live = make_activity(total=5, **_id(ids, "live"))["id"]
    ended_stream = stream_key(prefix, ending)
    bought = {uid: buy_ok(client, ending, uid) for uid in ("alice", "bob")}
    buy_ok(client, live, "carol")

    with built_worker(settings, block_ms=100, refresh_seconds=0.2, retire_grace_ms=0,
                      recheck_seconds=1.0) as worker, WorkerThread(worker) as running:
        wait_until(lambda: len(stored_orders(database_url, ending)) == 2
                   and rds.exists(ended_stream) and rds.xlen(ended_stream) == 0
                   and consumer_names(rds, ended_stream) == set(), 15,
                   what="the ended activity's orders stored, its stream retired")
        reads = xreadgroup_calls(cluster, ownership(cluster, ending)) if cluster else 0
        for i in range(3):  # the worker goes on, 2 s (two re-checks) of reading the live one
            order_id = buy_ok(client, live, f"dave{i}")
            wait_until(partial(stored, database_url, live, order_id), 10,
                       what="the live activity's order stored")
            time.sleep(0.6)
        assert consumer_names(rds, ended_stream) == set(), "a retired stream was read"
        if cluster is not None:
            assert xreadgroup_calls(cluster, ownership(cluster, ending)) == reads

        cancel = client.post(f"/admin/orders/{bought['alice']}/cancel", headers=ADMIN)
        assert cancel.status_code == 200, cancel.get_json()
        wait_until(lambda: {o.user_id: o.status for o in stored_orders(database_url, ending)}
                   == {"alice": "cancelled", "bob": "confirmed"}, 10,
                   what="the cancel after the end stored")
        wait_until(lambda: rds.xlen(ended_stream) == 0
                   and consumer_names(rds, ended_stream) == set(), 10,
                   what="the stream retired again")
        assert running.alive(), running.error
        running.stop()


def stored(database_url: str, aid: str, order_id: str) -> bool:
    """Whether the order is in the database."""
    return order_id in {o.order_id for o in stored_orders(database_url, aid)}


def _id(ids: dict[str, str], name: str) -> dict[str, str]:
    return {"id": ids[name]} if name in ids else {}


def ownership(cluster: EmbeddedCluster, aid: str) -> int:
    """The port of the master that owns the activity's slot."""
    return cluster.master_of_slot(key_slot(aid.encode()))


@CLUSTER_ONLY
def test_the_worker_carries_on_through_a_failover_and_no_order_is_lost_or_doubled(
    make_activity: Any, settings: Settings, database_url: str, rds: redis.Redis,
    prefix: str, valkey_cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    """One activity on each master and the worker running. A backlog of 1 500 orders on the
    first master's activity is on its replica, then that master is killed with SIGKILL
    while the worker is storing it: for a few seconds its slots answer nothing or
    CLUSTERDOWN, then its replica is the master. The worker waits it out by itself and
    stores everything: what it read or acknowledged on the dead master and the replica
    never saw is read again, and stored once. Orders queued after the failover are stored
    too. The killed node is restarted (it rejoins as a replica)."""
    owners = masters(valkey_cluster)
    # The node REDIS_URL names, when it is a master: the worker loses the node it was told of.
    victim = valkey_cluster.ports[0] if valkey_cluster.ports[0] in owners else owners[0]
    order = [victim, *(port for port in owners if port != victim)]
    aids = [make_activity(id=activity_on(valkey_cluster, port), total=3000)["id"]
            for port in order]
    keys = KeySpace(prefix)
    bought = {aid: queue_purchases(rds, keys, aid, [f"early{i:02d}" for i in range(20)])
              for aid in aids}
    counter = OrderCounter(database_url)
    caplog.set_level(logging.INFO, logger="seckill.worker")
    try:
        with built_worker(settings, block_ms=100, batch=50, claim_idle_ms=1000,
                          poll_ms=20) as worker, WorkerThread(worker) as running:
            wait_until(lambda: all(counter(aid) == 20 for aid in aids), 15,
                       what="the first orders stored")
            bought[aids[0]].update(queue_purchases(
                rds, keys, aids[0], [f"backlog{i:04d}" for i in range(1500)]))
            wait_replicated(valkey_cluster, victim)
            wait_until(lambda: counter(aids[0]) > 20, 10, interval=0.005,
                       what="the worker storing the backlog")
            try:
                valkey_cluster.kill(victim)
                at_kill = counter(aids[0])
                valkey_cluster.wait_healthy(timeout=30)
                assert ownership(valkey_cluster, aids[0]) != victim
                assert rds.exists(keys.meta(aids[0])), "the promoted replica lost the activity"
                for aid in aids:
                    bought[aid].update(queue_purchases(
                        rds, keys, aid, [f"after{i:02d}" for i in range(20)]))
                wait_until(lambda: all(counter(aid) == len(bought[aid]) for aid in aids), 30,
                           what="every order stored after the failover")
                wait_until(lambda: all(pending(rds, stream_key(prefix, aid)) == 0
                                       for aid in aids), 15, what="nothing pending")
                assert running.alive(), running.error
                running.stop()
            finally:
                if not valkey_cluster.running(victim):
                    valkey_cluster.restart(victim, timeout=30)
    finally:
        counter.close()
    for aid in aids:
        rows = stored_orders(database_url, aid)
        assert len(rows) == len(bought[aid])
        assert {o.order_id: o.user_id for o in rows} == {
            oid: uid for uid, oid in bought[aid].items()}
        assert rds.xlen(f"{prefix}:{{{aid}}}:dead") == 0
    assert 20 < at_kill < 1520, f"the kill did not land mid-backlog ({at_kill} stored)"
    assert any("Redis unreachable" in m for m in worker_complaints(caplog))
