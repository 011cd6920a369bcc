"""The operator's webhook endpoints over the admin API: register, list (with each
endpoint's summary for the console), remove, its deliveries, replay.

Real servers: the session's Valkey, a SQLite file per test (a PostgreSQL schema when
``SECKILL_TEST_POSTGRES`` names a server), the gateway app. The events and deliveries the
outbox and the dispatcher would write are written here as rows of their tables
(``tests/support/webhook_rows.py``), so that these tests need neither.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from flask.testing import FlaskClient
from standardwebhooks import Webhook

from seckill.domain.clock import iso_from_ms, now_ms
from tests.support.api import expect
from tests.support.tokens import ADMIN, user_headers
from tests.support.webhook_rows import deliveries_of, delivery, engine_of, event

pytestmark = pytest.mark.database

SHOP = "http://10.0.0.7:8000/hooks/seckill"


def register(client: FlaskClient, **body: Any) -> dict[str, Any]:
    return expect(client.post("/admin/webhooks", json={"url": SHOP, "events": ["*"], **body},
                              headers=ADMIN), 201)


def listed(client: FlaskClient, query: str = "") -> dict[str, Any]:
    return expect(client.get(f"/admin/webhooks{query}", headers=ADMIN), 200)


def test_an_endpoint_is_registered_with_a_usable_secret_shown_once(client):
    made = register(client, events=["order.created", "order.paid"])
    assert set(made) == {"id", "url", "events", "secret", "created_at"}
    assert made["url"] == SHOP and made["events"] == ["order.created", "order.paid"]
    assert made["created_at"].endswith("Z")
    secret = made["secret"]
    assert secret.startswith("whsec_")
    assert 24 <= len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) <= 32
    # The secret signs and verifies as the Standard Webhooks library does it.
    hook = Webhook(secret)
    at = datetime.now(UTC)
    signature = hook.sign("msg_1", at, '{"type":"order.paid"}')
    assert hook.verify('{"type":"order.paid"}', {
        "webhook-id": "msg_1", "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature}) == {"type": "order.paid"}

    other = register(client)
    assert other["secret"] != secret and other["id"] != made["id"]
    given = "whsec_" + base64.b64encode(b"k" * 16).decode()
    assert register(client, secret=given)["secret"] == given

    page = listed(client)
    assert [e["id"] for e in page["webhooks"]][:2] == [made["id"], other["id"]]
    assert len(page["webhooks"]) == 3
    for shown in page["webhooks"]:
        assert "secret" not in shown  # shown in the answer to the registration only
    first = page["webhooks"][0]
    assert (first["url"], first["events"], first["created_at"]) == (
        SHOP, ["order.created", "order.paid"], made["created_at"])
    assert first["summary"] == {"backlog": 0, "failed": 0, "delivered": 0,
                                "last_attempt": None, "oldest_pending_at": None}


BAD_ENDPOINTS = [
    ({"url": "ftp://shop.example/hook", "events": ["*"]}, "url"),
    ({"url": "file:///etc/passwd", "events": ["*"]}, "url"),
    ({"url": "javascript:alert(1)", "events": ["*"]}, "url"),
    ({"url": "http:///no-host", "events": ["*"]}, "url"),
    ({"url": "https://user:pass@shop.example/hook", "events": ["*"]}, "url"),
    ({"url": "https://token@shop.example/hook", "events": ["*"]}, "url"),
    ({"url": "https://shop.example:99999/hook", "events": ["*"]}, "url"),
    ({"url": "https://shop.example:0/hook", "events": ["*"]}, "url"),  # no port is 0
    ({"url": "https://shop.example/a b", "events": ["*"]}, "url"),
    ({"url": "https://shop.example/caf\u00e9", "events": ["*"]}, "url"),
    ({"url": 'https://shop.example/"quoted"', "events": ["*"]}, "url"),
    ({"url": "https://[::1/hook", "events": ["*"]}, "url"),
    ({"url": "https://shop.example/" + "a" * 2030, "events": ["*"]}, "url"),
    ({"url": 7, "events": ["*"]}, "url"),
    ({"url": "", "events": ["*"]}, "url"),
    ({"events": ["*"]}, "url"),
    ({"url": SHOP}, "events"),
    ({"url": SHOP, "events": []}, "events"),
    ({"url": SHOP, "events": "order.paid"}, "events"),
    ({"url": SHOP, "events": ["order.shipped"]}, "events"),
    ({"url": SHOP, "events": ["*", "order.paid"]}, "events"),
    ({"url": SHOP, "events": [3]}, "events"),
    ({"url": SHOP, "events": ["*"], "secret": "hunter2"}, "secret"),
    ({"url": SHOP, "events": ["*"], "secret": "whsec_" + base64.b64encode(b"short").decode()},
     "secret"),
    ({"url": SHOP, "events": ["*"], "secret": "whsec_not base64!"}, "secret"),
    ({"url": SHOP, "events": ["*"], "secret": 12}, "secret"),
]


def test_every_bad_endpoint_is_a_400_naming_the_field_and_nothing_is_stored(client):
    for body, field in BAD_ENDPOINTS:
        refused = expect(client.post("/admin/webhooks", json=body, headers=ADMIN), 400,
                         "bad_request")
        assert refused.get("field") == field, (body, refused)
    unknown = expect(client.post("/admin/webhooks", json={"url": SHOP, "events": ["*"],
                                                          "retries": 3}, headers=ADMIN),
                     400, "bad_request")
    assert unknown["fields"] == ["retries"]
    for body in (b"{", b"[]", b'"x"'):
        expect(client.post("/admin/webhooks", data=body, headers=ADMIN), 400, "bad_request")
    for query, field in (("?limit=0", "limit"), ("?limit=201", "limit"), ("?limit=x", "limit"),
                         ("?cursor=a/b", "cursor")):
        assert expect(client.get(f"/admin/webhooks{query}", headers=ADMIN), 400,
                      "bad_request")["field"] == field, query
    for call in (client.get("/admin/webhooks"),
                 client.post("/admin/webhooks", json={"url": SHOP, "events": ["*"]}),
                 client.get("/admin/webhooks", headers=user_headers("alice")),
                 client.delete("/admin/webhooks/x"),
                 client.get("/admin/webhooks/x/deliveries"),
                 client.post("/admin/webhooks/x/replay", json={"since": iso_from_ms(0)})):
        expect(call, 401, "unauthenticated")
    assert listed(client) == {"webhooks": []}
    # Private addresses, plain http and a port are fine: the shop's system is often inside.
    for url in ("http://127.0.0.1:9000/h", "http://[::1]:8080/", "https://orders.internal/x?a=1",
                "HTTPS://Shop.Example/hook"):
        register(client, url=url)


def test_the_list_is_paginated_like_the_others(client):
    made = [register(client, url=f"{SHOP}/{n}")["id"] for n in range(5)]
    first = listed(client, "?limit=2")
    assert [e["id"] for e in first["webhooks"]] == made[:2]
    second = listed(client, f"?limit=2&cursor={first['next']}")
    assert [e["id"] for e in second["webhooks"]] == made[2:4]
    last = listed(client, f"?limit=2&cursor={second['next']}")
    assert [e["id"] for e in last["webhooks"]] == made[4:] and "next" not in last
    assert len(listed(client)["webhooks"]) == 5  # default 50 a page


def test_removing_an_endpoint_takes_its_deliveries_and_no_other(client, app):
    gone, kept = register(client)["id"], register(client)["id"]
    engine = engine_of(app)
    seq, _ = event(engine, "order.created", "o1", now_ms())
    for endpoint in (gone, kept):
        delivery(engine, endpoint, seq, "order:o1", "pending")
    removed = expect(client.delete(f"/admin/webhooks/{gone}", headers=ADMIN), 200)
    assert removed["id"] == gone and "secret" not in removed
    assert [e["id"] for e in listed(client)["webhooks"]] == [kept]
    assert deliveries_of(engine, gone) == [] and len(deliveries_of(engine, kept)) == 1
    for call in (client.delete(f"/admin/webhooks/{gone}", headers=ADMIN),
                 client.get(f"/admin/webhooks/{gone}/deliveries", headers=ADMIN),
                 client.post(f"/admin/webhooks/{gone}/replay", json={"since": iso_from_ms(0)},
                             headers=ADMIN),
                 client.delete("/admin/webhooks/no%20such", headers=ADMIN)):
        assert expect(call, 404, "unknown_webhook")["id"]


def test_deliveries_are_listed_with_their_last_attempt_and_filtered_by_status(client, app):
    hook = register(client)["id"]
    engine = engine_of(app)
    at = now_ms() - 60_000
    done, done_id = event(engine, "order.created", "o1", at)
    failing, failing_id = event(engine, "order.created", "o2", at + 1)
    waiting, waiting_id = event(engine, "activity.sold_out", "p1", at + 2, subject="activity:p1")
    delivery(engine, hook, done, "order:o1", "delivered", attempts=1, last_ms=at + 10,
             last_code=204, done_ms=at + 10)
    delivery(engine, hook, failing, "order:o2", "failed", attempts=40, last_ms=at + 20,
             last_code=None, last_error="ConnectTimeoutError: timed out", done_ms=at + 20)
    delivery(engine, hook, waiting, "activity:p1", "pending", attempts=2, last_ms=at + 30,
             last_code=500, next_ms=at + 90_000)
    every = expect(client.get(f"/admin/webhooks/{hook}/deliveries", headers=ADMIN), 200)
    assert [d["event_id"] for d in every["deliveries"]] == [done_id, failing_id, waiting_id]
    first, second, third = every["deliveries"]
    assert first == {"event_id": done_id, "type": "order.created", "subject": "order:o1",
                     "order_id": "o1", "status": "delivered", "attempts": 1,
                     "created_at": iso_from_ms(at), "last_attempt_at": iso_from_ms(at + 10),
                     "last_code": 204, "last_error": None, "next_attempt_at": None}
    assert (second["status"], second["last_code"], second["last_error"]) == (
        "failed", None, "ConnectTimeoutError: timed out")
    assert "order_id" not in third and third["subject"] == "activity:p1"
    assert third["next_attempt_at"] == iso_from_ms(at + 90_000) and third["last_code"] == 500
    failed = expect(client.get(f"/admin/webhooks/{hook}/deliveries?status=failed",
                               headers=ADMIN), 200)
    assert [d["event_id"] for d in failed["deliveries"]] == [failing_id]
    page = expect(client.get(f"/admin/webhooks/{hook}/deliveries?limit=2", headers=ADMIN), 200)
    assert len(page["deliveries"]) == 2
    rest = expect(client.get(f"/admin/webhooks/{hook}/deliveries?limit=2&cursor={page['next']}",
                             headers=ADMIN), 200)
    assert [d["event_id"] for d in rest["deliveries"]] == [waiting_id] and "next" not in rest
    for query, field in (("?status=lost", "status"), ("?limit=0", "limit"),
                         ("?cursor=x", "cursor")):
        assert expect(client.get(f"/admin/webhooks/{hook}/deliveries{query}", headers=ADMIN),
                      400, "bad_request")["field"] == field

    summary = listed(client)["webhooks"][0]["summary"]
    assert summary == {"backlog": 1, "failed": 1, "delivered": 1,
                       "last_attempt": {"at": iso_from_ms(at + 30), "code": 500,
                                        "error": None, "status": "pending"},
                       "oldest_pending_at": iso_from_ms(at + 2)}


def test_a_replay_sends_again_every_subscribed_event_since_then_with_its_webhook_id(client, app):
    engine = engine_of(app)
    at = now_ms() - 3_600_000
    before, _ = event(engine, "order.created", "o0", at - 1)  # before "since": untouched
    older, older_id = event(engine, "order.created", "o1", at)  # before the endpoint existed
    hook = register(client, events=["order.created", "order.paid"])["id"]
    sent, sent_id = event(engine, "order.paid", "o1", at + 1)
    other, _ = event(engine, "order.cancelled", "o2", at + 2)  # not subscribed
    unfanned, _ = event(engine, "order.created", "o3", at + 3, fanned=False)  # fan-out's
    delivery(engine, hook, before, "order:o0", "delivered", attempts=1, done_ms=at)
    delivery(engine, hook, sent, "order:o1", "failed", attempts=40, last_ms=at + 5,
             last_code=503, done_ms=at + 5, first_ms=at + 1, lease_owner="d1", lease_ms=at)

    answer = expect(client.post(f"/admin/webhooks/{hook}/replay",
                                json={"since": iso_from_ms(at)}, headers=ADMIN), 200)
    assert answer == {"id": hook, "since": iso_from_ms(at), "replayed": 2}
    rows = {row["seq"]: row for row in deliveries_of(engine, hook)}
    assert set(rows) == {before, older, sent}  # nothing for other or unfanned
    assert rows[before]["status"] == "delivered"
    for seq in (older, sent):
        row = rows[seq]
        assert (row["status"], row["attempts"], row["first_ms"], row["lease_owner"],
                row["lease_ms"], row["done_ms"]) == ("pending", 0, None, None, None, None)
        assert now_ms() - 5_000 <= row["next_ms"] <= now_ms()
    assert rows[older]["subject"] == "order:o1"
    listed_ids = [d["event_id"] for d in expect(
        client.get(f"/admin/webhooks/{hook}/deliveries?status=pending", headers=ADMIN),
        200)["deliveries"]]
    assert listed_ids == [older_id, sent_id]  # the original webhook-ids, in event order
    assert other and unfanned
    again = expect(client.post(f"/admin/webhooks/{hook}/replay",
                               json={"since": iso_from_ms(at)}, headers=ADMIN), 200)
    assert again["replayed"] == 2 and len(deliveries_of(engine, hook)) == 3
    for body, field in (({}, "since"), ({"since": "yesterday"}, "since"),
                        ({"since": "2026-01-01T00:00:00"}, "since"),
                        ({"since": iso_from_ms(at), "until": 1}, None)):
        refused = expect(client.post(f"/admin/webhooks/{hook}/replay", json=body, headers=ADMIN),
                         400, "bad_request")
        assert refused.get("field") == field or field is None, refused
