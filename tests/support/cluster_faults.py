"""Helpers for the cluster fault tests (tests/test_cluster_failover.py,
tests/test_cluster_migration.py). Nothing here is a mock: each helper starts, freezes, asks or
reconfigures real Valkey nodes of a cluster the test started itself.

* ``private_cluster``: an :class:`EmbeddedCluster` of the test's own (the session's
  ``valkey_cluster`` is shared: these tests kill, freeze and reshard theirs);
* ``activity_on``: an activity id whose slot a chosen master owns;
* ``cluster_env`` / ``gateway_app``: an in-process gateway (the real ClusterWire) on it,
  and ``status_of`` / ``answered_again`` / ``stats`` / ``buy_when_copy_refreshed``: its answers;
* ``drained``: what Redis and the database hold once the orders worker has caught up;
* ``frozen`` / ``cut_replication``: a replica that cannot receive its master's writes;
* ``node_stats``: what a node counted (commands, error replies), to show who served what;
* ``Crowd``: buyers arriving one after another on a few threads, every answer kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.domain.orders import StoredOrder
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import slot_of
from seckill.web.app import create_app
from seckill.worker.groups import GROUP
from tests.support.api import buy
from tests.support.gateway import gateway_env
from tests.support.orders import stored_orders
from tests.support.race import Gateway
from tests.support.tokens import ADMIN, user_headers


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


def cluster_env(cluster: EmbeddedCluster, redis_port: int, prefix: str, tmp_path: Path,
                database_url: str, **overrides: str) -> dict[str, str]:
    """A gateway's (and its orders worker's) environment on ``cluster``, REDIS_URL naming the
    node on ``redis_port``, with the tests' secrets and ``overrides``."""
    env = gateway_env(cluster.servers[redis_port].url, prefix, tmp_path / "data", database_url,
                      "1000/second")
    env.update({"SECKILL_REDIS_CLUSTER": "on", **overrides})
    return env


@contextlib.contextmanager
def gateway_app(env: dict[str, str]) -> Iterator[Flask]:
    """An in-process gateway (the real ClusterWire) from ``env``, closed after the block."""
    app = create_app(Settings.from_env(env))
    app.config["TESTING"] = True
    try:
        yield app
    finally:
        app.extensions["seckill"].close()


# -- an in-process gateway's answers -----------------------------------------------------


def status_of(client: FlaskClient, aid: str, uid: str) -> tuple[int, dict[str, Any]]:
    """``GET /seckill/<aid>/order`` for ``uid``: the status code and body."""
    response = client.get(f"/seckill/{aid}/order", headers=user_headers(uid))
    return response.status_code, response.get_json()


def answered_again(client: FlaskClient, aid: str, uid: str, started: float, bound: float
                   ) -> tuple[dict[str, Any], float, int]:
    """Ask ``uid``'s order status until the gateway answers 200 (within ``bound`` seconds of
    ``started``); the body, the seconds since ``started`` and the 503s seen meanwhile."""
    unavailable = 0
    while True:
        code, body = status_of(client, aid, uid)
        if code == 200:
            return body, time.monotonic() - started, unavailable
        assert code == 503, (code, body)
        unavailable += 1
        assert time.monotonic() - started < bound, f"no answer: {body}"
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


def replica_online(cluster: EmbeddedCluster, aid: str) -> bool:
    """Whether the master that owns ``aid`` now has a replica in sync (``INFO replication``'s
    slave0 ``online``): a restarted old master answers pings long before its first sync ends,
    and until then a ``replica`` purchase waits out its timeout and answers 503 durability."""
    try:
        master = cluster.master_of_slot(slot_of(f"{{{aid}}}"))
        with contextlib.closing(cluster.client(master)) as conn:
            return replica_state(conn) == "online"
    except (redis.RedisError, KeyError, OSError):
        return False


def replica_state(conn: redis.Redis) -> str | None:
    """The state of the master's first replica (``INFO replication``'s slave0), or None."""
    info: Any = conn.info("replication")
    entry = info.get("slave0")
    return None if entry is None else str(entry.get("state"))


