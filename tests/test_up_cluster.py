"""``seckill up --redis-nodes N [--replicas R]``, run as a real process: the embedded cluster
comes up (every node asked, the printed REDIS_URL used), its nodes are ``up``'s children, a
node killed with SIGKILL is restarted, every node stops with ``up``, and a second ``up`` on the
same data folder brings the same cluster back. What the gateway itself does on a cluster is
another suite's: here it only has to start."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis
from redis.cluster import RedisCluster

from seckill.ops.stack.cluster import CLUSTER_SLOTS, EmbeddedCluster
from seckill.ops.stack.embedded import read_password
from seckill.ops.stack.ports import free_listen_port
from tests.support.cli import (
    SECKILL,
    alive,
    assert_one_line_error,
    clean_environ,
    seckill_process,
    stop_and_check_nothing_is_left,
)
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, URL_KEY


def up_env(data: Path) -> dict[str, str]:
    return {"SECKILL_ENV": "development", "SECKILL_DATA_DIR": str(data),
            "SECKILL_SECRET_KEY": URL_KEY, "SECKILL_JWT_SECRET": JWT_SECRET,
            "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN, "SECKILL_METRICS_TOKEN": METRICS_TOKEN}


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


@contextlib.contextmanager
def up_on_a_cluster(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[
    tuple[subprocess.Popen[bytes], Path, list[psutil.Process]]
]:
    """Run ``seckill up --no-nginx`` with ``args`` until its banner is printed (not /healthz:
    the gateway's work on a cluster is not this test's); every process seen is gone after."""
    log = tmp_path / f"up-{time.monotonic_ns()}.log"
    seen: list[psutil.Process] = []
    with log.open("wb") as sink, subprocess.Popen(
        [str(SECKILL), "up", "--port", str(free_listen_port()), "--no-nginx", "--workers", "1",
         *args],
        env=clean_environ(**env), stdin=subprocess.DEVNULL, stdout=sink,
        stderr=subprocess.STDOUT,
    ) as up:
        try:
            def banner() -> bool:
                assert up.poll() is None, f"seckill up exited: {log.read_text()}"
                return "seckill is up on" in log.read_text()

            wait_for(banner, 90, f"seckill up's banner ({log})")
            seen.extend(psutil.Process(up.pid).children(recursive=True))
            yield up, log, seen
        finally:  # a failed test's leftovers: SIGTERM to up, then SIGKILL to what is left
            if up.poll() is None:
                seen.extend(psutil.Process(up.pid).children(recursive=True))
                up.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                up.wait(30)
            if up.poll() is None:  # up itself did not stop
                seen.append(psutil.Process(up.pid))
            left = [p for p in seen if alive(p)]
            for process in left:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            psutil.wait_procs(left, timeout=10)


def nodes_of(up: subprocess.Popen[bytes]) -> dict[int, psutil.Process]:
    """``up``'s valkey-server children in cluster mode, by the port each serves (a server's
    process title is ``valkey-server <host>:<port> [cluster]``)."""
    found = {}
    for child in psutil.Process(up.pid).children():
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:  # gone, or a zombie not reaped yet
            continue
        if match := re.search(r"valkey-server \S+:(\d+) \[cluster\]", title):
            found[int(match.group(1))] = child
    return found


def printed_redis_url(log: Path) -> str:
    exports = re.search(r"^  export (.*)$", log.read_text(), re.MULTILINE)
    assert exports is not None, log.read_text()
    return dict(pair.split("=", 1) for pair in exports.group(1).split())["REDIS_URL"]


@contextlib.contextmanager
def cluster_client(url: str) -> Iterator[RedisCluster]:
    """A cluster client from the first node a REDIS_URL names (redis-py takes one URL)."""
    client = RedisCluster.from_url(url.split(",")[0], decode_responses=True, socket_timeout=2)
    try:
        yield client
    finally:  # redis-py 8's close() leaves the nodes' pooled sockets open
        pools = [n.redis_connection.connection_pool for n in client.get_nodes()
                 if n.redis_connection is not None]
        client.close()
        for pool in pools:
            pool.disconnect()


def test_up_runs_a_cluster_restarts_a_killed_node_stops_every_node_and_comes_back(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    keys = {f"up-cluster:{i}": str(i) for i in range(40)}  # on every master
    with up_on_a_cluster(tmp_path, up_env(data), "--redis-nodes", "3", "--replicas", "1") as (
        up, log, seen
    ):
        text = log.read_text()
        assert "embedded Valkey Cluster: 3 masters, 1 replica(s) each, 6 nodes" in text, text
        nodes = nodes_of(up)
        assert len(nodes) == 6, nodes  # each node a child of up
        assert sorted(nodes) == sorted(int(p.name.removeprefix("node-"))
                                       for p in (data / "cluster").iterdir())

        # The cluster as up left it: CLUSTER INFO ok on every node, 3 masters and 3 replicas
        # (each linked to its master with the password), AOF always, each node's data in
        # <data>/cluster/node-<port>; every node refuses a client without the password.
        password = read_password(data)
        assert password is not None and password in printed_redis_url(log)
        view = EmbeddedCluster(data / "cluster", masters=3, replicas=1, password=password)
        assert sorted(view.ports) == sorted(nodes)
        for port in view.ports:
            with (contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as stranger,
                  pytest.raises(redis.AuthenticationError)):
                stranger.set("up-cluster:0", "rewritten")
            with contextlib.closing(view.client(port)) as conn:
                info = conn.execute_command("CLUSTER INFO")
                assert conn.config_get("appendfsync") == {"appendfsync": "always"}
                assert conn.config_get("dir") == {"dir": str(data / "cluster" / f"node-{port}")}
            assert info["cluster_state"] == "ok", (port, info)
            assert int(info["cluster_slots_assigned"]) == CLUSTER_SLOTS, (port, info)
        roles = [n.role for n in view.nodes]
        assert roles.count("master") == 3 and roles.count("replica") == 3, view.nodes

        # The printed REDIS_URL names every node (a process starting while one is away reads
        # the slot map from another); the children are told it is a cluster.
        url = printed_redis_url(log)
        named = sorted(int(part.rsplit(":", 1)[1].split("/")[0]) for part in url.split(","))
        assert named == sorted(nodes), url
        for child in psutil.Process(up.pid).children():
            if "valkey-server" not in " ".join(child.cmdline()):
                environ = child.environ()
                assert environ.get("SECKILL_REDIS_CLUSTER") == "on", child.cmdline()
                assert environ.get("REDIS_URL") == url
        with cluster_client(url) as client:
            for key, value in keys.items():
                client.set(key, value)

        # kill -9 a master: up restarts it on its port, from its folder.
        master = next(n.port for n in view.nodes if n.role == "master")
        dead = nodes[master]
        dead.kill()
        # One look per check: between two looks the killed node can vanish (its pid reaped,
        # its successor still the AOF check before it becomes valkey-server): KeyError.
        def restarted() -> bool:
            now = nodes_of(up).get(master)
            return now is not None and now.pid != dead.pid

        wait_for(restarted, 30, f"node {master} restarted")
        seen.extend(psutil.Process(up.pid).children())
        assert re.search(rf"valkey-{master} \(pid {dead.pid}\) exited with code -9 .*restarting",
                         log.read_text()), log.read_text()
        view.wait_healthy(timeout=30)
        with cluster_client(url) as client:
            assert client.mget_nonatomic(list(keys)) == list(keys.values())

        stop_and_check_nothing_is_left(up, log, seen)
        text = log.read_text()
        for port in nodes:
            assert f"valkey-{port} stopped" in text, text
        assert text.index("orders-worker stopped") < min(
            text.index(f"valkey-{port} stopped") for port in nodes)
        assert not (data / "up.json").exists()

    # A second up on the same folder: the same nodes, no new cluster, the data kept.
    with up_on_a_cluster(tmp_path, up_env(data), "--redis-nodes", "3", "--replicas", "1") as (
        up, log, seen
    ):
        assert sorted(nodes_of(up)) == sorted(nodes)
        view.wait_healthy(timeout=30)
        with cluster_client(printed_redis_url(log)) as client:
            assert client.mget_nonatomic(list(keys)) == list(keys.values())
        stop_and_check_nothing_is_left(up, log, seen)


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [
        (["--redis-nodes", "2"], {}, "--redis-nodes must be at least 3"),
        (["--redis-nodes", "3", "--replicas", "-1"], {}, "--replicas must be 0 or more"),
        (["--replicas", "1"], {}, "--replicas goes with --redis-nodes"),
        (["--redis-nodes", "3"], {"REDIS_URL": "redis://127.0.0.1:1/0"},
         "unset REDIS_URL, or drop --redis-nodes"),
        (["--redis-nodes", "3", "--replicas", "1"], {}, "holds a cluster of 3 node(s), not 6"),
        ([], {"SECKILL_DURABILITY": "replica"}, "the single embedded Valkey has no replica"),
    ],
)
def test_up_refuses_a_bad_cluster(
    tmp_path: Path, args: list[str], extra: dict[str, str], message: str
) -> None:
    data = tmp_path / "data"
    for port in (40001, 40002, 40003):  # a folder of a 3-node cluster
        (data / "cluster" / f"node-{port}").mkdir(parents=True)
    result = seckill_process("up", "--port", str(free_listen_port()), "--no-nginx", *args,
                             env={**up_env(data), **extra})
    assert_one_line_error(result, 2, message)
    # No node was started for this folder (the session's own Valkeys are this process's
    # children too, so look for one working in this folder: valkey-server runs in its --dir).
    assert not [p for p in psutil.process_iter(["name", "cwd"])
                if p.info["name"] == "valkey-server"
                and str(p.info["cwd"] or "").startswith(str(data))]
