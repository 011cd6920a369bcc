"""A master of the cluster frozen (SIGSTOP) mid-sale: the cluster fails over to its replica
in a few seconds, and every gateway process must follow the new master within about the
cluster's node timeout plus a second, not keep sending to the frozen node.

A frozen node is the gray case a killed one is not: the kernel still accepts connections for
it until its accept queue is full, then they time out, and nothing ever answers, so nothing
tells a client "this node is gone" but a timeout. A crowd buys over HTTP from a gunicorn with
two gevent workers (two processes, each with its own slot map), REDIS_URL naming the frozen
master; the frozen node's accept queue is filled at once, as a big crowd's connections fill
it, so that the gateway's new connections time out; the test counts the 503s by when each
purchase was sent.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import redis
import urllib3

from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import slot_of
from tests.support.cluster_faults import (
    Crowd,
    activity_on,
    cluster_env,
    frozen,
    http_buyer,
    masters,
    private_cluster,
    replicas_of,
)
from tests.support.race import Gateway
from tests.support.servers import gunicorn_server
from tests.support.timing import wait_until

NODE_TIMEOUT = 1.0  # seconds: the cluster's cluster-node-timeout
# After the failover, purchases sent later than this are all answered by the new master: the
# node timeout plus a second.
FOLLOW_BOUND = NODE_TIMEOUT + 1.0
FAILOVER_BOUND = 15.0  # seconds from the freeze to the replica's promotion, at most
AFTER = 5.0  # seconds the crowd goes on after the failover
CROWD_THREADS = 16
TOTAL = 100_000  # units per activity: none sells out


def owner_as_seen_by(cluster: EmbeddedCluster, port: int, slot: int) -> int | None:
    """The port of the master that owns ``slot``, as the node on ``port`` says (CLUSTER
    SLOTS), or None when it does not answer."""
    try:
        with contextlib.closing(cluster.client(port)) as conn:
            ranges = conn.execute_command("CLUSTER SLOTS")
    except redis.RedisError:
        return None
    for start, end, primary, *_ in ranges:  # [start, end, [host, port, id], replicas...]
        if int(start) <= slot <= int(end):
            return int(primary[1])
    return None


@contextlib.contextmanager
def accept_queue_filled(host: str, port: int, limit: int = 5000) -> Iterator[int]:
    """Connections to the frozen node on ``port`` until one times out (its accept queue is
    full: Valkey's tcp-backlog, 511); held open for the block. Yields how many it took."""
    held: list[socket.socket] = []
    try:
        for _ in range(limit):
            try:
                held.append(socket.create_connection((host, port), timeout=0.3))
            except TimeoutError:
                break
        else:
            raise AssertionError(f"{limit} connections to a frozen node all accepted")
        yield len(held)
    finally:
        for sock in held:
            sock.close()


def test_every_gateway_process_follows_a_frozen_master_s_replica(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    with private_cluster(tmp_path / "cluster", replicas=2,
                         node_timeout_ms=int(NODE_TIMEOUT * 1000)) as cluster:
        victim, other, *_ = masters(cluster)
        standby = replicas_of(cluster, victim)
        # Every buyer on the victim's activity: the most calls to the frozen master.
        aids = [activity_on(cluster, victim)]
        slot = slot_of(f"{{{aids[0]}}}")
        env = cluster_env(cluster, victim, prefix, tmp_path, database_url,
                          SECKILL_DURABILITY="replica", SECKILL_DURABILITY_UNGUARDED="1")
        http = urllib3.PoolManager(maxsize=CROWD_THREADS + 8, block=True)
        with gunicorn_server(env, workers=2) as base:
            gateway = Gateway(base, prefix, http, env["REDIS_URL"], cluster)
            gateway.create_activity(TOTAL, aids[0])
            crowd = Crowd(http_buyer(gateway), aids, CROWD_THREADS, 1_000_000, seconds=90)
            with crowd.running():
                # Both workers have bought from the victim (each has its map and connections).
                wait_until(lambda: len(crowd.of(aids[0], 200)) >= 200, 60,
                           what="200 purchases of the victim's activity")
                with frozen(cluster, [victim]), accept_queue_filled(cluster.host, victim):
                    froze = time.monotonic()
                    promoted = wait_until(
                        lambda: (owner if (owner := owner_as_seen_by(cluster, other, slot))
                                 in standby else None),
                        FAILOVER_BOUND, interval=0.02, what="a replica promoted")
                    failover = time.monotonic()
                    time.sleep(AFTER)  # the crowd goes on, the victim still frozen
            http.clear()
            # What the new master holds once the old one, thawed, has rejoined as a replica.
            keys = KeySpace(prefix)
            with contextlib.closing(cluster.client(promoted)) as conn:
                meta: dict[str, str] = conn.hgetall(keys.meta(aids[0]))  # type: ignore[assignment]
                buyers: dict[str, str] = conn.hgetall(keys.buyers(aids[0]))  # type: ignore[assignment]

    failed = [a for a in crowd.of(aids[0]) if a.status != 200]
    late = [a for a in failed if a.sent > failover + FOLLOW_BOUND]
    why = collections.Counter((a.status, a.body.get("detail")) for a in failed)
    last = max((a.sent - failover for a in failed), default=0.0)
    print(f"\nfailover {failover - froze:.1f}s after the freeze; {len(failed)} of "
          f"{len(crowd.of(aids[0]))} purchases of the victim's activity not 200 {dict(why)}, "
          f"the last sent {last:.1f}s after the failover; {len(late)} sent later than "
          f"{FOLLOW_BOUND:.1f}s after it; sent at (s after the failover): "
          f"{sorted(round(a.sent - failover, 1) for a in failed)}")
    assert {a.status for a in crowd.answers} <= {200, 503}, failed[:5]
    assert not late, [(round(a.sent - failover, 2), a.status, a.body) for a in late[:10]]
    # Sales went on on the new master after the failover.
    assert any(a.sent > failover + FOLLOW_BOUND for a in crowd.of(aids[0], 200))
    # Nothing oversold, every 200 kept (replica durability: each was on a replica).
    remaining, sold = int(meta["remaining"]), int(meta["sold"])
    assert remaining >= 0 and remaining + sold == TOTAL, meta
    assert len(buyers) == sold, (len(buyers), sold)
    for answer in crowd.of(aids[0], 200):
        assert buyers.get(answer.uid, "").split("|", 1)[0] == answer.body["order_id"], answer
