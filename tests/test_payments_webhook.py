"""Payments in: ``POST /payments/webhook`` through the real gateway app (in-process), the real
Valkey, and the database (SQLite; PostgreSQL in CI's second pass): Standard Webhooks
signatures checked with the ``standardwebhooks`` library before anything else (401), the body's
checks (400), a payment that pays the order (200, also for a repeat), an unknown order (404),
the payments the order cannot take (after the hold expired, a second reference on a paid
order, an order cancelled while due): 200 and one ``order.refund_due`` per reference, the
amount stored with the payment, and no route at all without a secret."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import ConfigError, Settings
from seckill.domain.clock import now_ms
from seckill.domain.entries import Paid, Poison, parse_entry
from seckill.worker.expiry import Expirer
from tests.support.api import buy, create_activity, expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import built_worker, drain, stored_orders
from tests.support.payments import SECRET, payment, signed
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database

OTHER_SECRET = "whsec_" + base64.b64encode(b"not-the-gateway-secret-at-all-32").decode()
ROUTE = "/payments/webhook"


def deliver(client: FlaskClient, body: bytes, headers: dict[str, str] | None = None) -> Any:
    """POST ``body`` to the webhook, signed with the gateway's secret unless ``headers``."""
    return client.post(ROUTE, data=body, headers=signed(body) if headers is None else headers)


