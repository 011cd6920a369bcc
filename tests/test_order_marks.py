"""The confirmed mark: an order stored in the database is never left
``pending`` in Redis, whatever moment a connection or a server dies at.

Everything is real: the session's Valkey (and its cluster, for reconcile; own key prefix per
test), the test's own SQLite file or PostgreSQL schema, the orders worker run as ``seckill
worker`` runs it (``run`` in a thread), and a TCP relay (``tests/support/relay.py``) that cuts the
worker's connection at the exact moment the stream entries are acknowledged.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from redis.cluster import RedisCluster

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.audit.reconcile import reconcile
from seckill.store.plumbing.connection import close_client
from seckill.worker.orders import GROUP
from tests.support.api import activity_stats, buy_ok, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import (
    WorkerThread,
    built_worker,
    drain,
    pending,
    stored_orders,
    stream_key,
)
from tests.support.relay import CuttingProxy
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database


# One server only: the relay stands between the worker and one server; a cluster client
# would follow the slot map to the nodes' own ports, around it. The reconcile tests run on both.
def test_a_cut_right_after_the_acknowledgement_never_leaves_an_order_pending(
    client: FlaskClient, make_activity: Any, env: dict[str, str], database_url: str,
    valkey: EmbeddedValkey, rds: redis.Redis, prefix: str,
) -> None:
    """Six orders wait in the stream; the worker reads them, stores them, and the moment the
    group shows them acknowledged (nothing pending, everything delivered) its connection is
    cut, before the reply to that command reaches it: what a kill -9 of Valkey right after
    the acknowledgement does to the worker, every time. Then the worker goes on. Each buyer
    must end ``confirmed``, as the database and the stats say, not ``pending`` forever."""
    aid = make_activity(total=10)["id"]
    stream = stream_key(prefix, aid)
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(6)}
    last_id = cast(list[tuple[str, Any]], rds.xrevrange(stream, count=1))[0][0]
    watcher = redis.Redis.from_url(valkey.url, decode_responses=True)

    def acknowledged() -> bool:
        """The group delivered every entry and none is pending: the acknowledgement ran."""
        if not watcher.exists(stream):
            return False
        groups: Any = watcher.xinfo_groups(stream)
        group = next((g for g in groups if g["name"] == GROUP), None)
        return bool(group and group["last-delivered-id"] == last_id and group["pending"] == 0)

    def statuses() -> dict[str, str]:
        return {uid: order_status(client, aid, uid)["status"] for uid in bought}

    try:
        with CuttingProxy(valkey.port, cut_when=acknowledged) as proxy:
            through = Settings.from_env({**env, "REDIS_URL": proxy.url})
            with built_worker(through, block_ms=100) as worker, WorkerThread(worker) as running:
                wait_until(lambda: proxy.cuts, 15, what="the cut right after the acknowledgement")
                # The window, as the cut left it: every order stored and acknowledged.
                rows = stored_orders(database_url, aid)
                assert {o.order_id for o in rows} == set(bought.values())
                assert {o.status for o in rows} == {"confirmed"}
                assert pending(rds, stream) == 0
                # The worker reconnects and goes on (its next cycles run within ~1 s).
                # (If they never are, the assertion below says what each buyer was told.)
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: set(statuses().values()) == {"confirmed"}, 5,
                               what="every buyer confirmed after the cut")
                assert running.alive(), running.error
                running.stop()
            assert not proxy.errors, proxy.errors
    finally:
        watcher.close()
    assert statuses() == dict.fromkeys(bought, "confirmed")
    stats = activity_stats(client, aid)["orders"]
    assert stats == {"pending": 0, "confirmed": 6, "cancelled": 0}
    assert pending(rds, stream) == 0


# --- reconcile: each buyer's order, Redis against the database ------------------------------


def _snapshot(rds: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key of the test's prefix, serialized (DUMP: the value; a stream's groups,
    consumers and pending entries), and whether it expires; but the rate counters, which
    expire by themselves."""
    raw: redis.Redis | RedisCluster
    if isinstance(rds, RedisCluster):
        raw = RedisCluster(startup_nodes=rds.startup_nodes, decode_responses=False)
    else:
        raw = redis.Redis(connection_pool=rds.connection_pool.__class__(
            **{**rds.connection_pool.connection_kwargs, "decode_responses": False}))
    try:
        return {key: (raw.dump(key), raw.pttl(key) >= 0)
                for key in raw.scan_iter(match=f"{prefix}:*".encode(), count=1000)
                if b":rate:" not in key}
    finally:
        close_client(raw)


def _told(status: str, order_id: str | None = None) -> dict[str, str]:
    return {"status": status} if order_id is None else {"status": status, "order_id": order_id}


