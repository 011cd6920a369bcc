"""The test's Redis (Valkey) seen directly: a client for one server or a cluster, the keys a
test left, and a name whose slot a chosen cluster master owns."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from seckill.ops.stack.cluster import EmbeddedCluster


def connect(url: str) -> redis.Redis:
    """A client of the Redis at ``url``, decoding replies: on a cluster node, redis-py's cluster
    client (the same commands, routed by key; a MULTI stays in one slot). Close it with
    ``seckill.store.plumbing.connection.close_client``."""
    with contextlib.closing(redis.Redis.from_url(url, socket_timeout=5)) as probe:
        cluster = bool(probe.info("cluster").get("cluster_enabled"))
    if cluster:
        return RedisCluster.from_url(url, decode_responses=True)  # type: ignore[return-value]
    return redis.Redis.from_url(url, decode_responses=True)


def keys_of(rds: redis.Redis, prefix: str) -> set[str]:
    """Every key that mentions this test's prefix (rate-limit keys carry it inside), but the
    cold routes' flask-limiter counters: those are keyed by the caller (a user id, or
    "operator"), never by what a request carried, and every authenticated call makes one."""
    limiter = f"{prefix}:rate:LIMITER/"
    return {str(k) for k in rds.scan_iter(match=f"*{prefix}*", count=1000)
            if not str(k).startswith(limiter)}


def on_master(cluster: EmbeddedCluster, master: int, make: Callable[[int], str]) -> str:
    """The first of ``make(0)``, ``make(1)``, ... (keys, or activity ids: an id's slot is its
    keys' slot) whose slot the master on port ``master`` owns."""
    for i in range(10_000):
        name = make(i)
        if cluster.master_of_slot(key_slot(name.encode())) == master:
            return name
    raise AssertionError(f"nothing found for master {master}")
