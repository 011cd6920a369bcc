"""A live activity's slot moves to another master in the middle of its sale.

The slot is resharded by hand, as ``valkey-cli --cluster reshard`` does it: ``CLUSTER SETSLOT
IMPORTING`` on the target, ``MIGRATING`` on the source, the keys moved by ``MIGRATE`` (a few at
a time, with buyers arriving between), then ``SETSLOT NODE`` on every master. Meanwhile a crowd
of buyers keeps buying through an in-process gateway (its real ClusterWire): a purchase that
finds the slot half-moved is answered TRYAGAIN (its keys are split, or its buyer's rate counter
does not exist yet on either side) or ASK (every key it names is on the target) and is sent
again; one that finds it moved is answered MOVED. None is lost or doubled, and the purchases
after the move run on the new master.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flask import Flask

from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import slot_of
from tests.support.api import buy, create_activity
from tests.support.cluster_faults import (
    Crowd,
    activity_on,
    cluster_env,
    drained,
    gateway_app,
    masters,
    node_stats,
    private_cluster,
)
from tests.support.orders import stop_worker_process, worker_process
from tests.support.timing import wait_until

CROWD_THREADS = 6
CROWD_USERS = 2000  # at most; the crowd is stopped a second after the migration
STEP_PAUSE = 0.3  # seconds between two MIGRATE steps: purchases arrive in each half-way state
REDIS_TIMEOUT = "5"  # SECKILL_REDIS_TIMEOUT: longer than the whole migration


class Migration:
    """Moving one slot from ``source`` to ``target`` by hand, step by step."""

    def __init__(self, cluster: EmbeddedCluster, slot: int, source: int, target: int) -> None:
        self.cluster, self.slot, self.source, self.target = cluster, slot, source, target
        ids = {node.port: node.node_id for node in cluster.nodes}
        self.source_id, self.target_id = ids[source], ids[target]

    def _on(self, port: int, *command: Any) -> Any:
        with contextlib.closing(self.cluster.client(port)) as conn:
            return conn.execute_command(*command)

    def begin(self) -> None:
        """IMPORTING on the target first, then MIGRATING on the source."""
        self._on(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.source_id)
        self._on(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.target_id)

    def keys_left(self) -> list[str]:
        """The slot's keys still on the source."""
        return [str(key) for key in
                self._on(self.source, "CLUSTER", "GETKEYSINSLOT", self.slot, 10_000)]

    def move(self, keys: list[str]) -> None:
        """MIGRATE ``keys`` (atomically, together) to the target."""
        assert self._on(self.source, "MIGRATE", self.cluster.host, self.target, "", 0, 5000,
                        "KEYS", *keys) in ("OK", b"OK")

    def finish(self) -> None:
        """``SETSLOT NODE`` on the target, the source, then every other master."""
        for port in [self.target, self.source,
                     *(p for p in masters(self.cluster) if p not in (self.source, self.target))]:
            self._on(port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)

    def count(self, port: int) -> int:
        """How many of the slot's keys the node on ``port`` holds."""
        return int(self._on(port, "CLUSTER", "COUNTKEYSINSLOT", self.slot))


def in_process_buyer(app: Flask) -> Callable[[str, str], tuple[int, dict[str, Any]]]:
    """``buy`` through ``app`` on a test client of each thread's own."""
    local = threading.local()

    def buy_once(uid: str, aid: str) -> tuple[int, dict[str, Any]]:
        if not hasattr(local, "client"):
            local.client = app.test_client()
        response = buy(local.client, aid, uid)
        return response.status_code, response.get_json()

    return buy_once


@contextlib.contextmanager
def running_worker(env: dict[str, str], log: Path) -> Iterator[None]:
    """``seckill worker`` (``python -m seckill.worker``) as a child during the block."""
    process = worker_process(env, log)
    try:
        yield
    finally:
        stop_worker_process(process)


