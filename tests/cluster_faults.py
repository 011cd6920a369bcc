"""Helpers for the cluster fault tests (tests/test_cluster_failover.py,
tests/test_cluster_migration.py). Nothing here is a mock: each helper starts, freezes, asks or
reconfigures real Valkey nodes of a cluster the test started itself.

* ``private_cluster``: an :class:`EmbeddedCluster` of the test's own (the session's
  ``valkey_cluster`` is shared: these tests kill, freeze and reshard theirs);
* ``activity_on``: an activity id whose slot a chosen master owns;
* ``gateway_app``: an in-process gateway (the real ClusterWire) on such a cluster;
* ``frozen`` / ``cut_replication``: a replica that cannot receive its master's writes;
* ``node_stats``: what a node counted (commands, error replies), to show who served what.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from flask import Flask

from seckill.config import Settings
from seckill.ops.cluster import EmbeddedCluster
from seckill.store.routing import slot_of
from seckill.web.app import create_app
from tests.conftest import gateway_env


@contextlib.contextmanager
def private_cluster(folder: Path, replicas: int, node_timeout_ms: int = 1000
                    ) -> Iterator[EmbeddedCluster]:
    """3 masters with ``replicas`` replicas each, AOF always, started in ``folder``; every
    node stopped at the end (whatever the test killed or froze: SIGCONT first)."""
    cluster = EmbeddedCluster(folder, masters=3, replicas=replicas,
                              node_timeout_ms=node_timeout_ms)
    cluster.start()
    try:
        yield cluster
    finally:
        for port in cluster.ports:
            if cluster.running(port):
                _signal(cluster, port, signal.SIGCONT)
        cluster.stop()


@contextlib.contextmanager
def gateway_app(cluster: EmbeddedCluster, redis_port: int, prefix: str, tmp_path: Path,
                database_url: str, **overrides: str) -> Iterator[Flask]:
    """An in-process gateway on ``cluster``, its REDIS_URL naming the node on ``redis_port``
    (the tests' secrets, ``overrides`` last)."""
    env = gateway_env(cluster.servers[redis_port].url, prefix, tmp_path / "data", database_url,
                      "1000/second")
    env.update({"SECKILL_REDIS_CLUSTER": "on", **overrides})
    app = create_app(Settings.from_env(env))
    app.config["TESTING"] = True
    try:
        yield app
    finally:
        app.extensions["seckill"].close()


def masters(cluster: EmbeddedCluster) -> list[int]:
    """The ports of the masters that own slots, as the cluster sees them now."""
    return [node.port for node in cluster.nodes
            if node.role == "master" and node.slots and not node.failed]


def replicas_of(cluster: EmbeddedCluster, master: int) -> list[int]:
    """The ports of ``master``'s replicas."""
    return [node.port for node in cluster.nodes if node.master_port == master]


def activity_on(cluster: EmbeddedCluster, master: int, tag: str = "a") -> str:
    """A fresh activity id whose hash tag's slot ``master`` owns."""
    for _ in range(10_000):
        aid = f"{tag}{uuid.uuid4().hex[:10]}"
        if cluster.master_of_slot(slot_of(f"{{{aid}}}")) == master:
            return aid
    raise AssertionError(f"no activity id found for master {master}")


def _signal(cluster: EmbeddedCluster, port: int, signum: int) -> None:
    process = cluster.servers[port].process
    assert process is not None, f"node {port} was not started here"
    if process.poll() is None:
        os.kill(process.pid, signum)  # our own child, by its pid


@contextlib.contextmanager
def frozen(cluster: EmbeddedCluster, ports: Iterable[int]) -> Iterator[None]:
    """SIGSTOP the nodes on ``ports`` for the block (SIGCONT after it, whatever happens)."""
    stopped = list(ports)
    for port in stopped:
        _signal(cluster, port, signal.SIGSTOP)
    try:
        yield
    finally:
        for port in stopped:
            _signal(cluster, port, signal.SIGCONT)


def cut_replication(cluster: EmbeddedCluster, master: int) -> int:
    """Close ``master``'s replication links (``CLIENT KILL TYPE replica``). A frozen replica
    cannot reconnect: every write the master takes from now on exists on the master only.
    Returns how many links were closed."""
    with contextlib.closing(cluster.client(master)) as conn:
        return int(conn.client_kill_filter(_type="replica"))


def node_stats(cluster: EmbeddedCluster, port: int) -> dict[str, int]:
    """The node's counters of interest: ``evalsha`` calls, ``migrate`` calls, and error
    replies by prefix (``TRYAGAIN``, ``ASK``, ``MOVED``, ``NOSCRIPT``...)."""
    with contextlib.closing(cluster.client(port)) as conn:
        commands: Any = conn.info("commandstats")
        errors: Any = conn.info("errorstats")
    counts = {name: int(commands.get(f"cmdstat_{name}", {}).get("calls", 0))
              for name in ("evalsha", "migrate", "asking")}
    for name, value in errors.items():
        if name.startswith("errorstat_"):
            counts[name.removeprefix("errorstat_")] = int(value["count"])
    return counts



def replication_offset(cluster: EmbeddedCluster, port: int) -> int:
    """How far the node is in its shard's replication stream (a master's own offset, a
    replica's processed offset)."""
    with contextlib.closing(cluster.client(port)) as conn:
        info: Any = conn.info("replication")
    key = "master_repl_offset" if info["role"] == "master" else "slave_repl_offset"
    return int(info[key])


def wait_replicated(cluster: EmbeddedCluster, master: int, timeout: float = 10.0) -> None:
    """Wait until every replica of ``master`` has processed everything the master wrote."""
    target = replication_offset(cluster, master)
    deadline = time.monotonic() + timeout
    for replica in replicas_of(cluster, master):
        while replication_offset(cluster, replica) < target:
            assert time.monotonic() < deadline, f"replica {replica} did not catch up"
            time.sleep(0.02)
