"""Unlimited stock (``"total": null``) beyond the contract test: a cancellation keeps it
unlimited, a rebuild from the database restores it as unlimited (never sold out, never
uninitialized), and a restock is refused."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask import Flask

from seckill.config import Settings
from tests.support.api import buy, expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.orders import built_worker, drain, stored_orders
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database


def _key(prefix: str, aid: str, name: str) -> str:
    return f"{prefix}:{{{aid}}}:{name}"


def test_unlimited_through_cancel_and_rebuild(
    app: Flask, make_activity: Any, settings: Settings, rds: redis.Redis, prefix: str,
    database_url: str,
) -> None:
    client = app.test_client()
    aid = make_activity(total=None)["id"]
    orders = {f"u{i}": expect(buy(client, aid, f"u{i}"), 200)["order_id"] for i in range(4)}
    meta = _key(prefix, aid, "meta")

    expect(client.post(f"/admin/orders/{orders['u0']}/cancel", headers=ADMIN), 200)
    assert rds.hmget(meta, "total", "remaining", "sold") == ["-1", "-1", "3"]
    stats = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (
        None, None, 3, 3)
    again = expect(buy(client, aid, "u0"), 200)["order_id"]
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 5}, headers=ADMIN),
           400, "bad_request")

    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 6  # four orders, the cancel, the new order

    names = ("meta", "buyers", "cancelled", "orders")
    assert rds.delete(*(_key(prefix, aid, n) for n in names)) == len(names)
    app.extensions["seckill"].cache.forget()
    view = expect(client.get(f"/seckill/activities/{aid}"), 200)  # rebuilt here
    assert (view["total"], view["remaining"], view["state"]) == (None, None, "open")
    assert rds.hmget(meta, "total", "remaining", "sold") == ["-1", "-1", "4"]
    repeat = expect(buy(client, aid, "u1"), 409, "already_purchased")
    assert repeat["order_id"] == orders["u1"]
    status = expect(client.get(f"/seckill/{aid}/order", headers=user_headers("u0")), 200)
    assert status == {"status": "confirmed", "order_id": again}
    for i in range(20):  # no limit after the rebuild either
        expect(buy(client, aid, f"late{i}"), 200)
    assert rds.hget(meta, "remaining") == "-1"
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 20
    live = [o for o in stored_orders(database_url, aid) if o.status == "confirmed"]
    assert len(live) == 24 and len({o.user_id for o in live}) == 24