def refunds(engine: sa.Engine, order_id: str) -> list[dict[str, Any]]:
    """The ``order.refund_due`` events of an order in the outbox, oldest first: their bodies."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT body FROM seckill_outbox WHERE type = 'order.refund_due' "
            "AND subject = :subject ORDER BY seq"), {"subject": f"order:{order_id}"}).all()
    return [json.loads(row[0]) for row in rows]


@pytest.fixture
def gateway(make_app: Callable[..., Flask]) -> Flask:
    app = make_app(SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET)
    return app


@pytest.fixture
def web(gateway: Flask) -> FlaskClient:
    return gateway.test_client()


@pytest.fixture
def store(env: dict[str, str]) -> Iterator[Callable[[], int]]:
    """Drain the real orders worker once: what the stream holds reaches the database."""
    with built_worker(Settings.from_env(env)) as worker:
        yield lambda: drain(worker)


def held_order(web: FlaskClient, uid: str = "payer", window: int = 60,
               **fields: Any) -> dict[str, Any]:
    aid = create_activity(web, total=5, payment_window=window, **fields)["id"]
    bought = expect(buy(web, aid, uid), 200)
    return {"aid": aid, **bought}


# -- configuration -------------------------------------------------------------------------


def test_the_secret_is_optional_and_a_malformed_one_stops_the_gateway(
        env: dict[str, str]) -> None:
    assert Settings.from_env(env).payment_webhook_secret is None
    assert Settings.from_env({**env, "SECKILL_PAYMENT_WEBHOOK_SECRET": SECRET}
                             ).payment_webhook_secret == SECRET
    short = "whsec_" + base64.b64encode(b"short").decode()
    for bad in ("not-a-secret", "whsec_", "whsec_!!!!", short, SECRET[len("whsec_"):]):
        with pytest.raises(ConfigError, match="SECKILL_PAYMENT_WEBHOOK_SECRET"):
            Settings.from_env({**env, "SECKILL_PAYMENT_WEBHOOK_SECRET": bad})


def test_without_a_secret_the_route_answers_404_and_takes_no_payment(
        app: Flask) -> None:
    client = app.test_client()
    order = held_order(client)
    body = payment(order["order_id"], "pi_1")
    for headers in (signed(body), {}, signed(body, OTHER_SECRET)):
        answer = expect(client.post(ROUTE, data=body, headers=headers), 404, "not_found")
        assert "not configured" in answer["message"]
    assert order_status(client, order["aid"], "payer")["payment"] == "due"


# -- the signature ---------------------------------------------------------------------------


def test_a_bad_missing_or_stale_signature_is_401_and_changes_nothing(web: FlaskClient) -> None:
    order = held_order(web)
    body = payment(order["order_id"], "pi_1")
    good = signed(body)
    now = datetime.now(UTC)
    cases: dict[str, tuple[bytes, dict[str, str]]] = {
        "none": (body, {"Content-Type": "application/json"}),
        "no id": (body, {k: v for k, v in good.items() if k != "webhook-id"}),
        "no timestamp": (body, {k: v for k, v in good.items() if k != "webhook-timestamp"}),
        "no signature": (body, {k: v for k, v in good.items() if k != "webhook-signature"}),
        "another secret": (body, signed(body, OTHER_SECRET)),
        "another body": (payment(order["order_id"], "pi_2"), good),
        "another id": (body, {**good, "webhook-id": "msg_other"}),
        "six minutes old": (body, signed(body, at=now - timedelta(minutes=6))),
        "six minutes ahead": (body, signed(body, at=now + timedelta(minutes=6))),
        "timestamp not a number": (body, {**good, "webhook-timestamp": "soon"}),
        "timestamp nan": (body, {**good, "webhook-timestamp": "nan"}),
        "timestamp huge": (body, {**good, "webhook-timestamp": "1e400"}),
        # The library raises ValueError / binascii.Error on these, not its own error.
        "no comma": (body, {**good, "webhook-signature": "v1"}),
        "two commas": (body, {**good, "webhook-signature": "v1,a,b"}),
        "not base64": (body, {**good, "webhook-signature": "v1,@@@="}),
        "bad padding": (body, {**good, "webhook-signature": "v1,abc"}),
        "other version only": (body, {**good, "webhook-signature":
                                      good["webhook-signature"].replace("v1,", "v2,")}),
        "not utf-8": (b"\xff\xfe" + body, good),
    }
    for name, (sent, headers) in cases.items():
        answer = web.post(ROUTE, data=sent, headers=headers)
        assert answer.status_code == 401, (name, answer.get_data()[:200])
        expect(answer, 401, "unauthenticated")
    # Malformed JSON and other types are refused the same way when unsigned: signature first.
    expect(web.post(ROUTE, data=b"{nope", headers=good), 401, "unauthenticated")
    other = orjson.dumps({"type": "payment.failed", "data": {}})
    expect(web.post(ROUTE, data=other, headers=good), 401, "unauthenticated")
    assert order_status(web, order["aid"], "payer")["payment"] == "due"
    # Two signatures (a provider rotating its secret): one that matches is enough.
    rotating = signed(body)
    old = signed(body, OTHER_SECRET, msg_id=rotating["webhook-id"],
                 at=datetime.fromtimestamp(int(rotating["webhook-timestamp"]), UTC))
    rotating["webhook-signature"] = (f"{old['webhook-signature']} "
                                     f"{rotating['webhook-signature']}")
    expect(web.post(ROUTE, data=body, headers=rotating), 200)
    assert order_status(web, order["aid"], "payer")["payment"] == "paid"


def test_a_malformed_signed_body_is_400_with_a_clear_error(web: FlaskClient) -> None:
    order = held_order(web)
    oid = order["order_id"]
    bad: list[Any] = [
        [], "text", {"data": {"order_id": oid, "payment_ref": "r"}},
        {"type": 5, "data": {"order_id": oid, "payment_ref": "r"}},
        {"type": "payment.succeeded"},
        {"type": "payment.succeeded", "data": [oid]},
        {"type": "payment.succeeded", "data": {"payment_ref": "r"}},
        {"type": "payment.succeeded", "data": {"order_id": 5, "payment_ref": "r"}},
        {"type": "payment.succeeded", "data": {"order_id": oid}},
        {"type": "payment.succeeded", "data": {"order_id": oid, "payment_ref": "a|b"}},
        {"type": "payment.succeeded", "data": {"order_id": oid, "payment_ref": "x" * 129}},
        {"type": "payment.succeeded", "data": {"order_id": oid, "payment_ref": ""}},
    ]
    for amount in ("12", -1, True, 1.5, 2**53):
        bad.append({"type": "payment.succeeded",
                    "data": {"order_id": oid, "payment_ref": "r", "amount": amount}})
    for payload in bad:
        raw = orjson.dumps(payload)
        answer = deliver(web, raw)
        assert answer.status_code == 400, (payload, answer.get_data()[:200])
        expect(answer, 400, "bad_request")
    for raw in (b"{nope", b"", b"\"unterminated"):
        expect(deliver(web, raw), 400, "bad_request")
    assert order_status(web, order["aid"], "payer")["payment"] == "due"


# -- what a payment does ----------------------------------------------------------------------


@BOTH_BACKENDS
def test_a_signed_payment_pays_the_order_and_a_repeat_answers_the_same(
        web: FlaskClient, gateway: Flask, store: Callable[[], int], database_url: str) -> None:
    order = held_order(web)
    oid = order["order_id"]
    first = expect(deliver(web, payment(oid, "pi_123", amount=49_999)), 200)
    assert first == {"status": "paid", "order_id": oid, "payment_ref": "pi_123"}
    # The provider's retry (a new delivery of the same payment, maybe a new webhook-id).
    assert expect(deliver(web, payment(oid, "pi_123", amount=49_999)), 200) == first
    status = order_status(web, order["aid"], "payer")
    assert (status["payment"], status["pay_by"]) == ("paid", order["pay_by"])
    store()
    [row] = stored_orders(database_url, order["aid"])
    assert (row.status, row.payment, row.payment_ref) == ("confirmed", "paid", "pi_123")
    engine = gateway.extensions["seckill"].engine
    with engine.connect() as conn:
        amount = conn.execute(sa.text("SELECT paid_amount FROM seckill_orders "
                                      "WHERE order_id = :o"), {"o": oid}).scalar_one()
    assert amount == 49_999
    assert refunds(engine, oid) == []
    # The operator's call says the same (the same reference).
    expect(web.post(f"/admin/orders/{oid}/pay", json={"payment_ref": "pi_123"},
                    headers=ADMIN), 200)


def test_other_event_types_are_acknowledged_and_ignored(web: FlaskClient) -> None:
    order = held_order(web)
    for kind in ("payment.failed", "refund.succeeded", "payment.succeeded.v2", ""):
        raw = payment(order["order_id"], "pi_x", kind=kind)
        assert expect(deliver(web, raw), 200) == {"status": "ignored", "type": kind}
    # Whatever their data: an ignored event's body is not checked further.
    raw = orjson.dumps({"type": "charge.updated", "data": ["anything"]})
    assert expect(deliver(web, raw), 200)["status"] == "ignored"
    assert order_status(web, order["aid"], "payer")["payment"] == "due"


def test_an_unknown_order_is_404(web: FlaskClient) -> None:
    aid = held_order(web)["aid"]
    for oid in ("nonsense", f"nosuchactivity-{now_ms():013d}-1", f"{aid}-{now_ms():013d}-999"):
        expect(deliver(web, payment(oid, "pi_1")), 404, "unknown_order")


def test_an_order_with_no_payment_window_is_409(web: FlaskClient) -> None:
    aid = create_activity(web, total=5)["id"]
    oid = expect(buy(web, aid, "plain"), 200)["order_id"]
    expect(deliver(web, payment(oid, "pi_1")), 409, "no_payment_window")


@BOTH_BACKENDS
def test_a_second_reference_on_a_paid_order_is_200_and_one_refund_due_per_reference(
        web: FlaskClient, gateway: Flask, store: Callable[[], int]) -> None:
    order = held_order(web)
    oid = order["order_id"]
    store()
    expect(deliver(web, payment(oid, "pi_first")), 200)
    for _ in range(3):  # each delivered three times: one event each
        second = expect(deliver(web, payment(oid, "pi_second", amount=1250)), 200)
        assert second == {"status": "refund_due", "order_id": oid, "payment_ref": "pi_second",
                          "reason": "already_paid"}
        expect(deliver(web, payment(oid, "pi_third")), 200)
    # The order is unchanged: paid with the first reference.
    expect(web.post(f"/admin/orders/{oid}/pay", json={"payment_ref": "pi_second"},
                    headers=ADMIN), 409, "already_paid")
    assert order_status(web, order["aid"], "payer")["payment"] == "paid"
    store()
    events = refunds(gateway.extensions["seckill"].engine, oid)
    assert [e["data"]["payment_ref"] for e in events] == ["pi_second", "pi_third"]
    first, third = events
    assert first["type"] == "order.refund_due" and first["data"]["payment_amount"] == 1250
    assert "payment_amount" not in third["data"]
    assert (first["data"]["order_id"], first["data"]["activity"]) == (oid, order["aid"])


@BOTH_BACKENDS
def test_a_payment_after_the_hold_expired_is_200_and_one_refund_due(
        web: FlaskClient, gateway: Flask, store: Callable[[], int], database_url: str) -> None:
    order = held_order(web, window=1)
    oid = order["order_id"]
    store()
    wait_until(lambda: now_ms() > order["pay_by"] + 5, 5, what="pay_by passed")
    # Before the expiry ran, and after: the same story.
    late = expect(deliver(web, payment(oid, "pi_late", amount=700)), 200)
    assert late == {"status": "refund_due", "order_id": oid, "payment_ref": "pi_late",
                    "reason": "payment_expired"}
    services = gateway.extensions["seckill"]
    Expirer(services.client, services.keys, services.book).expire(order["aid"], 1)
    assert expect(deliver(web, payment(oid, "pi_late", amount=700)), 200) == late
    status = order_status(web, order["aid"], "payer")
    assert (status["status"], status["payment"]) == ("cancelled", "expired")
    store()
    [row] = stored_orders(database_url, order["aid"])
    assert (row.status, row.payment, row.payment_ref) == ("cancelled", "expired", None)
    [event] = refunds(services.engine, oid)
    assert event["data"]["payment_ref"] == "pi_late" and event["data"]["payment_amount"] == 700


def test_a_payment_of_an_order_cancelled_while_due_is_refund_due(
        web: FlaskClient, gateway: Flask, store: Callable[[], int]) -> None:
    """The operator cancelled the order before it was paid, and then the provider charged:
    the money must go back (documented in docs/API.md)."""
    order = held_order(web)
    oid = order["order_id"]
    store()
    expect(web.post(f"/admin/orders/{oid}/cancel", headers=ADMIN), 200)
    for _ in range(2):
        answer = expect(deliver(web, payment(oid, "pi_after_cancel")), 200)
        assert (answer["status"], answer["reason"]) == ("refund_due", "already_cancelled")
    store()
    [event] = refunds(gateway.extensions["seckill"].engine, oid)
    assert event["data"]["payment_ref"] == "pi_after_cancel"


def test_a_refund_for_an_order_not_stored_yet_is_503_until_it_is(
        web: FlaskClient, gateway: Flask, store: Callable[[], int]) -> None:
    """Never a 200 before the refund is written: the provider retries."""
    order = held_order(web)
    oid = order["order_id"]
    expect(deliver(web, payment(oid, "pi_a")), 200)
    refused = deliver(web, payment(oid, "pi_b"))
    expect(refused, 503, "unavailable")
    assert refused.headers["Retry-After"]
    store()
    assert expect(deliver(web, payment(oid, "pi_b")), 200)["status"] == "refund_due"
    assert len(refunds(gateway.extensions["seckill"].engine, oid)) == 1


# -- the paid entry ---------------------------------------------------------------------------


def test_the_paid_stream_entry_carries_the_amount() -> None:
    fields = {"type": "paid", "order_id": "a1-1700000000000-1", "activity": "a1",
              "ref": "pi_1", "ts": "1700000000001"}
    assert parse_entry("a1", fields) == Paid("a1-1700000000000-1", 1700000000001, "pi_1")
    assert parse_entry("a1", {**fields, "amount": "250"}) == Paid(
        "a1-1700000000000-1", 1700000000001, "pi_1", 250)
    for bad in ("", "x", "-1", str(2**63)):
        with pytest.raises(Poison):
            parse_entry("a1", {**fields, "amount": bad})
