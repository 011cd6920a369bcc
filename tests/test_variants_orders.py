"""After a purchase of variants: the order status with its items, the operator's
cancel and an expired payment hold giving every unit back to its variant (and the variant on
sale again in a process that had flagged it), restock per variant, the queue's admission bound
over every variant, the orders in SQL with the variant of every unit, and the rebuild from the
database after Redis loses the activity. Single Valkey and the cluster; SQLite, or PostgreSQL
when ``SECKILL_TEST_POSTGRES`` names one.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from seckill.store.audit.reconcile import reconcile
from seckill.worker.expiry import Expirer
from seckill.worker.orders import OrdersWorker
from tests.support.admission import join, poll
from tests.support.api import buy, expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

pytestmark = [BOTH_BACKENDS, pytest.mark.database]


def _activity(client: Any, per_user_limit: int = 3, **fields: Any) -> str:
    aid = f"v{uuid.uuid4().hex[:10]}"
    body = {"id": aid, "name": "Sneaker", "per_user_limit": per_user_limit,
            "variants": [{"id": "a", "name": "A", "total": 3}, {"id": "b", "name": "B",
                                                                  "total": 2}],
            "starts_at": iso(-60), "ends_at": iso(3600), **fields}
    expect(client.post("/admin/activities", headers=ADMIN, json=body), 201)
    return aid


def _variants(client: Any, aid: str) -> dict[str, Any]:
    stats = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    for v in stats["variants"].values():
        assert v["sold"] + v["remaining"] == v["total"], stats
    assert stats["remaining"] == sum(v["remaining"] for v in stats["variants"].values())
    assert stats["total"] == sum(v["total"] for v in stats["variants"].values())
    return dict(stats["variants"])


TWO_OF_A_ONE_OF_B = {"items": [{"variant": "a", "quantity": 2}, {"variant": "b", "quantity": 1}]}


def test_order_status_and_the_database_know_the_items(app, client):
    aid = _activity(client)
    bought = expect(buy(client, aid, "ann", TWO_OF_A_ONE_OF_B), 200)
    status = order_status(client, aid, "ann")
    assert status == {"status": "pending", "order_id": bought["order_id"],
                      "items": TWO_OF_A_ONE_OF_B["items"]}
    services = app.extensions["seckill"]
    OrdersWorker(services.client, services.keys, services.book).step()
    assert order_status(client, aid, "ann")["status"] == "confirmed"
    stored = services.book.find_order(bought["order_id"])
    assert stored.quantity == 3 and stored.items == (("a", 2), ("b", 1))
    with services.engine.connect() as conn:
        raw = conn.execute(sa.text("SELECT items FROM seckill_orders WHERE order_id = :o"),
                           {"o": bought["order_id"]}).scalar()
    assert json.loads(raw) == TWO_OF_A_ONE_OF_B["items"]
    assert order_status(client, aid, "bob") == {"status": "none"}


def test_cancel_gives_every_unit_back_to_its_variant(make_app):
    one, two = make_app().test_client(), make_app().test_client()
    aid = _activity(one)
    bought = expect(buy(one, aid, "ann", TWO_OF_A_ONE_OF_B), 200)
    expect(buy(one, aid, "bob", {"variant": "b"}), 200)
    # Process two learns that b is gone (the script says so; its flag goes up).
    expect(buy(two, aid, "cat", {"variant": "b"}), 409, "variant_sold_out")
    assert _variants(one, aid) == {"a": {"total": 3, "remaining": 1, "sold": 2},
                                   "b": {"total": 2, "remaining": 0, "sold": 2}}
    expect(one.post(f"/admin/orders/{bought['order_id']}/cancel", headers=ADMIN), 200)
    assert _variants(one, aid) == {"a": {"total": 3, "remaining": 3, "sold": 0},
                                   "b": {"total": 2, "remaining": 1, "sold": 1}}
    status = order_status(one, aid, "ann")
    assert status["status"] == "cancelled" and status["items"] == TWO_OF_A_ONE_OF_B["items"]
    # Process two hears that units came back (pub/sub) and sells b again.
    deadline = time.monotonic() + 5
    while (got := buy(two, aid, "cat", {"variant": "b"})).status_code != 200:
        assert got.status_code == 409 and time.monotonic() < deadline, got.get_json()
        time.sleep(0.05)
    expect(one.post(f"/admin/orders/{bought['order_id']}/cancel", headers=ADMIN), 409,
           "already_cancelled")
    assert _variants(one, aid)["b"] == {"total": 2, "remaining": 0, "sold": 2}


def test_an_expired_hold_gives_every_unit_back_to_its_variant(app, client):
    aid = _activity(client, payment_window=1)
    bought = expect(buy(client, aid, "ann", TWO_OF_A_ONE_OF_B), 200)
    assert "pay_by" in bought
    services = app.extensions["seckill"]
    expirer = Expirer(services.client, services.keys, services.book)
    deadline = time.monotonic() + 5
    while expirer.step() < 1:
        assert time.monotonic() < deadline, "the hold never expired"
        time.sleep(0.05)
    assert _variants(client, aid) == {"a": {"total": 3, "remaining": 3, "sold": 0},
                                      "b": {"total": 2, "remaining": 2, "sold": 0}}
    status = order_status(client, aid, "ann")
    assert status["payment"] == "expired" and status["items"] == TWO_OF_A_ONE_OF_B["items"]
    expect(buy(client, aid, "ann", {"variant": "a"}), 409, "hold_expired")
    expect(buy(client, aid, "bob", {"items": [{"variant": "a", "quantity": 3}]}), 200)


def test_restock_per_variant(app, client, make_activity):
    aid = _activity(client)
    expect(buy(client, aid, "ann", TWO_OF_A_ONE_OF_B), 200)

    def restock(body: Any) -> Any:
        return client.post(f"/admin/activities/{aid}/stock", headers=ADMIN, json=body)

    view = expect(restock({"add": 4, "variant": "b"}), 200)
    assert view["total"] == 9 and view["remaining"] == 6
    assert [(v["id"], v["total"], v["remaining"]) for v in view["variants"]] == [
        ("a", 3, 1), ("b", 6, 5)]
    expect(restock({"add": -5, "variant": "b"}), 200)
    short = expect(restock({"add": -2, "variant": "a"}), 409, "insufficient_stock")
    assert short["remaining"] == 1  # the variant's unsold units
    assert expect(restock({"add": 1}), 400, "bad_request")["field"] == "variant"
    assert expect(restock({"add": 1, "variant": 7}), 400, "bad_request")["field"] == "variant"
    assert expect(restock({"add": 1, "variant": "zz"}), 404, "unknown_variant")["variant"] == "zz"
    assert expect(restock({"add": "1", "variant": "a"}), 400, "bad_request")["field"] == "add"
    expect(restock({"add": 1, "variant": "a", "x": 1}), 400, "bad_request")
    single = make_activity()["id"]
    answer = client.post(f"/admin/activities/{single}/stock", headers=ADMIN,
                         json={"add": 1, "variant": "a"})
    assert expect(answer, 400, "bad_request")["field"] == "variant"
    assert _variants(client, aid) == {"a": {"total": 3, "remaining": 1, "sold": 2},
                                      "b": {"total": 1, "remaining": 0, "sold": 1}}
    stored = app.extensions["seckill"].book.load_activity(aid)
    assert stored.total == 4 and [(v.id, v.total) for v in stored.variants] == [("a", 3), ("b", 1)]


def test_a_restock_puts_a_flagged_variant_back_on_sale(client):
    aid = _activity(client, per_user_limit=2)
    expect(buy(client, aid, "ann", {"variant": "b", "quantity": 2}), 200)
    expect(buy(client, aid, "bob", {"variant": "b"}), 409, "variant_sold_out")
    expect(client.post(f"/admin/activities/{aid}/stock", headers=ADMIN,
                       json={"add": 1, "variant": "b"}), 200)
    expect(buy(client, aid, "bob", {"variant": "b"}), 200)


def test_the_queue_admits_no_more_than_the_units_of_every_variant(client):
    aid = f"v{uuid.uuid4().hex[:10]}"
    starts_in = 1.5
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Seats", "admission": "queue", "queue_opens_at": iso(-1),
        "starts_at": iso(starts_in), "ends_at": iso(3600),
        "variants": [{"id": "front", "name": "Front", "total": 1},
                     {"id": "back", "name": "Back", "total": 2}]}), 201)
    users = [f"q{i}" for i in range(6)]
    for uid in users:
        expect(join(client, aid, uid), 200)
    deadline = time.monotonic() + starts_in + 5
    while True:  # the sale starts: every poll moves the queue
        statuses = {uid: poll(client, aid, uid) for uid in users}
        if any(s["status"] == "admitted" for s in statuses.values()):
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.05)
    statuses = {uid: poll(client, aid, uid) for uid in users}  # a whole round after the start
    admitted = [uid for uid, s in statuses.items() if s["status"] == "admitted"]
    assert len(admitted) == 3  # the units of both variants, no more
    first = admitted[0]
    expect(client.post(statuses[first]["url"], headers=user_headers(first),
                       json={"items": [{"variant": "front", "quantity": 1}]}), 200)
    statuses = {uid: poll(client, aid, uid) for uid in users}
    waiting_admitted = [u for u, s in statuses.items() if s["status"] == "admitted"]
    assert len(waiting_admitted) <= 2


def test_a_rebuild_restores_every_variant(app, client, rds, prefix):
    aid = _activity(client, per_user_limit=3)
    kept = expect(buy(client, aid, "ann", TWO_OF_A_ONE_OF_B), 200)
    gone = expect(buy(client, aid, "bob", {"variant": "b"}), 200)
    expect(client.post(f"/admin/activities/{aid}/stock", headers=ADMIN,
                       json={"add": 2, "variant": "a"}), 200)
    services = app.extensions["seckill"]
    OrdersWorker(services.client, services.keys, services.book).step()
    expect(client.post(f"/admin/orders/{gone['order_id']}/cancel", headers=ADMIN), 200)
    OrdersWorker(services.client, services.keys, services.book).step()
    before = _variants(client, aid)
    for key in rds.scan_iter(match=f"{prefix}:{{{aid}}}:*"):
        rds.delete(key)  # Redis loses the activity
    after = _variants(client, aid)  # the stats rebuild it from the database
    assert after == before == {"a": {"total": 5, "remaining": 3, "sold": 2},
                               "b": {"total": 2, "remaining": 1, "sold": 1}}
    status = order_status(client, aid, "ann")
    assert status["order_id"] == kept["order_id"] and status["items"] == TWO_OF_A_ONE_OF_B["items"]
    # Cancelled after the rebuild, the order's units still go back to their variants.
    expect(client.post(f"/admin/orders/{kept['order_id']}/cancel", headers=ADMIN), 200)
    assert _variants(client, aid) == {"a": {"total": 5, "remaining": 5, "sold": 0},
                                      "b": {"total": 2, "remaining": 2, "sold": 0}}


def test_reconcile_compares_and_repairs_every_variant(app, client, rds):
    aid = _activity(client)
    expect(buy(client, aid, "ann", TWO_OF_A_ONE_OF_B), 200)
    services = app.extensions["seckill"]
    worker = OrdersWorker(services.client, services.keys, services.book)
    worker.step()
    worker._housekept_at = 0  # trim the stream now: --repair refuses while orders wait there
    worker.step()
    assert reconcile(services.restorer, aid)["differences"] == {}
    meta = services.keys.meta(aid)
    rds.hincrby(meta, "v:a:total", 1)  # a variant that agrees with itself, not with the database
    rds.hincrby(meta, "v:a:remaining", 1)
    rds.hincrby(meta, "v:b:sold", 1)  # one whose counters disagree: its purchases are refused
    report = reconcile(services.restorer, aid)
    assert report["inconsistent"] is True
    assert report["differences"] == {
        "variant a": {"redis": {"total": 4, "remaining": 2, "sold": 2},
                      "database": {"total": 3, "remaining": 1, "sold": 2}},
        "variant b": {"redis": {"total": 2, "remaining": 1, "sold": 2},
                      "database": {"total": 2, "remaining": 1, "sold": 1}}}
    refused = expect(buy(client, aid, "bob", {"variant": "b"}), 503, "unavailable")
    assert refused["detail"] == "inconsistent"
    assert reconcile(services.restorer, aid, repair=True)["action"] == "rebuilt"
    assert reconcile(services.restorer, aid)["differences"] == {}
    expect(buy(client, aid, "bob", {"variant": "b"}), 200)
