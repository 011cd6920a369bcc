"""Redis loses its data during a sale: the activity is rebuilt lazily from the
database, under a lock, by one gateway; no oversell, no user with two live orders.

Each test has a Valkey of its own (it is FLUSHALLed), the test's own SQLite file or PostgreSQL
schema, several gateways (Flask apps, each with its own Restorer) and the real orders worker.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from flask import Flask

from seckill.config import Settings
from seckill.domain import errors
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.recovery import Restorer
from tests.support.api import buy
from tests.support.orders import built_worker, dedicated_valkey, drain, stored_orders
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    with dedicated_valkey(tmp_path / "valkey") as started:
        yield started


@pytest.fixture
def gateways(
    make_app: Callable[..., Flask], server: EmbeddedValkey
) -> list[Flask]:
    """Three gateways on the test's own Valkey, one database."""
    return [make_app(REDIS_URL=server.url) for _ in range(3)]


def _create(app: Flask, total: int) -> str:
    aid = f"r{time.time_ns() % 10**12}"
    response = app.test_client().post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Rebuild", "total": total,
        "starts_at": iso(-60), "ends_at": iso(3600),
    })
    assert response.status_code == 201, response.get_json()
    return aid


def _key(prefix: str, aid: str, name: str) -> str:
    return f"{prefix}:{{{aid}}}:{name}"


def _buy_retrying(app: Flask, aid: str, uid: str, budget: float = 10.0) -> tuple[int, Any]:
    """A client that retries a 503 (the activity being restored) within a budget."""
    client = app.test_client()
    deadline = time.monotonic() + budget
    while True:
        response = buy(client, aid, uid)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response.status_code, response.get_json()
        time.sleep(0.02)