@BOTH_BACKENDS
def test_reconcile_reports_a_lost_mark_writes_nothing_and_repair_marks_it(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """The state item 5 left behind (stored, acknowledged, marked pending), made by hand on
    two buyers: reconcile names both, with each side's word, and writes nothing; an order
    still in the stream (never delivered, or delivered and not acknowledged) is no
    difference; ``--repair`` marks the two (no rebuild: it is safe with orders waiting)."""
    aid = make_activity(total=10)["id"]
    stream, buyers = stream_key(prefix, aid), f"{prefix}:{{{aid}}}:buyers"
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(4)}
    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
        worker.trim()
    assert rds.xlen(stream) == 0
    services = app.extensions["seckill"]
    assert reconcile(services.restorer, aid)["differences"] == {}

    for uid in ("user0", "user1"):  # stored and acknowledged, the mark lost
        rds.hset(buyers, uid, bought[uid])
    assert order_status(client, aid, "user0")["status"] == "pending"
    late = {f"late{i}": buy_ok(client, aid, f"late{i}") for i in range(2)}
    taken: Any = rds.xreadgroup(GROUP, "elsewhere", {stream: ">"}, count=1)
    assert [f["order_id"] for _, f in taken[0][1]] == [late["late0"]]  # delivered, pending

    before, rows = _snapshot(rds, prefix), stored_orders(database_url, aid)
    report = reconcile(services.restorer, aid)
    assert _snapshot(rds, prefix) == before, "reconcile without --repair wrote to Redis"
    assert stored_orders(database_url, aid) == rows
    assert report["action"] == "none"
    assert report["differences"]["marks"] == {"count": 2, "orders": [
        {"user": uid, "redis": _told("pending", bought[uid]),
         "database": _told("confirmed", bought[uid])} for uid in ("user0", "user1")]}
    # The two late orders make the counts differ (they are Redis's until stored), not the marks.
    assert set(report["differences"]) == {"marks", "remaining", "sold", "buyers"}

    repaired = reconcile(services.restorer, aid, repair=True)
    assert repaired["marked"] == 2
    assert repaired["action"].startswith("refused: orders are still waiting")  # the counts
    for uid, order_id in bought.items():
        assert order_status(client, aid, uid) == {"status": "confirmed", "order_id": order_id}
    for uid, order_id in late.items():
        assert order_status(client, aid, uid) == {"status": "pending", "order_id": order_id}
    with built_worker(settings, block_ms=100, claim_idle_ms=1) as worker:
        drain(worker)
        worker.trim()
    assert reconcile(services.restorer, aid)["differences"] == {}


@BOTH_BACKENDS
def test_reconcile_reports_orders_redis_tells_otherwise_and_repair_rebuilds(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """The other ways the two can disagree, each reported with both sides' word: confirmed in
    Redis, cancelled in the database; confirmed in the database, unknown to Redis; cancelled
    in the database, unknown to Redis; a pending order that is nowhere else. With nothing
    waiting in the stream, ``--repair`` rebuilds Redis from the database, and then they
    agree."""
    aid = make_activity(total=10)["id"]
    buyers, cancelled = f"{prefix}:{{{aid}}}:buyers", f"{prefix}:{{{aid}}}:cancelled"
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(4)}
    cancel = client.post(f"/admin/orders/{bought['user3']}/cancel", headers=ADMIN)
    assert cancel.status_code == 200
    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
        worker.book.mark_cancelled(bought["user0"])  # behind Redis's back
        worker.trim()
    rds.hdel(buyers, "user1")
    rds.hdel(cancelled, "user3")
    ghost = f"{aid}-{bought['user2'].split('-')[-2]}-000099"
    rds.hset(buyers, "ghost", ghost)  # pending, in no stream and no database

    before = _snapshot(rds, prefix)
    report = reconcile(app.extensions["seckill"].restorer, aid)
    assert _snapshot(rds, prefix) == before, "reconcile without --repair wrote to Redis"
    assert report["differences"]["marks"] == {"count": 4, "orders": [
        {"user": "ghost", "redis": _told("pending", ghost), "database": _told("none")},
        {"user": "user0", "redis": _told("confirmed", bought["user0"]),
         "database": _told("cancelled", bought["user0"])},
        {"user": "user1", "redis": _told("none"),
         "database": _told("confirmed", bought["user1"])},
        {"user": "user3", "redis": _told("none"),
         "database": _told("cancelled", bought["user3"])},
    ]}

    repaired = reconcile(app.extensions["seckill"].restorer, aid, repair=True)
    assert repaired["action"] == "rebuilt"
    assert reconcile(app.extensions["seckill"].restorer, aid)["differences"] == {}
    assert order_status(client, aid, "user0")["status"] == "cancelled"
    assert order_status(client, aid, "user1") == {"status": "confirmed",
                                                  "order_id": bought["user1"]}
    assert order_status(client, aid, "user3")["status"] == "cancelled"
    assert order_status(client, aid, "ghost") == {"status": "none"}
    stats = activity_stats(client, aid)
    assert (stats["remaining"], stats["sold"], stats["buyers"]) == (8, 2, 2)


@BOTH_BACKENDS
def test_reconcile_without_repair_leaves_a_lost_state_lost(
    app: Flask, client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=3)["id"]
    buy_ok(client, aid, "alice")
    rds.delete(f"{prefix}:{{{aid}}}:meta")
    before = _snapshot(rds, prefix)
    report = reconcile(app.extensions["seckill"].restorer, aid)
    assert report["action"] == "none" and "--repair" in report["differences"]["redis"]
    assert _snapshot(rds, prefix) == before
    assert reconcile(app.extensions["seckill"].restorer, aid, repair=True)["action"] == "rebuilt"
    assert rds.exists(f"{prefix}:{{{aid}}}:meta") == 1
