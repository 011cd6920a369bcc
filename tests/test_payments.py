"""The payment window through the gateway (in-process), on one server and on the cluster: the
200's pay_by, paying (idempotent per reference, already_paid, payment_expired,
no_payment_window, unknown order), expiry within 2 s of pay_by by the worker's expirer (units
back on sale, bought by someone else, the expired buyer refused hold_expired), packets and
sharded stock with a window, stats, cancel of a held order, and a rebuild with holds
outstanding."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.domain.clock import now_ms
from seckill.store.plumbing.keys import KeySpace
from seckill.worker.expiry import Expirer
from seckill.worker.stop import StopFlag
from tests.support.api import activity_stats, buy, expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import built_worker, drain, stored_orders
from tests.support.tokens import ADMIN

pytestmark = [BOTH_BACKENDS, pytest.mark.database]


def pay(client: FlaskClient, order_id: str, ref: str) -> Any:
    return client.post(f"/admin/orders/{order_id}/pay", json={"payment_ref": ref}, headers=ADMIN)


@pytest.fixture
def expirer(app: Flask) -> Iterator[Expirer]:
    """The orders worker's expiry loop, running in a thread on the app's Redis and database
    (the same class `seckill worker` runs; a short refresh so new activities are seen)."""
    services = app.extensions["seckill"]
    running = Expirer(services.client, services.keys, services.book, refresh_seconds=0.2)
    stop = StopFlag()
    thread = threading.Thread(target=running.run, args=(stop,), daemon=True)
    thread.start()
    yield running
    stop.event.set()
    thread.join(timeout=5)


def wait_for(check: Any, timeout: float) -> float:
    """Poll ``check()`` until true; the seconds it took (AssertionError past ``timeout``)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_held_order_is_paid_once_per_reference(
        client: FlaskClient, make_activity: Any) -> None:
    aid = make_activity(total=5, payment_window=60)["id"]
    assert client.get(f"/seckill/activities/{aid}").get_json()["payment_window"] == 60
    before = now_ms()
    bought = expect(buy(client, aid, "alice"), 200)
    assert before + 59_000 <= bought["pay_by"] <= now_ms() + 61_000
    status = order_status(client, aid, "alice")
    assert (status["payment"], status["pay_by"]) == ("due", bought["pay_by"])
    order_id = bought["order_id"]
    first = expect(pay(client, order_id, "pi_123"), 200)
    assert first == {"status": "paid", "order_id": order_id, "payment_ref": "pi_123"}
    assert expect(pay(client, order_id, "pi_123"), 200) == first  # the same answer again
    other = expect(pay(client, order_id, "pi_999"), 409, "already_paid")
    assert other["payment_ref"] == "pi_123"
    paid = order_status(client, aid, "alice")
    assert (paid["payment"], paid["pay_by"]) == ("paid", bought["pay_by"])
    stats = activity_stats(client, aid)
    assert stats["payments"] == {"due": 0, "paid": 1, "expired": 0}


