"""The gateway on a Redis/Valkey Cluster, beyond the contract suite (which runs on both): how it
finds out it is on one, any node (a replica too) as REDIS_URL, the health check over every
master, sold-out flags dropped across nodes, the operator's read-only commands, and the
resends a MOVED proves safe. Real servers: the session's cluster (left whole) and, for the
test that kills a master, a cluster of the test's own."""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from prometheus_client import REGISTRY
from redis.crc import key_slot

from seckill.config import ConfigError, Settings
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.ops.stack.ports import free_listen_port
from seckill.services import Services
from seckill.store.plumbing.connection import Cluster, is_cluster
from seckill.store.plumbing.readonly import ReadOnlyRefused
from seckill.web.app import create_app
from tests.support.api import buy, create_activity, expect
from tests.support.gateway import gateway_env
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import on_master

pytestmark = pytest.mark.cluster


@pytest.fixture
def redis_backend() -> str:
    """Every test here runs on the session's cluster."""
    return "cluster"


def _activity_on(cluster: EmbeddedCluster, master: int) -> str:
    """A new activity id whose slot ``master`` owns."""
    stem = f"g{uuid.uuid4().hex[:8]}"
    return on_master(cluster, master, lambda i: f"{stem}{i}")


def test_auto_finds_the_cluster_and_the_single_server(
    env: dict[str, str], valkey: EmbeddedValkey
) -> None:
    assert is_cluster(Settings.from_env(env))
    assert not is_cluster(Settings.from_env({**env, "REDIS_URL": valkey.url}))
    # Forced off on a cluster node: taken for one server (and MOVED answers 503 later).
    assert not is_cluster(Settings.from_env({**env, "SECKILL_REDIS_CLUSTER": "off"}))


def test_cluster_on_against_one_server_is_refused_at_start(
    env: dict[str, str], valkey: EmbeddedValkey
) -> None:
    settings = Settings.from_env({**env, "REDIS_URL": valkey.url, "SECKILL_REDIS_CLUSTER": "on"})
    with pytest.raises(ConfigError, match=r"Redis Cluster at .* could not be reached"):
        Services.build(settings)


def test_any_node_will_do_as_redis_url_even_a_replica(
    make_app: Callable[..., Flask], valkey_cluster: EmbeddedCluster
) -> None:
    replica = next(n for n in valkey_cluster.nodes if n.role != "master")
    app = make_app(REDIS_URL=f"redis://127.0.0.1:{replica.port}/0")
    client = app.test_client()
    # One activity on every master: every purchase is decided by the master of its slot.
    masters = sorted({n.port for n in valkey_cluster.nodes if n.role == "master"})
    for master in masters:
        aid = create_activity(client, id=_activity_on(valkey_cluster, master), total=2)["id"]
        expect(buy(client, aid, "ann"), 200)
        expect(buy(client, aid, "bob"), 200)
        expect(buy(client, aid, "cy"), 410, "sold_out")
        with valkey_cluster.client(master) as conn:
            prefix = app.extensions["seckill"].settings.key_prefix
            assert conn.hget(f"{prefix}:{{{aid}}}:meta", "sold") == "2"


def test_a_sold_out_flag_is_dropped_on_every_gateway_when_units_come_back(
    make_app: Callable[..., Flask], valkey_cluster: EmbeddedCluster
) -> None:
    # Two gateways whose clients start from different nodes; flags live for a minute, so only
    # the announcement (PUBLISH, which a cluster carries to every node) can drop one in time.
    first = make_app(SECKILL_SOLD_OUT_TTL="60").test_client()
    other_node = valkey_cluster.urls[-1]
    second = make_app(SECKILL_SOLD_OUT_TTL="60", REDIS_URL=other_node).test_client()
    aid = create_activity(first, total=1)["id"]
    late = user_headers("late")
    url = expect(second.get(f"/seckill/url?activity={aid}", headers=late), 200)["url"]
    sold = expect(buy(first, aid, "ann"), 200)
    expect(second.post(url, headers=late), 410, "sold_out")  # the script's answer: a flag
    board = second.application.extensions["seckill"].board
    assert board.is_flagged(aid)
    expect(first.post(f"/admin/orders/{sold['order_id']}/cancel", headers=ADMIN), 200)
    # The message arrives on the listener's thread a moment later: well before the TTL.
    deadline = time.monotonic() + 3
    while board.is_flagged(aid) and time.monotonic() < deadline:
        time.sleep(0.01)
    expect(buy(second, aid, "late"), 200)


def test_read_only_commands_work_on_the_cluster_and_still_refuse_writes(
    env: dict[str, str], make_activity: Callable[..., dict[str, Any]], prefix: str
) -> None:
    aid = make_activity(total=3)["id"]
    services = Services.build(Settings.from_env(env), read_only=True)
    try:
        assert services.cluster
        assert services.stats.of(aid) is not None
        with pytest.raises(ReadOnlyRefused, match="SET"):
            services.client.set(f"{prefix}:{{{aid}}}:x", "1")
    finally:
        services.close()


