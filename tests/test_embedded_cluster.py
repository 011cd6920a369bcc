"""The embedded Valkey Cluster (``seckill.ops.stack.cluster``) the cluster tests run on: its shape,
where a key lands, a failover that keeps acknowledged writes, a rejoin, a restart from its
folder. Real servers, the ``valkey_cluster`` session fixture and one cluster of its own."""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from redis.cluster import RedisCluster, key_slot

from seckill.ops.stack.cluster import CLUSTER_SLOTS, ClusterError, EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.ops.stack.ports import (
    BUS_PORT_OFFSET,
    LISTEN_PORTS_FROM,
    free_cluster_ports,
    free_listen_port,
)
from tests.support.valkey import on_master


@contextlib.contextmanager
def cluster_client(url: str) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(url, decode_responses=True, socket_timeout=2)
    try:
        yield client
    finally:
        # redis-py 8's RedisCluster.close() leaves the nodes' pooled sockets open.
        pools = [n.redis_connection.connection_pool for n in client.get_nodes()
                 if n.redis_connection is not None]
        client.close()
        for pool in pools:
            pool.disconnect()


def key_on(cluster: EmbeddedCluster, master: int, prefix: str) -> str:
    """A key (with a hash tag, for more keys in its slot) whose slot ``master`` owns."""
    return on_master(cluster, master, lambda i: f"{prefix}:{{t{i}}}")


def test_all_slots_are_covered_by_three_masters_with_one_replica_each(
    valkey_cluster: EmbeddedCluster,
) -> None:
    nodes = valkey_cluster.nodes
    assert sorted(n.port for n in nodes) == sorted(valkey_cluster.ports)
    assert len(valkey_cluster.urls) == 6 and valkey_cluster.url in valkey_cluster.urls
    masters = [n for n in nodes if n.role == "master"]
    assert len(masters) == 3, nodes
    ranges = sorted(r for m in masters for r in m.slots)
    assert ranges[0][0] == 0 and ranges[-1][1] == CLUSTER_SLOTS - 1, ranges
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges)), ranges
    for master in masters:
        assert len([n for n in nodes if n.master_port == master.port]) == 1, nodes
    ours = {child.pid for child in psutil.Process().children()}
    for each in nodes:
        assert not each.failed and each.pid in ours, each  # our children, by pid
        with contextlib.closing(valkey_cluster.client(each.port)) as conn:
            info = conn.execute_command("CLUSTER INFO")
            assert info["cluster_state"] == "ok", info
            assert int(info["cluster_slots_assigned"]) == CLUSTER_SLOTS
            assert conn.config_get("appendonly") == {"appendonly": "yes"}
            assert conn.config_get("appendfsync") == {"appendfsync": "always"}
            if each.role == "replica":
                assert conn.info("replication")["master_link_status"] == "up"


def test_a_key_lands_on_the_master_that_owns_its_slot(valkey_cluster: EmbeddedCluster) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    masters = [n.port for n in valkey_cluster.nodes if n.role == "master"]
    keys = [key_on(valkey_cluster, master, prefix) for master in masters]  # one on each
    with cluster_client(valkey_cluster.url) as client:
        for key in keys:
            assert client.set(key, f"v-{key}")
    for key in keys:
        owner = valkey_cluster.master_of_slot(key_slot(key.encode()))
        for master in masters:
            with contextlib.closing(valkey_cluster.client(master)) as conn:
                if master == owner:
                    assert conn.get(key) == f"v-{key}"
                else:
                    with pytest.raises(redis.exceptions.MovedError, match=f":{owner}$"):
                        conn.get(key)  # MOVED to the owner
    with cluster_client(valkey_cluster.url) as client:
        for key in keys:
            client.delete(key)


