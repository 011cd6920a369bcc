"""Cancellation: ``POST /admin/orders/<id>/cancel`` gives the stock back and frees the
buyer's slot in one atomic script, and the database follows; twice is 409, never two refunds;
racing cancels and purchases never hold more than ``total`` units.

Real Valkey (the session's, a key prefix per test), the test's own
SQLite file or PostgreSQL schema, the real orders worker driven in-process.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.store.plumbing.connection import close_client
from tests.support.api import activity_stats, buy, keep_buying, order_status
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.orders import built_worker, drain, pending, stored_orders
from tests.support.tokens import ADMIN
from tests.support.valkey import connect

pytestmark = pytest.mark.database


def _key(prefix: str, aid: str, name: str) -> str:
    return f"{prefix}:{{{aid}}}:{name}"


def _buy_ok(client: FlaskClient, aid: str, uid: str) -> str:
    response = buy(client, aid, uid)
    assert response.status_code == 200, response.get_json()
    return cast(str, response.get_json()["order_id"])


def _cancel(client: FlaskClient, order_id: str) -> tuple[int, dict[str, Any]]:
    response = client.post(f"/admin/orders/{order_id}/cancel", headers=ADMIN)
    return response.status_code, cast(dict[str, Any], response.get_json())


def _db(database_url: str, aid: str) -> list[tuple[str, str, str]]:
    return sorted((o.user_id, o.order_id, o.status) for o in stored_orders(database_url, aid))


def test_cancel_gives_the_stock_back_once_and_the_user_may_buy_again(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=2)["id"]
    first = _buy_ok(client, aid, "alice")
    bob = _buy_ok(client, aid, "bob")
    assert buy(client, aid, "carol").status_code == 410  # sold out

    assert _cancel(client, first) == (200, {"status": "cancelled", "order_id": first})
    stats = activity_stats(client, aid)
    assert (stats["remaining"], stats["sold"], stats["buyers"]) == (1, 1, 1)
    assert order_status(client, aid, "alice") == {"status": "cancelled", "order_id": first}

    code, body = _cancel(client, first)
    assert (code, body["error"]) == (409, "already_cancelled")
    stats = activity_stats(client, aid)
    assert (stats["remaining"], stats["sold"]) == (1, 1), "a second cancel returned stock"

    second = _buy_ok(client, aid, "alice")  # the freed slot, the returned unit
    assert second != first
    assert order_status(client, aid, "alice") == {"status": "pending", "order_id": second}
    code, body = _cancel(client, first)  # the old order, while the new one is live
    assert (code, body["error"]) == (409, "already_cancelled")
    stats = activity_stats(client, aid)
    assert (stats["remaining"], stats["sold"], stats["buyers"]) == (0, 2, 2)

    # purchase, purchase, cancel, purchase again: all on the stream before the worker runs,
    # so they reach the database in one batch, in that order.
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 4
    assert _db(database_url, aid) == sorted([
        ("alice", first, "cancelled"), ("alice", second, "confirmed"), ("bob", bob, "confirmed"),
    ])
    assert rds.xlen(_key(prefix, aid, "dead")) == 0
    assert order_status(client, aid, "alice") == {"status": "confirmed", "order_id": second}
    assert activity_stats(client, aid)["orders"] == {"pending": 0, "confirmed": 2, "cancelled": 1}


def test_unknown_orders_answer_404(client: FlaskClient, make_activity: Any) -> None:
    aid = make_activity(total=2)["id"]
    _buy_ok(client, aid, "alice")
    for order_id in (f"{aid}-0000000000001-000999", "nonsense", "nobody-0000000000001-000001"):
        code, body = _cancel(client, order_id)
        assert (code, body["error"]) == (404, "unknown_order"), order_id
    assert activity_stats(client, aid)["remaining"] == 1


def test_cancel_of_a_pending_order_then_the_worker_then_a_repurchase(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
) -> None:
    aid = make_activity(total=1)["id"]
    first = _buy_ok(client, aid, "alice")
    assert _db(database_url, aid) == []
    assert _cancel(client, first)[0] == 200  # still pending: no row to update yet
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 2  # the order, then its cancel event
        assert _db(database_url, aid) == [("alice", first, "cancelled")]
        assert order_status(client, aid, "alice") == {"status": "cancelled", "order_id": first}

        second = _buy_ok(client, aid, "alice")
        assert drain(worker) == 1
    assert _db(database_url, aid) == sorted([
        ("alice", first, "cancelled"), ("alice", second, "confirmed"),
    ])
    assert order_status(client, aid, "alice") == {"status": "confirmed", "order_id": second}


def test_cancel_of_a_stored_order_updates_the_database_at_once(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=1)["id"]
    first = _buy_ok(client, aid, "alice")
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 1
        assert _cancel(client, first)[0] == 200
        assert _db(database_url, aid) == [("alice", first, "cancelled")]
        assert drain(worker) == 1  # the cancel event changes nothing more
        code, body = _cancel(client, first)
        assert (code, body["error"]) == (409, "already_cancelled")
    assert _db(database_url, aid) == [("alice", first, "cancelled")]
    assert activity_stats(client, aid)["remaining"] == 1
    assert pending(rds, _key(prefix, aid, "orders")) == 0


def test_cancel_never_pushes_remaining_above_total(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
) -> None:
    """If Redis already shows all the stock back (state damaged by hand, say), cancelling an
    order must refuse rather than give a unit back a second time."""
    aid = make_activity(total=3)["id"]
    order_id = _buy_ok(client, aid, "alice")
    meta = _key(prefix, aid, "meta")
    rds.hset(meta, "remaining", 3)
    code, _ = _cancel(client, order_id)
    assert code != 200
    assert rds.hget(meta, "remaining") == "3"
    assert rds.hget(_key(prefix, aid, "buyers"), "alice") == order_id


def test_cancels_racing_purchases_of_the_last_units_never_hold_more_than_total(
    app: Flask, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    """20 units sold to 20 users; then 10 of those orders are cancelled (each twice, from two
    threads) while 40 newcomers keep trying to buy. A sampler reads the activity atomically
    (MULTI: HMGET meta + HLEN buyers) throughout: never more than ``total`` units held, never
    ``remaining`` above ``total``, and units held == buyers at every instant."""
    total, cancelled_n, newcomers_n = 20, 10, 40
    aid = make_activity(total=total)["id"]
    client = app.test_client()
    holders = {f"holder{i:02d}": _buy_ok(client, aid, f"holder{i:02d}") for i in range(total)}
    meta, buyers = _key(prefix, aid, "meta"), _key(prefix, aid, "buyers")

    samples: list[tuple[int, int, int]] = []
    done = threading.Event()

    def sample() -> None:
        sampler = connect(settings.redis_url)
        try:
            deadline = time.monotonic() + 30
            while not done.is_set() and time.monotonic() < deadline:
                pipe = sampler.pipeline(transaction=True)
                pipe.hmget(meta, "remaining", "sold")
                pipe.hlen(buyers)
                (remaining, sold), held_by = pipe.execute()
                samples.append((int(remaining), int(sold), int(held_by)))
        finally:
            close_client(sampler)

    to_cancel = list(holders.values())[:cancelled_n] * 2
    gate = threading.Event()

    def cancel(order_id: str) -> tuple[str, int, str | None]:
        gate.wait(10)
        response = app.test_client().post(f"/admin/orders/{order_id}/cancel", headers=ADMIN)
        return order_id, response.status_code, response.get_json().get("error")

    cancels_done = threading.Event()

    def newcomer(uid: str) -> tuple[str, int, str | None]:
        response = keep_buying(app, aid, uid, gate, cancels_done)
        return uid, response.status_code, response.get_json().get("order_id")

    sampler_thread = threading.Thread(target=sample, daemon=True)
    sampler_thread.start()
    with ThreadPoolExecutor(len(to_cancel) + newcomers_n) as pool:
        cancels = [pool.submit(cancel, oid) for oid in to_cancel]
        buys = [pool.submit(newcomer, f"newcomer{i:02d}") for i in range(newcomers_n)]
        gate.set()
        cancel_results = [f.result(timeout=30) for f in cancels]
        cancels_done.set()
        buy_results = [f.result(timeout=30) for f in buys]
    done.set()
    sampler_thread.join(10)

    outcomes = collections.Counter((code, error) for _, code, error in cancel_results)
    assert outcomes == {(200, None): cancelled_n, (409, "already_cancelled"): cancelled_n}
    winners = {uid: oid for uid, code, oid in buy_results if code == 200}
    assert 0 < len(winners) <= cancelled_n, "newcomers must have bought returned units"

    assert len(samples) > 10, "the sampler must have watched the race"
    for remaining, sold, held_by in samples:
        assert 0 <= remaining <= total, (remaining, sold, held_by)
        assert remaining + sold == total, (remaining, sold, held_by)
        assert held_by == sold <= total, (remaining, sold, held_by)

    remaining, sold = (int(v) for v in cast(list[str], rds.hmget(meta, "remaining", "sold")))
    assert remaining + sold == total
    assert rds.hlen(buyers) == sold == total - cancelled_n + len(winners)

    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
    rows = stored_orders(database_url, aid)
    live = {o.user_id: o.order_id for o in rows if o.status == "confirmed"}
    expected_live = {**{u: o for u, o in list(holders.items())[cancelled_n:]}, **winners}
    assert live == expected_live
    assert sorted(o.order_id for o in rows if o.status == "cancelled") == sorted(
        set(to_cancel)
    )
    assert rds.xlen(_key(prefix, aid, "dead")) == 0