def test_a_moved_slot_is_followed_and_counted(
    make_app: Callable[..., Flask], valkey_cluster: EmbeddedCluster
) -> None:
    app = make_app()
    client = app.test_client()
    aid = create_activity(client, total=5)["id"]
    expect(buy(client, aid, "ann"), 200)
    services: Services = app.extensions["seckill"]
    slot = key_slot(aid.encode())
    owner = valkey_cluster.master_of_slot(slot)
    wrong = next(n for n in valkey_cluster.nodes if n.role == "master" and n.port != owner)
    # Make the gateway's map wrong for this slot: its next purchase goes to another master,
    # which answers MOVED without running anything; the purchase is sent again, once, right.
    cluster = services.client
    assert isinstance(cluster, Cluster)
    node = cluster.nodes_manager.get_node("127.0.0.1", wrong.port)
    assert node is not None
    cluster.nodes_manager.slots_cache[slot] = [node]
    before = _resends("moved")
    expect(buy(client, aid, "bob"), 200)
    assert _resends("moved") == before + 1
    status = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    assert (status["sold"], status["buyers"], status["remaining"]) == (2, 2, 3)


def _resends(reason: str) -> float:
    value = REGISTRY.get_sample_value("seckill_cluster_resends_total", {"reason": reason})
    return value or 0.0


def test_healthz_needs_every_master(tmp_path: Path, database_url: str, prefix: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    cluster = EmbeddedCluster(tmp_path / "cluster", masters=3, replicas=0, node_timeout_ms=1000)
    cluster.start()
    try:
        env = gateway_env(cluster.url, prefix, tmp_path / "data", database_url, "1000/second")
        app = create_app(Settings.from_env(env))
        try:
            client = app.test_client()
            expect(client.get("/healthz"), 200)
            victim = next(n.port for n in cluster.nodes
                          if n.role == "master" and n.port != cluster.ports[0])
            cluster.kill(victim)
            with caplog.at_level(logging.CRITICAL):
                body = expect(client.get("/healthz"), 503)
            assert body["status"] == "unavailable" and "redis" in body["failing"], body
        finally:
            app.extensions["seckill"].close()
    finally:
        cluster.stop()


def test_a_purchase_whose_reply_is_lost_is_503_and_runs_once(
    tmp_path: Path, database_url: str, prefix: str
) -> None:
    """The master that owns the activity is frozen (SIGSTOP) while a purchase waits for its
    answer: the gateway gives up with 503 and never sends it again; when the master wakes it
    runs the script it had received, once."""
    cluster = EmbeddedCluster(tmp_path / "cluster", masters=3, replicas=0, node_timeout_ms=15000)
    cluster.start()
    try:
        env = gateway_env(cluster.url, prefix, tmp_path / "data", database_url, "1000/second")
        env.update(SECKILL_REDIS_TIMEOUT="0.5", SECKILL_DURABILITY="none")
        app = create_app(Settings.from_env(env))
        try:
            client = app.test_client()
            aid = create_activity(client, total=5)["id"]
            expect(buy(client, aid, "bob"), 200)  # the wire now holds a connection to the master
            headers = user_headers("ann")
            url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
            owner = cluster.master_of_slot(key_slot(aid.encode()))
            with cluster.client(owner) as conn:
                calls = _evalsha_calls(conn)
                process = cluster.servers[owner].process
                assert process is not None
                # It wakes 0.2 s after the reply's timeout: a resend would then have gone through.
                wake = threading.Timer(0.7, process.send_signal, (signal.SIGCONT,))
                process.send_signal(signal.SIGSTOP)
                wake.start()
                try:
                    body = expect(client.post(url["url"], headers=headers), 503, "unavailable")
                finally:
                    wake.join()
                    process.send_signal(signal.SIGCONT)
                deadline = time.monotonic() + 5  # the woken master reads what waited
                while _evalsha_calls(conn) == calls and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(0.3)  # room for a resend, had there been one
                assert _evalsha_calls(conn) == calls + 1, "sent once, run once, never resent"
                assert conn.hget(f"{prefix}:{{{aid}}}:buyers", "ann") is not None
            assert "order" in body["message"]  # the buyer is told where to look
            status = expect(client.get(f"/seckill/{aid}/order", headers=headers), 200)
            assert status["status"] == "pending"
        finally:
            app.extensions["seckill"].close()
    finally:
        cluster.stop()


def _evalsha_calls(conn: Any) -> int:
    stats = conn.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def test_redis_url_may_name_several_nodes_and_one_may_be_down(
    make_app: Callable[..., Flask], valkey_cluster: EmbeddedCluster, env: dict[str, str]
) -> None:
    dead = f"redis://127.0.0.1:{free_listen_port()}/0"  # nothing listens there
    several = f"{dead},{valkey_cluster.urls[1]}"
    client = make_app(REDIS_URL=several).test_client()  # auto: the second node answers
    aid = create_activity(client, total=1)["id"]
    expect(buy(client, aid, "ann"), 200)
    # The order status goes through the cold routes' limiter: its own cluster client, too
    # (it fails open, counted: not here).
    failures = REGISTRY.get_sample_value("seckill_ratelimit_failures_total") or 0.0
    status = expect(client.get(f"/seckill/{aid}/order", headers=user_headers("ann")), 200)
    assert status["status"] == "pending"
    assert (REGISTRY.get_sample_value("seckill_ratelimit_failures_total") or 0.0) == failures
    with pytest.raises(ConfigError, match="several nodes"):
        Services.build(Settings.from_env({**env, "REDIS_URL": several,
                                          "SECKILL_REDIS_CLUSTER": "off"}))
    with pytest.raises(ConfigError, match="could not be reached"):
        Services.build(Settings.from_env({**env, "REDIS_URL": f"{dead},{dead}"}))
