"""A live activity's slot moves to another master in the middle of its sale (issue 12).

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flask import Flask

from seckill.ops.cluster import EmbeddedCluster
from seckill.store.keys import KeySpace
from seckill.store.routing import slot_of
from tests.cluster_faults import activity_on, gateway_app, masters, node_stats, private_cluster
from tests.conftest import buy, create_activity

CROWD_THREADS = 6
CROWD_USERS = 2000  # at most; the crowd stops once the migration is over and a second passed
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


class Crowd:
    """Buyers arriving one after another on a few threads, each a new user, until stopped
    (bounded in users and in seconds); every answer kept as (user, status, body, sent at)."""

    def __init__(self, app: Flask, aid: str) -> None:
        self.app, self.aid = app, aid
        self.answers: list[tuple[str, int, dict[str, Any], float]] = []
        self.stop = threading.Event()
        self._next = iter(range(CROWD_USERS))
        self._lock = threading.Lock()

    def _buyer(self) -> None:
        client = self.app.test_client()
        deadline = time.monotonic() + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                number = next(self._next, None)
            if number is None:
                return
            uid = f"crowd{number:04d}"
            sent = time.monotonic()
            response = buy(client, self.aid, uid)
            with self._lock:
                self.answers.append((uid, response.status_code, response.get_json(), sent))
            time.sleep(0.01)

    def run(self, pool: ThreadPoolExecutor) -> list[Any]:
        """Start the buyers on ``pool``; their futures."""
        return [pool.submit(self._buyer) for _ in range(CROWD_THREADS)]


def test_a_live_activity_slot_migrated_mid_sale_loses_and_doubles_nothing(
    tmp_path: Path, prefix: str, database_url: str
) -> None:
    total = 3000
    with private_cluster(tmp_path / "cluster", replicas=0) as cluster, gateway_app(
        cluster, cluster.ports[0], prefix, tmp_path, database_url,
        SECKILL_USER_RATE="1000/minute", SECKILL_REDIS_TIMEOUT=REDIS_TIMEOUT,
    ) as app:
        source, target = masters(cluster)[:2]
        aid = activity_on(cluster, source)
        slot = slot_of(f"{{{aid}}}")
        keys = KeySpace(prefix)
        client = app.test_client()
        create_activity(client, id=aid, total=total)
        early = {uid: buy(client, aid, uid) for uid in ("early0", "early1", "early2")}
        assert {r.status_code for r in early.values()} == {200}
        migration = Migration(cluster, slot, source, target)
        before = {port: node_stats(cluster, port) for port in (source, target)}
        late: dict[str, Any] = {}

        def repeat(uid: str) -> None:
            """An early buyer buying again: answered 409 with their order wherever it runs."""
            late[uid] = buy(app.test_client(), aid, uid)

        crowd = Crowd(app, aid)
        with ThreadPoolExecutor(CROWD_THREADS + 3) as pool:
            futures = crowd.run(pool)
            time.sleep(0.5)  # the crowd buys on the source
            started = time.monotonic()
            migration.begin()
            # Every key still on the source: a repeat buyer (all keys exist) runs there.
            repeat("early0")
            time.sleep(STEP_PAUSE)  # new buyers: TRYAGAIN (their rate counter is missing)
            rate_keys = [k for k in migration.keys_left() if ":rate:" in k]
            migration.move(rate_keys)
            time.sleep(STEP_PAUSE)
            migration.move([keys.meta(aid)])
            time.sleep(STEP_PAUSE)  # the keys split between the two: TRYAGAIN for everyone
            migration.move([keys.buyers(aid)])
            # A repeat buyer whose keys are split (the stream is still on the source) waits...
            half = pool.submit(repeat, "early1")
            time.sleep(STEP_PAUSE)
            rest = migration.keys_left()
            migration.move(rest)
            assert migration.keys_left() == []
            # ...and now, every key on the target, is sent there by ASK and runs there (the
            # target never ran the purchase script: NOSCRIPT, loaded there, sent again), as
            # does another repeat buyer.
            repeat("early2")
            time.sleep(STEP_PAUSE)  # new buyers: ASK, then TRYAGAIN on the target
            migration.finish()
            moved = time.monotonic()
            time.sleep(1.0)  # the crowd buys on the target
            crowd.stop.set()
            half.result(timeout=30)
            for future in futures:
                future.result(timeout=30)
        after = {port: node_stats(cluster, port) for port in (source, target)}
        with contextlib.closing(cluster.client(target)) as conn:
            buyers = {uid: value.split("|", 1)[0]
                      for uid, value in conn.hgetall(keys.buyers(aid)).items()}
            meta = conn.hgetall(keys.meta(aid))
            stream = conn.xrange(keys.orders(aid))
        counts = (migration.count(source), migration.count(target))

    # Who answered what.
    statuses = collections.Counter(status for _, status, _, _ in crowd.answers)
    print(f"\nmigration took {moved - started:.1f}s; crowd answers {dict(statuses)}; "
          f"{len(rest)} keys in the last MIGRATE")
    for port, name in ((source, "source"), (target, "target")):
        diff = {k: after[port].get(k, 0) - before[port].get(k, 0) for k in after[port]}
        print(f"{name} {port}: {diff}")
    assert statuses[200] > 0 and set(statuses) <= {200}, statuses
    for uid in ("early0", "early1", "early2"):
        answer = late[uid]
        assert answer.status_code == 409, (uid, answer.get_json())
        assert answer.get_json()["order_id"] == early[uid].get_json()["order_id"]
    assert after[source].get("TRYAGAIN", 0) > before[source].get("TRYAGAIN", 0)
    assert after[source].get("ASK", 0) > before[source].get("ASK", 0)
    assert after[source].get("MOVED", 0) > before[source].get("MOVED", 0)
    assert after[target]["asking"] > before[target]["asking"]
    assert after[target].get("NOSCRIPT", 0) > before[target].get("NOSCRIPT", 0)

    # Nothing lost, nothing doubled: every 200 is one order, on the new master.
    winners = {uid: body["order_id"] for uid, status, body, _ in crowd.answers if status == 200}
    winners.update({uid: r.get_json()["order_id"] for uid, r in early.items()})
    assert buyers == winners
    sold, remaining = int(meta["sold"]), int(meta["remaining"])
    assert sold == len(winners) and remaining + sold == total
    assert sorted(fields["order_id"] for _, fields in stream) == sorted(winners.values())
    assert counts[0] == 0 and counts[1] > 0, counts
    after_move = [uid for uid, status, _, sent in crowd.answers if sent > moved + 0.1]
    assert after_move, "the crowd must have bought after the move"
    assert after[target]["evalsha"] - before[target]["evalsha"] >= len(after_move)