def test_pay_refusals(client: FlaskClient, make_activity: Any) -> None:
    plain = make_activity(total=5)["id"]
    order_id = expect(buy(client, plain, "bob"), 200)["order_id"]
    assert "pay_by" not in order_status(client, plain, "bob")
    assert "payments" not in activity_stats(client, plain)
    expect(pay(client, order_id, "ref-1"), 409, "no_payment_window")
    expect(pay(client, f"{plain}-{now_ms():013d}-999999", "ref-1"), 404, "unknown_order")
    expect(pay(client, "nonsense", "ref-1"), 404, "unknown_order")
    held = make_activity(total=5, payment_window=60)["id"]
    order_id = expect(buy(client, held, "bob"), 200)["order_id"]
    for bad in ("", "a|b", "x" * 129, 5, None):
        expect(pay(client, order_id, bad), 400, "bad_request")  # type: ignore[arg-type]
    expect(client.post(f"/admin/orders/{order_id}/pay", json={}, headers=ADMIN), 400,
           "bad_request")
    expect(client.post(f"/admin/orders/{order_id}/pay", json={"payment_ref": "r"}), 401,
           "unauthenticated")
    expect(client.post(f"/admin/orders/{order_id}/cancel", headers=ADMIN), 200)
    expect(pay(client, order_id, "late"), 409, "already_cancelled")
    assert activity_stats(client, held)["payments"] == {"due": 0, "paid": 0, "expired": 0}
    for window in (-1, 86_401, "60", True):
        expect(client.post("/admin/activities", headers=ADMIN, json={
            "id": "w", "name": "w", "total": 1, "payment_window": window,
            "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}),
            400, "bad_request")


@pytest.mark.parametrize("kind", ["stock", "packets", "sharded"])
def test_an_unpaid_order_expires_within_two_seconds_and_its_units_sell_again(
        client: FlaskClient, make_activity: Any, expirer: Expirer, kind: str) -> None:
    fields: dict[str, Any] = {"payment_window": 1}
    if kind == "packets":
        fields.update(kind="packets", amount=100, count=1)
    else:
        fields.update(total=1, shards=4 if kind == "sharded" else 1)
    aid = make_activity(**fields)["id"]
    bought = expect(buy(client, aid, "walker"), 200)
    expect(buy(client, aid, "late"), 410, "sold_out")
    # Released within 2 s of pay_by: the unit is back on sale, the flag down.
    wait_for(lambda: order_status(client, aid, "walker")["status"] == "cancelled", 4.0)
    assert now_ms() - bought["pay_by"] < 2000
    status = order_status(client, aid, "walker")
    assert (status["order_id"], status["payment"], status["pay_by"]) == (
        bought["order_id"], "expired", bought["pay_by"])
    # Every process hears of the units back (pub/sub): the flag drops, the copy is re-read.
    wait_for(lambda: client.get(f"/seckill/activities/{aid}").get_json()["remaining"] == 1, 2.0)
    again = expect(buy(client, aid, "walker"), 409, "hold_expired")
    assert again["order_id"] == bought["order_id"]
    late = expect(pay(client, bought["order_id"], "too-late"), 409, "payment_expired")
    assert late["pay_by"] == bought["pay_by"]
    second = expect(buy(client, aid, "late"), 200)
    if kind == "packets":
        assert second["amount"] == 100  # the same packet, back in the list
    expect(pay(client, second["order_id"], "ok-1"), 200)
    stats = activity_stats(client, aid)
    assert stats["payments"] == {"due": 0, "paid": 1, "expired": 1}
    assert (stats["remaining"], stats["sold"]) == (0, 1)


def test_a_payment_after_pay_by_is_refused_even_before_the_expiry_runs(
        client: FlaskClient, make_activity: Any, app: Flask) -> None:
    """No expirer here: the order is past pay_by but still held; a payment is still too late,
    and the first expiry step then takes it (exactly one of the two wins)."""
    aid = make_activity(total=1, payment_window=1)["id"]
    order_id = expect(buy(client, aid, "slow"), 200)["order_id"]
    time.sleep(1.1)
    expect(pay(client, order_id, "ref"), 409, "payment_expired")
    services = app.extensions["seckill"]
    assert Expirer(services.client, services.keys, services.book).step() == 1
    assert order_status(client, aid, "slow")["payment"] == "expired"


def test_a_rebuild_restores_holds_payments_and_expired_buyers(
        app: Flask, client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
        settings: Any, database_url: str) -> None:
    """Due, paid and expired orders stored by the worker; Redis loses the activity; the
    rebuild from the database holds the due order again until its pay_by, keeps the paid one
    paid (the same reference still answers 200) and the expired buyer refused."""
    aid = make_activity(total=5, payment_window=3600)["id"]
    keys = KeySpace(prefix)
    gone = expect(buy(client, aid, "gone"), 200)
    paid = expect(buy(client, aid, "payer"), 200)
    due = expect(buy(client, aid, "due"), 200)
    expect(pay(client, paid["order_id"], "ref-p"), 200)
    # Time passes, the test's way: gone's pay_by moved into the past, then one expiry step.
    rds.zadd(keys.holds(aid), {gone["order_id"]: now_ms() - 1})
    services = app.extensions["seckill"]
    assert Expirer(services.client, services.keys, services.book).step() == 1
    with built_worker(settings) as worker:
        drain(worker)
    rows = {o.user_id: o for o in stored_orders(database_url, aid)}
    assert (rows["gone"].status, rows["gone"].payment) == ("cancelled", "expired")
    assert (rows["payer"].payment, rows["payer"].payment_ref) == ("paid", "ref-p")
    assert (rows["due"].payment, rows["due"].pay_by) == ("due", due["pay_by"])
    from seckill.store.audit.reconcile import reconcile

    assert reconcile(services.restorer, aid)["differences"] == {}  # Redis and database agree
    for key in (keys.meta(aid), keys.buyers(aid), keys.cancelled(aid), keys.orders(aid),
                *keys.payment_keys(aid)):
        rds.delete(key)
    status = order_status(client, aid, "due")  # Redis lost it: rebuilt from the database
    assert (status["status"], status["payment"], status["pay_by"]) == (
        "confirmed", "due", due["pay_by"])
    assert order_status(client, aid, "payer")["payment"] == "paid"
    assert order_status(client, aid, "payer")["pay_by"] == paid["pay_by"]
    assert order_status(client, aid, "gone")["payment"] == "expired"
    expect(pay(client, paid["order_id"], "ref-p"), 200)
    expect(buy(client, aid, "gone"), 409, "hold_expired")
    assert activity_stats(client, aid)["payments"] == {"due": 1, "paid": 1, "expired": 1}
    rds.zadd(keys.holds(aid), {due["order_id"]: now_ms() - 1})  # and the held one expires
    assert Expirer(services.client, services.keys, services.book).step() == 1
    assert activity_stats(client, aid)["remaining"] == 4


def test_the_expiry_rebuilds_an_activity_redis_lost_and_expires_its_holds(
        app: Flask, client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
        settings: Any) -> None:
    """Redis loses a windowed activity and no gateway touches it again: the expiry itself
    rebuilds it from the database (holds and deadlines included) and then expires them."""
    aid = make_activity(total=3, payment_window=1)["id"]
    bought = expect(buy(client, aid, "quiet"), 200)
    with built_worker(settings) as worker:
        drain(worker)
    keys = KeySpace(prefix)
    for key in (keys.meta(aid), keys.buyers(aid), keys.orders(aid), *keys.payment_keys(aid)):
        rds.delete(key)
    time.sleep(max(0.0, bought["pay_by"] / 1000 - time.time()) + 0.05)
    services = app.extensions["seckill"]
    expirer = Expirer(services.client, services.keys, services.book)
    assert expirer.step() == 0  # rebuilt now
    assert rds.zscore(keys.holds(aid), bought["order_id"]) == bought["pay_by"]
    assert expirer.step() == 1
    assert rds.hget(keys.meta(aid), "remaining") == "3"
    assert order_status(client, aid, "quiet")["payment"] == "expired"


def test_a_status_read_as_the_hold_expires_never_says_confirmed_and_expired(
        client: FlaskClient, app: Flask, make_activity: Any, expirer: Expirer) -> None:
    """The order status reads the buyer's order, then its payment, in two round trips: a
    status read just before the expiry, annotated just after it, said "confirmed" with
    payment "expired" (the sale page showed it). An expired hold's order is cancelled."""
    from seckill.domain.orders import OrderStatus

    aid = make_activity(total=1, payment_window=1)["id"]
    bought = expect(buy(client, aid, "racer"), 200)
    payments = app.extensions["seckill"].payments
    before = OrderStatus("confirmed", bought["order_id"])  # read before the expiry ran
    wait_for(lambda: order_status(client, aid, "racer")["status"] == "cancelled", 4.0)
    after = payments.annotate(aid, before)
    assert (after.status, after.payment) == ("cancelled", "expired"), after
