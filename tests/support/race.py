"""The race over real HTTP. A plugin of ``tests/conftest.py``: its fixtures need no import.

* ``gateway``: gunicorn with two gevent workers, started once for each test module that uses
  it, on the session's Valkey and on its cluster (the module's tests run on both), with a
  thread-safe HTTP client (:class:`Gateway`); ``rdb``: a client of its Redis;
* :func:`run_all`: many calls at once on a thread pool, within a phase's time budget;
* :func:`order_ids_of_buyers`: the buyers hash as user -> order id.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar, cast

import orjson
import pytest
import redis
import urllib3
from redis.cluster import RedisCluster
from redis.crc import key_slot

from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import close_client
from tests.support.gateway import gateway_env
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN

CLIENT_THREADS = 96
# Each racer makes 2 calls (URL, purchase), each repeater 6; well under this, but it is on.
USER_RATE = "20/second"
HTTP_TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)
PHASE_BUDGET = 40.0  # seconds for one phase of requests; a hang fails instead of blocking CI
T = TypeVar("T")


class Gateway:
    """A gunicorn+gevent gateway on a free port, and a thread-safe HTTP client for it."""

    def __init__(self, base: str, prefix: str, http: urllib3.PoolManager, redis_url: str,
                 cluster: EmbeddedCluster | None) -> None:
        self.base = base
        self.redis_url = redis_url
        self.prefix = prefix
        self.http = http
        self.cluster = cluster

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
    ) -> tuple[int, dict[str, Any]]:
        response = self.http.request(
            method,
            self.base + path,
            headers=headers,
            body=None if body is None else orjson.dumps(body),
            timeout=HTTP_TIMEOUT,
            retries=False,  # never resend a purchase
        )
        payload = orjson.loads(response.data) if response.data else {}
        return response.status, payload

    def activity_ids(self, count: int) -> list[str]:
        """``count`` new activity ids; on a cluster, their slots on as many masters as can be."""
        if self.cluster is None:
            return [f"c{uuid.uuid4().hex[:10]}" for _ in range(count)]
        masters = len({self.cluster.master_of_slot(s) for s in (0, 8000, 16383)})
        chosen: dict[int, str] = {}
        while len(chosen) < min(count, masters):
            aid = f"c{uuid.uuid4().hex[:10]}"
            chosen.setdefault(self.cluster.master_of_slot(key_slot(aid.encode())), aid)
        extra = [f"c{uuid.uuid4().hex[:10]}" for _ in range(count - len(chosen))]
        return [*chosen.values(), *extra]

    def create_activity(self, total: int, aid: str | None = None) -> str:
        aid = aid or self.activity_ids(1)[0]
        status, body = self.call(
            "POST",
            "/admin/activities",
            headers={**ADMIN, "Content-Type": "application/json"},
            body={
                "id": aid,
                "name": "Race",
                "total": total,
                "starts_at": iso(-60),
                "ends_at": iso(3600),
            },
        )
        assert status == 201, body
        return aid

    def key(self, aid: str, name: str) -> str:
        return f"{self.prefix}:{{{aid}}}:{name}"


@pytest.fixture(scope="module", params=["single", "cluster"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """Two gevent workers on the session's Valkey, or on the session's cluster (REDIS_URL
    naming one of its nodes, SECKILL_REDIS_CLUSTER left at auto)."""
    cluster: EmbeddedCluster | None = None
    if request.param == "cluster":
        cluster = request.getfixturevalue("valkey_cluster")
        url = cluster.url
    else:
        url = cast(EmbeddedValkey, request.getfixturevalue("valkey")).url
    prefix = f"t{uuid.uuid4().hex[:12]}"
    data = tmp_path_factory.mktemp("gateway-data")
    # Always a database of this module's own, never one named in the caller's environment;
    # the race is decided in Redis, the database only sees the activities created here.
    env = gateway_env(url, prefix, data, f"sqlite:///{data / 'orders.db'}", USER_RATE)
    http = urllib3.PoolManager(maxsize=CLIENT_THREADS + 32, block=True)
    with gunicorn_server(env, workers=2) as base:
        yield Gateway(base, prefix, http, url, cluster)
        http.clear()  # close keep-alive connections first: the server then stops at once


@pytest.fixture
def rdb(gateway: Gateway) -> Iterator[redis.Redis]:
    """A client of the gateway's Redis (the cluster client on a cluster)."""
    if gateway.cluster is not None:
        cluster = RedisCluster.from_url(gateway.cluster.url, decode_responses=True)
        yield cluster  # type: ignore[misc]
        close_client(cluster)
        return
    conn = redis.Redis.from_url(gateway.redis_url, decode_responses=True)
    yield conn
    conn.close()


def run_all(
    pool: ThreadPoolExecutor,
    job: Callable[..., T],
    args: Sequence[tuple[Any, ...]],
    gate: threading.Event | None = None,
) -> list[T]:
    """``job(*a)`` for every ``a`` in ``args`` on the pool, within the phase budget; results in
    order. With a ``gate``, it is opened once every call is queued (the jobs wait on it)."""
    futures = [pool.submit(job, *a) for a in args]
    if gate is not None:
        gate.set()
    _, pending = wait(futures, timeout=PHASE_BUDGET)
    for future in pending:
        future.cancel()
    assert not pending, f"{len(pending)} of {len(futures)} requests did not finish in time"
    return [future.result() for future in futures]


def order_ids_of_buyers(rdb: redis.Redis | RedisCluster, key: str) -> dict[str, str]:
    """The buyers hash as user -> order id. A value may carry a marker after ``|`` (the orders
    worker notes a confirmed order there); order ids never contain ``|``."""
    return {str(uid): str(value).split("|", 1)[0] for uid, value in rdb.hgetall(key).items()}