def test_a_killed_master_fails_over_to_its_replica_and_rejoins_as_a_replica(
    valkey_cluster: EmbeddedCluster,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    master = next(n.port for n in valkey_cluster.nodes if n.role == "master")
    (replica,) = [n.port for n in valkey_cluster.nodes if n.master_port == master]
    key = key_on(valkey_cluster, master, prefix)
    slot = key_slot(key.encode())
    written = {f"{key}:{i}": str(i) for i in range(50)}  # one slot: the tag is {t<n>}
    with contextlib.closing(valkey_cluster.client(master)) as conn:
        conn.mset(written)
        assert conn.execute_command("WAIT", 1, 2000) == 1  # on the replica before the kill

    try:
        started = time.monotonic()
        valkey_cluster.kill(master)
        valkey_cluster.wait_healthy(timeout=30)
        took = time.monotonic() - started
        assert took < 15, took
        assert valkey_cluster.master_of_slot(slot) == replica
        promoted = next(n for n in valkey_cluster.nodes if n.port == replica)
        assert promoted.role == "master" and promoted.pid is not None
        with cluster_client(valkey_cluster.servers[replica].url) as client:
            assert client.mget(list(written)) == list(written.values())

        valkey_cluster.restart(master, timeout=30)
        back = next(n for n in valkey_cluster.nodes if n.port == master)
        assert (back.role, back.master_port) == ("replica", replica), valkey_cluster.nodes
        with contextlib.closing(valkey_cluster.client(master)) as conn:
            assert conn.info("replication")["master_link_status"] == "up"
        print(f"failover {took:.1f}s, rejoin {time.monotonic() - started - took:.1f}s")
    finally:
        if not valkey_cluster.running(master):  # keep the session's cluster whole
            valkey_cluster.restart(master, timeout=30)
        with cluster_client(valkey_cluster.servers[replica].url) as client:
            for each in written:
                client.delete(each)


def test_a_cluster_comes_back_from_its_folder_and_stops_every_node(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    with EmbeddedCluster(folder, masters=3, replicas=0, node_timeout_ms=1000) as first:
        ports, ids = first.ports, {n.port: n.node_id for n in first.nodes}
        pids = [n.pid for n in first.nodes]
        assert all(pids) and (folder / f"node-{ports[0]}" / "nodes.conf").is_file()
        with cluster_client(first.url) as client:
            keys = {f"back:{i}": str(i) for i in range(30)}
            for key, value in keys.items():
                client.set(key, value)  # appendfsync always: on disk once answered
        # A master down and no replica: not healthy, and the error says why, logs included.
        first.kill(ports[-1])
        with pytest.raises(ClusterError, match=r"not healthy within 1s(.|\n)*--- node"):
            first.wait_healthy(timeout=1)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids if pid is not None)

    with pytest.raises(ClusterError, match="holds a cluster of 3 node"):
        EmbeddedCluster(folder, masters=3, replicas=1)
    again = EmbeddedCluster(folder, masters=3, replicas=0, node_timeout_ms=1000)
    assert again.ports == ports  # the folder keeps its ports
    with again:
        # Not created again: valkey-cli would refuse nodes holding keys, and make new epochs.
        assert {n.port: n.node_id for n in again.nodes} == ids
        with cluster_client(again.url) as client:
            assert client.mget_nonatomic(list(keys)) == list(keys.values())


def test_a_node_that_cannot_bind_its_port_says_why(tmp_path: Path) -> None:
    """A server that exits at start names its log's last lines (a CI run once only had the log
    file's path, on a machine since gone)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = EmbeddedValkey(tmp_path / "node", port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match=r"exited with 1.*(?i:address already in use)"):
            server.start(timeout=10)


def test_another_server_on_the_port_is_not_taken_for_ours(
        tmp_path: Path, valkey: EmbeddedValkey) -> None:
    """A node started on a port someone else's Valkey holds exits; its PING reaching the other
    server must not count as it answering."""
    server = EmbeddedValkey(tmp_path / "node", port=valkey.port)
    with pytest.raises(RuntimeError, match=r"exited with 1.*(?i:address already in use)"):
        server.start(timeout=10)


def test_the_ports_chosen_for_a_cluster_never_include_another_nodes_bus_port() -> None:
    """A node's cluster bus listens on its port + 10000. Ports drawn from 10000 up to below the
    ephemeral range could make one node's port another node's bus port: the second node then
    failed to bind (seen once on CI: "bind: Address already in use" for a 6-node cluster)."""
    random.seed(20826)
    for _ in range(10000):
        ports = free_cluster_ports(6)
        buses = {port + BUS_PORT_OFFSET for port in ports}
        assert len(set(ports)) == 6 and not buses & set(ports), ports


def test_a_listeners_port_is_never_one_an_outgoing_connection_can_take() -> None:
    """``seckill up`` chooses its instances' and its exporter's ports before they bind, seconds
    later. A port from the kernel's ephemeral range could be taken meanwhile as the local port
    of an outgoing connection (seen on CI: the exporter's "Address already in use"); these are
    drawn below that range, above the cluster's, distinct from those already chosen."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low - LISTEN_PORTS_FROM < 1000:
        pytest.skip(f"this machine's ephemeral range starts at {low}: no room below it")
    chosen: list[int] = []
    for _ in range(200):
        port = free_listen_port(avoid=chosen)
        assert LISTEN_PORTS_FROM <= port < low and port not in chosen, port
        chosen.append(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", chosen[-1]))
