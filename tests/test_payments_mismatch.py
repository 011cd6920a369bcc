"""Payments in for the wrong amount or currency: ``POST /payments/webhook`` through the real
gateway app, the real Valkey (single server and cluster) and the database. A payment whose
amount (or currency) differs from the order's price times quantity (a packet's amount) leaves the
order due, answers the provider 200 ``payment_mismatch`` and writes one
``order.payment_mismatch`` per payment reference; an activity without a price takes any
amount, as before."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from tests.support.api import buy, create_activity, expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import built_worker, drain
from tests.support.outbox import events
from tests.support.payments import SECRET, signed
from tests.support.timing import iso
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database

ROUTE = "/payments/webhook"
PRICE = {"amount": 1250, "currency": "EUR"}


def paying(order_id: str, ref: str, amount: int | None = None,
           currency: str | None = None) -> bytes:
    """A ``payment.succeeded`` body, with the amount and currency when given."""
    data: dict[str, Any] = {"order_id": order_id, "payment_ref": ref}
    if amount is not None:
        data["amount"] = amount
    if currency is not None:
        data["currency"] = currency
    return orjson.dumps({"type": "payment.succeeded", "data": data})


def deliver(client: FlaskClient, body: bytes) -> Any:
    """POST ``body`` to the webhook, signed with the gateway's secret."""
    return client.post(ROUTE, data=body, headers=signed(body))


def mismatches(web: FlaskClient, order_id: str) -> list[dict[str, Any]]:
    """The data of an order's ``order.payment_mismatch`` events in the outbox, oldest first."""
    return [data for kind, subject, data in events(web.application.extensions["seckill"].book)
            if kind == "order.payment_mismatch" and subject == f"order:{order_id}"]


@pytest.fixture
def web(make_app: Callable[..., Flask]) -> FlaskClient:
    """The gateway, with a payments webhook secret, and its client."""
    return make_app(SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET).test_client()


@pytest.fixture
def store(env: dict[str, str]) -> Iterator[Callable[[], int]]:
    """Steps of the real orders worker: what the stream holds reaches the database."""
    with built_worker(Settings.from_env(env)) as worker:
        yield lambda: drain(worker)


@BOTH_BACKENDS
def test_a_wrong_amount_or_currency_leaves_the_order_due_and_tells_the_shop_once(
        web: FlaskClient, store: Callable[[], int]) -> None:
    aid = create_activity(web, total=5, per_user_limit=3, payment_window=60,
                          price=PRICE)["id"]
    oid = expect(buy(web, aid, "payer", {"quantity": 2}), 200)["order_id"]
    store()
    wrong = {"pi_zero": (0, None), "pi_one_unit": (1250, "EUR"), "pi_usd": (2500, "USD")}
    for _ in range(3):  # each delivered three times: never paid, one event each
        for ref, (amount, currency) in wrong.items():
            answer = expect(deliver(web, paying(oid, ref, amount, currency)), 200)
            assert answer == {"status": "payment_mismatch", "order_id": oid,
                              "payment_ref": ref, "amount": 2500, "currency": "EUR"}
            assert order_status(web, aid, "payer")["payment"] == "due"
    told = mismatches(web, oid)
    assert [e["payment_ref"] for e in told] == list(wrong)
    zero, _, usd = told
    assert (zero["payment_amount"], zero["expected_amount"], zero["expected_currency"]) == (
        0, 2500, "EUR")
    assert "payment_currency" not in zero
    assert (usd["payment_amount"], usd["payment_currency"]) == (2500, "USD")
    assert (zero["order_id"], zero["activity"], zero["quantity"]) == (oid, aid, 2)
    # The right payment still pays it (the currency's case is the provider's).
    paid = expect(deliver(web, paying(oid, "pi_right", 2500, "eur")), 200)
    assert paid["status"] == "paid"
    assert order_status(web, aid, "payer")["payment"] == "paid"
    assert len(mismatches(web, oid)) == 3


def test_variants_are_priced_per_unit_of_every_item(
        web: FlaskClient, store: Callable[[], int]) -> None:
    aid = f"v{uuid.uuid4().hex[:10]}"
    expect(web.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Shirt", "per_user_limit": 3, "payment_window": 60, "price": PRICE,
        "starts_at": iso(-60), "ends_at": iso(3600),
        "variants": [{"id": "red", "name": "Red", "total": 5},
                     {"id": "blue", "name": "Blue", "total": 5}]}), 201)
    items = {"items": [{"variant": "red", "quantity": 1}, {"variant": "blue", "quantity": 2}]}
    oid = expect(buy(web, aid, "payer", items), 200)["order_id"]
    store()
    answer = expect(deliver(web, paying(oid, "pi_short", 2500)), 200)
    assert (answer["status"], answer["amount"]) == ("payment_mismatch", 3750)
    assert expect(deliver(web, paying(oid, "pi_full", 3750, "EUR")), 200)["status"] == "paid"


def test_a_packet_is_paid_its_own_amount(
        web: FlaskClient, store: Callable[[], int]) -> None:
    aid = create_activity(web, kind="packets", amount=1000, count=3, payment_window=60)["id"]
    grabbed = expect(buy(web, aid, "payer"), 200)
    oid, amount = grabbed["order_id"], grabbed["amount"]
    store()
    answer = expect(deliver(web, paying(oid, "pi_other", amount + 1)), 200)
    assert (answer["status"], answer["amount"]) == ("payment_mismatch", amount)
    assert "currency" not in answer  # no price: the currency is not known, so not checked
    [event] = mismatches(web, oid)
    assert event["expected_amount"] == amount
    assert expect(deliver(web, paying(oid, "pi_it", amount, "XXX")), 200)["status"] == "paid"


def test_without_a_price_any_amount_pays_as_before(
        web: FlaskClient) -> None:
    """The gateway cannot check what it was never told: the shop's own price is checked by
    the shop (documented in docs/API.md)."""
    aid = create_activity(web, total=5, payment_window=60)["id"]
    oid = expect(buy(web, aid, "payer"), 200)["order_id"]
    assert expect(deliver(web, paying(oid, "pi_0", 0, "USD")), 200)["status"] == "paid"
    assert mismatches(web, oid) == []


def test_a_mismatch_for_an_order_not_stored_yet_is_503_until_it_is(
        web: FlaskClient, store: Callable[[], int]) -> None:
    """Never a 200 before the shop's event is written: the provider retries."""
    aid = create_activity(web, total=5, payment_window=60, price=PRICE)["id"]
    oid = expect(buy(web, aid, "payer"), 200)["order_id"]
    refused = deliver(web, paying(oid, "pi_0", 0))
    expect(refused, 503, "unavailable")
    assert refused.headers["Retry-After"]
    assert order_status(web, aid, "payer")["payment"] == "due"
    store()
    assert expect(deliver(web, paying(oid, "pi_0", 0)), 200)["status"] == "payment_mismatch"
    assert len(mismatches(web, oid)) == 1


def test_a_malformed_currency_is_400(web: FlaskClient) -> None:
    aid = create_activity(web, total=5, payment_window=60, price=PRICE)["id"]
    oid = expect(buy(web, aid, "payer"), 200)["order_id"]
    for bad in (5, "", "EURO", "E1R", "eu\u0000"):
        raw = orjson.dumps({"type": "payment.succeeded",
                            "data": {"order_id": oid, "payment_ref": "r", "amount": 1250,
                                     "currency": bad}})
        expect(deliver(web, raw), 400, "bad_request")
    assert order_status(web, aid, "payer")["payment"] == "due"