def test_a_live_activity_slot_migrated_mid_sale_loses_and_doubles_nothing(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    """Purchases go on throughout (none answered anything but 200, since the migration is
    shorter than SECKILL_REDIS_TIMEOUT) and the orders worker runs throughout; afterwards the
    200s, the buyers hash, the stream, the database and remaining/sold/total agree, and the
    slot's keys are all on the new master, which served the purchases after the move."""
    total = 3000
    with private_cluster(tmp_path / "cluster", replicas=0) as cluster:
        env = cluster_env(cluster, cluster.ports[0], prefix, tmp_path, database_url,
                          SECKILL_USER_RATE="1000/minute", SECKILL_REDIS_TIMEOUT=REDIS_TIMEOUT)
        source, target = masters(cluster)[:2]
        aid = activity_on(cluster, source)
        keys = KeySpace(prefix)
        migration = Migration(cluster, slot_of(f"{{{aid}}}"), source, target)
        with gateway_app(env) as app, running_worker(env, tmp_path / "worker.log"):
            client = app.test_client()
            create_activity(client, id=aid, total=total)
            early = {uid: buy(client, aid, uid) for uid in ("early0", "early1", "early2")}
            assert {r.status_code for r in early.values()} == {200}
            before = {port: node_stats(cluster, port) for port in (source, target)}
            late: dict[str, Any] = {}

            def repeat(uid: str) -> None:
                """An early buyer buying again: 409 with their order, wherever it runs."""
                late[uid] = buy(app.test_client(), aid, uid)

            crowd = Crowd(in_process_buyer(app), [aid], CROWD_THREADS, CROWD_USERS)
            with crowd.running(), ThreadPoolExecutor(1) as pool:
                time.sleep(0.5)  # the crowd buys on the source
                started = time.monotonic()
                migration.begin()
                # Every key still on the source: a repeat buyer (all keys exist) runs there.
                repeat("early0")
                time.sleep(STEP_PAUSE)  # new buyers: TRYAGAIN (their rate counter is missing)
                migration.move([k for k in migration.keys_left() if ":rate:" in k])
                time.sleep(STEP_PAUSE)
                migration.move([keys.meta(aid)])
                time.sleep(STEP_PAUSE)  # the keys split between the two: TRYAGAIN for all
                migration.move([keys.buyers(aid)])
                # A repeat buyer whose keys are split (the stream is still on the source)...
                half = pool.submit(repeat, "early1")
                time.sleep(STEP_PAUSE)
                rest = migration.keys_left()
                migration.move(rest)
                assert migration.keys_left() == []
                # ...now, every key on the target, is sent there by ASK and runs there (the
                # target never ran the purchase script: NOSCRIPT, loaded there, sent again),
                # as does another repeat buyer.
                repeat("early2")
                time.sleep(STEP_PAUSE)  # new buyers: ASK, then TRYAGAIN on the target
                migration.finish()
                moved = time.monotonic()
                time.sleep(1.0)  # the crowd buys on the target
                half.result(timeout=30)
            after = {port: node_stats(cluster, port) for port in (source, target)}
            sale = wait_until(lambda: drained(cluster, prefix, database_url, [aid]), 30,
                              interval=0.2, what="the worker drained the stream")
        counts = (migration.count(source), migration.count(target))

    statuses = collections.Counter(answer.status for answer in crowd.answers)
    print(f"\nmigration took {moved - started:.1f}s; crowd answers {dict(statuses)}; "
          f"{len(rest)} key(s) in the last MIGRATE")
    for port, name in ((source, "source"), (target, "target")):
        diff = {k: after[port].get(k, 0) - before[port].get(k, 0) for k in after[port]}
        print(f"{name} {port}: {diff}")
    assert statuses[200] > 0 and set(statuses) <= {200}, statuses
    for uid in ("early0", "early1", "early2"):
        answer = late[uid]
        assert answer.status_code == 409, (uid, answer.get_json())
        assert answer.get_json()["order_id"] == early[uid].get_json()["order_id"]
    # Each way of being sent again was taken.
    assert after[source].get("TRYAGAIN", 0) > before[source].get("TRYAGAIN", 0)
    assert after[source].get("ASK", 0) > before[source].get("ASK", 0)
    assert after[source].get("MOVED", 0) > before[source].get("MOVED", 0)
    assert after[target]["asking"] > before[target]["asking"]
    assert after[target].get("NOSCRIPT", 0) > before[target].get("NOSCRIPT", 0)

    # Nothing lost, nothing doubled: every 200 is one order, on the new master and stored.
    winners = {a.uid: a.body["order_id"] for a in crowd.of(aid, 200)}
    winners.update({uid: r.get_json()["order_id"] for uid, r in early.items()})
    meta, buyers, rows = sale[aid]
    assert {uid: value.split("|", 1)[0] for uid, value in buyers.items()} == winners
    sold, remaining = int(meta["sold"]), int(meta["remaining"])
    assert sold == len(winners) and remaining + sold == total
    assert {row.user_id: row.order_id for row in rows} == winners
    assert len(rows) == len(winners)
    # The gateway found the keys' new master: they are all there, and it served the rest.
    assert counts[0] == 0 and counts[1] > 0, counts
    after_move = [a for a in crowd.answers if a.sent > moved + 0.1]
    assert after_move, "the crowd must have bought after the move"
    assert after[target]["evalsha"] - before[target]["evalsha"] >= len(after_move)