def test_flushall_during_a_sale_rebuilds_from_the_database(
    gateways: list[Flask], server: EmbeddedValkey, env: dict[str, str], database_url: str,
    prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Before the flush: 8 orders stored by the worker (one of them then cancelled) and 3
    decided but not yet stored. After ``FLUSHALL``, 44 clients on three gateways hit the sale
    at once; the first request rebuilds the activity from the database (remaining = 20 - 7).

    What is lost, by design: the 3 orders Redis held and the database did not yet. They were
    answered 200, then an operator wiped Redis; nothing can bring them back (with AOF and
    ``appendfsync always`` a *crash* loses nothing, see test_durability). Their users may buy
    again. What must hold: every stored order survives (its buyer gets 409 with that order),
    stored orders + new sales <= total, nobody holds two live orders, exactly one gateway
    rebuilt, and the database ends with exactly ``total`` live orders, one per user."""
    total = 20
    rds = redis.Redis.from_url(server.url, decode_responses=True)
    settings = Settings.from_env({**env, "REDIS_URL": server.url})
    first = gateways[0].test_client()
    aid = _create(gateways[0], total)
    stored = {f"stored{i}": buy(first, aid, f"stored{i}").get_json()["order_id"]
              for i in range(8)}
    cancel = first.post(f"/admin/orders/{stored['stored7']}/cancel", headers=ADMIN)
    assert cancel.status_code == 200
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 9
    live_before = {u: o for u, o in stored.items() if u != "stored7"}
    unstored = {f"unstored{i}": buy(first, aid, f"unstored{i}").get_json()["order_id"]
                for i in range(3)}
    assert rds.hget(_key(prefix, aid, "meta"), "remaining") == str(total - 7 - 3)

    rds.flushall()
    keys = KeySpace(prefix)
    assert Scripts(rds).purchase(keys=keys.activity_keys(aid), args=["probe", 1, aid, 0]) == [
        "uninitialized"
    ], "a lost activity must say so, not 'sold out' nor 'unlimited'"
    assert rds.dbsize() == 0

    caplog.set_level(logging.INFO, logger="seckill.store.sale.activity.recovery")
    crowd = [*stored, *unstored, *(f"new{i:02d}" for i in range(33))]
    gate = threading.Event()

    def attempt(index: int, uid: str) -> tuple[str, int, Any]:
        gate.wait(10)
        code, body = _buy_retrying(gateways[index % len(gateways)], aid, uid)
        return uid, code, body

    with ThreadPoolExecutor(len(crowd)) as pool:
        futures = [pool.submit(attempt, i, uid) for i, uid in enumerate(crowd)]
        gate.set()
        answers = [f.result(timeout=60) for f in futures]

    by_user = {uid: (code, body) for uid, code, body in answers}
    for uid, order_id in live_before.items():
        code, body = by_user[uid]
        # 409 with the stored order from the script, or 410 from the URL step once sold out.
        assert (code, body.get("error"), body.get("order_id")) in {
            (409, "already_purchased", order_id), (410, "sold_out", None)
        }, (uid, body)
    winners = {uid: body["order_id"] for uid, (code, body) in by_user.items() if code == 200}
    others = collections.Counter((code, body.get("error")) for code, body in by_user.values()
                                 if code != 200 and body.get("error") != "already_purchased")
    assert set(others) <= {(410, "sold_out"), (409, "insufficient_stock")}, others
    assert len(winners) == total - len(live_before), "the stock left must be sold, no more"
    assert not set(winners) & set(live_before)
    assert not set(winners.values()) & set(unstored.values())

    meta = _key(prefix, aid, "meta")
    remaining, sold = (int(v) for v in cast(list[str], rds.hmget(meta, "remaining", "sold")))
    assert (remaining, sold) == (0, total)
    assert rds.hlen(_key(prefix, aid, "buyers")) == total

    rebuilds = [r.getMessage() for r in caplog.records
                if r.name == "seckill.store.sale.activity.recovery"]
    assert len([m for m in rebuilds if "rebuilt from the database" in m]) == 1, rebuilds
    assert not [m for m in rebuilds if "already present" in m], rebuilds

    # The worker recreates the flushed stream's group by itself and stores the new sales.
    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
    rows = stored_orders(database_url, aid)
    live = [o for o in rows if o.status == "confirmed"]
    assert len(live) == total
    assert len({o.user_id for o in live}) == total, "nobody holds two live orders"
    assert {o.user_id: o.order_id for o in live} == {**live_before, **winners}
    assert not {o.order_id for o in rows} & set(unstored.values()), "lost with the flush"
    assert rds.xlen(_key(prefix, aid, "dead")) == 0

    def status(uid: str) -> Any:
        return gateways[1].test_client().get(
            f"/seckill/{aid}/order", headers=user_headers(uid)
        ).get_json()

    for uid, order_id in live_before.items():
        assert status(uid) == {"status": "confirmed", "order_id": order_id}
    if "stored7" not in winners:
        assert status("stored7") == {"status": "cancelled", "order_id": stored["stored7"]}
    rds.close()


def test_order_status_after_a_flush_is_rebuilt_not_none(
    gateways: list[Flask], server: EmbeddedValkey, env: dict[str, str],
) -> None:
    client = gateways[0].test_client()
    aid = _create(gateways[0], 5)
    order_id = buy(client, aid, "alice").get_json()["order_id"]
    settings = Settings.from_env({**env, "REDIS_URL": server.url})
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 1
    redis.Redis.from_url(server.url).flushall()
    answer = gateways[2].test_client().get(f"/seckill/{aid}/order", headers=user_headers("alice"))
    assert answer.get_json() == {"status": "confirmed", "order_id": order_id}
    stats = client.get(f"/admin/activities/{aid}/stats", headers=ADMIN).get_json()
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (5, 4, 1, 1)


def test_only_the_lock_holder_rebuilds_and_only_it_can_release(
    gateways: list[Flask], server: EmbeddedValkey, prefix: str,
) -> None:
    """The rebuild lock is ``SET NX PX``; a gateway that finds it taken waits for the meta hash,
    then answers 503 (Uninitialized) rather than rebuilding too; the compare-and-delete unlock
    never releases someone else's lock."""
    aid = _create(gateways[0], 5)
    services = gateways[1].extensions["seckill"]
    rds = redis.Redis.from_url(server.url, decode_responses=True)
    rds.flushall()
    lock = KeySpace(prefix).rebuild_lock(aid)
    assert rds.set(lock, "another-gateway", nx=True, px=10_000)

    waiting = Restorer(services.client, services.keys, services.scripts, services.book,
                       wait_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(errors.Uninitialized):
        waiting.ensure(aid)
    assert time.monotonic() - started >= 0.3
    assert rds.exists(_key(prefix, aid, "meta")) == 0, "a waiter must not rebuild"

    assert services.scripts.unlock(keys=[lock], args=["not-my-token"]) == 0
    assert rds.get(lock) == "another-gateway"
    assert services.scripts.unlock(keys=[lock], args=["another-gateway"]) == 1

    assert waiting.ensure(aid) is True
    assert rds.hget(_key(prefix, aid, "meta"), "remaining") == "5"
    assert rds.exists(lock) == 0, "the rebuilder releases its lock"
    rds.close()