Sale = dict[str, tuple[dict[str, str], dict[str, str], list[StoredOrder]]]


def drained(cluster: EmbeddedCluster, prefix: str, database_url: str, aids: Iterable[str]
            ) -> Sale | None:
    """Per activity, its meta and buyers hashes (from the master that owns it now) and its
    database rows, once every stream is drained (as many rows as units sold, none pending)."""
    keys, sale = KeySpace(prefix), {}
    for aid in aids:
        try:  # mid-failover the map may be stale (MOVED) or a node away: not drained yet
            master = cluster.master_of_slot(slot_of(f"{{{aid}}}"))
            with contextlib.closing(cluster.client(master)) as conn:
                meta: dict[str, str] = conn.hgetall(keys.meta(aid))  # type: ignore[assignment]
                buyers: dict[str, str] = conn.hgetall(keys.buyers(aid))  # type: ignore[assignment]
                waiting = int(conn.xpending(keys.orders(aid), GROUP)["pending"])
        except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
            return None
        rows = stored_orders(database_url, aid)
        if waiting or len(rows) != int(meta["sold"]):
            return None
        sale[aid] = (meta, buyers, rows)
    return sale


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


@dataclasses.dataclass(frozen=True)
class Answer:
    """One buyer's purchase: who, of what, the final status and body, when it was sent and
    answered (``time.monotonic()``)."""

    uid: str
    aid: str
    status: int
    body: dict[str, Any]
    sent: float
    done: float


class Crowd:
    """Buyers arriving one after another on ``threads`` threads until stopped, each a new user
    buying one unit of one of ``aids`` in turn through ``buy(uid, aid) -> (status, body)``;
    bounded in users and in seconds. Every answer is kept in ``answers``."""

    def __init__(self, buy: Callable[[str, str], tuple[int, dict[str, Any]]],
                 aids: Sequence[str], threads: int, users: int, seconds: float = 60.0) -> None:
        self.buy, self.aids, self.seconds = buy, list(aids), seconds
        self.answers: list[Answer] = []
        self.stop = threading.Event()
        self._next = iter(range(users))
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._buyer, name=f"buyer-{i}", daemon=True)
                         for i in range(threads)]
        self.errors: list[BaseException] = []

    def _buyer(self) -> None:
        deadline = time.monotonic() + self.seconds
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                with self._lock:
                    number = next(self._next, None)
                if number is None:
                    return
                uid, aid = f"buyer{number:05d}", self.aids[number % len(self.aids)]
                sent = time.monotonic()
                status, body = self.buy(uid, aid)
                with self._lock:
                    self.answers.append(Answer(uid, aid, status, body, sent, time.monotonic()))
        except BaseException as exc:  # kept: a buyer that died must fail the test
            self.errors.append(exc)

    @contextlib.contextmanager
    def running(self) -> Iterator[Crowd]:
        """The crowd buys during the block; stopped and joined after it."""
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            for thread in self._threads:
                thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self._threads), "a buyer hangs"
        assert not self.errors, self.errors

    def of(self, aid: str, status: int | None = None) -> list[Answer]:
        """The answers for ``aid`` (with ``status`` only, if given), as they came."""
        with self._lock:
            return [a for a in self.answers
                    if a.aid == aid and (status is None or a.status == status)]


def http_buyer(gateway: Gateway) -> Callable[[str, str], tuple[int, dict[str, Any]]]:
    """A purchase over HTTP, as a browser makes it: a purchase URL, then the purchase."""

    def buy_once(uid: str, aid: str) -> tuple[int, dict[str, Any]]:
        headers = user_headers(uid)
        status, body = gateway.call("GET", f"/seckill/url?activity={aid}", headers=headers)
        if status != 200:
            return status, body
        return gateway.call("POST", body["url"], headers=headers)

    return buy_once


def refused(response: Any) -> bool:
    """Whether a response is the refusal before any decision."""
    body = response.get_json() or {}
    return (response.status_code, body.get("error"), body.get("detail")) == (
        503, "unavailable", "no_replica")
