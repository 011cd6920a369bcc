"""Every status and error code of docs/API.md that exists today, through the Flask app and
the session's real Valkey. Each response is also checked for a JSON Content-Type, and against
the OpenAPI document (tests/support/openapi_check.py: every test client here checks every
answer)."""

from __future__ import annotations

import re
import time
import uuid
from datetime import datetime
from typing import Any

import pytest
from flask import Flask

from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.ops.stack.ports import free_listen_port
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import keys_of

# The whole contract, on one server and on a cluster (REDIS_URL naming one of its nodes).
pytestmark = BOTH_BACKENDS

PUBLIC_FIELDS = {"id", "name", "starts_at", "ends_at", "total", "remaining", "per_user_limit",
                 "state"}
URL = re.compile(r"/seckill/(?P<aid>[A-Za-z0-9_-]+)/(?P<token>[^/]+)/buy")


def services(app: Flask) -> Any:
    return app.extensions["seckill"]


def new_id() -> str:
    return f"a{uuid.uuid4().hex[:10]}"


def stored_activity(app: Flask, start_s: float, end_s: float, total: int | None = 5,
                    per_user_limit: int = 1) -> Activity:
    """Write an activity straight into Redis, bypassing the operator API's validation (which
    refuses windows in the past): the only way to get an ``ended`` activity without sleeping."""
    at = now_ms()
    activity = Activity(
        id=new_id(), name="Stored", starts_ms=at + int(start_s * 1000),
        ends_ms=at + int(end_s * 1000), total=total, remaining=total,
        per_user_limit=per_user_limit,
    )
    services(app).activities.create(activity)
    return activity


def signed_url(app: Flask, aid: str, uid: str) -> str:
    """A purchase URL exactly as the gateway would issue it (used where the URL endpoint itself
    refuses to issue one, e.g. before the sale)."""
    token, _ = app.extensions["edge.PurchaseUrls"].signer.sign(aid, uid)
    return f"/seckill/{aid}/{token}/buy"


def parse_iso(value: str) -> datetime:
    stamp = datetime.fromisoformat(value)
    assert stamp.tzinfo is not None, value
    return stamp


# --- GET /seckill/time ------------------------------------------------------------------------


def test_time_is_epoch_milliseconds(client):
    before = now_ms()
    body = expect(client.get("/seckill/time"), 200)
    after = now_ms()
    assert set(body) == {"now_ms"}
    assert type(body["now_ms"]) is int
    assert before <= body["now_ms"] <= after


# --- GET /seckill/activities/<aid> ------------------------------------------------------------


def test_activity_fields_and_types(client, make_activity):
    created = make_activity(total=7, per_user_limit=2, name="Phone X")
    body = expect(client.get(f"/seckill/activities/{created['id']}"), 200)
    assert set(body) >= PUBLIC_FIELDS
    assert body["id"] == created["id"]
    assert body["name"] == "Phone X"
    assert type(body["total"]) is int and body["total"] == 7
    assert type(body["remaining"]) is int and body["remaining"] == 7
    assert type(body["per_user_limit"]) is int and body["per_user_limit"] == 2
    assert body["state"] == "open"
    starts, ends = parse_iso(body["starts_at"]), parse_iso(body["ends_at"])
    assert starts < ends
    assert body == created | {"state": "open"}


def test_activity_states(app, client, make_activity):
    upcoming = make_activity(starts_at=iso(600), ends_at=iso(1200))
    assert expect(client.get(f"/seckill/activities/{upcoming['id']}"), 200)["state"] == "upcoming"

    sold = make_activity(total=1)
    assert buy(client, sold["id"], "winner").status_code == 200
    body = expect(client.get(f"/seckill/activities/{sold['id']}"), 200)
    assert body["state"] == "sold_out"
    assert body["remaining"] == 0

    ended = stored_activity(app, -7200, -3600)
    body = expect(client.get(f"/seckill/activities/{ended.id}"), 200)
    assert body["state"] == "ended"
    assert parse_iso(body["ends_at"]).timestamp() * 1000 == pytest.approx(ended.ends_ms, abs=1)


def test_unknown_activity(client):
    body = expect(client.get("/seckill/activities/nosuchthing"), 404, "unknown_activity")
    assert body["activity"] == "nosuchthing"


# --- GET /seckill/url -------------------------------------------------------------------------


def test_purchase_url_issued(client, make_activity):
    activity = make_activity()
    before = int(time.time())
    body = expect(client.get(f"/seckill/url?activity={activity['id']}",
                             headers=user_headers("alice")), 200)
    assert set(body) == {"url", "expires_at"}
    match = URL.fullmatch(body["url"])
    assert match is not None, body["url"]
    assert match["aid"] == activity["id"]
    assert type(body["expires_at"]) is int
    # SECKILL_URL_TTL defaults to 60 seconds.
    assert before + 60 <= body["expires_at"] <= int(time.time()) + 60


def test_purchase_url_ttl_is_configurable(make_app):
    app = make_app(SECKILL_URL_TTL="7")
    client = app.test_client()
    aid = stored_activity(app, -60, 3600).id
    before = int(time.time())
    body = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("u1")), 200)
    assert before + 7 <= body["expires_at"] <= int(time.time()) + 7


def test_purchase_url_unauthenticated(client, make_activity):
    activity = make_activity()
    expect(client.get(f"/seckill/url?activity={activity['id']}"), 401, "unauthenticated")


def test_purchase_url_unknown_activity(client):
    body = expect(client.get("/seckill/url?activity=nosuch", headers=user_headers("alice")),
                  404, "unknown_activity")
    assert body["activity"] == "nosuch"


def test_purchase_url_needs_the_activity_parameter(client):
    for query in ("", "?activity=", "?other=x"):
        expect(client.get(f"/seckill/url{query}", headers=user_headers("alice")), 400,
               "bad_request")


def test_purchase_url_not_started(client, make_activity):
    activity = make_activity(starts_at=iso(600), ends_at=iso(1200))
    before = now_ms()
    body = expect(client.get(f"/seckill/url?activity={activity['id']}",
                             headers=user_headers("alice")), 403, "not_started")
    after = now_ms()
    assert body["starts_at"] == activity["starts_at"]
    assert type(body["now_ms"]) is int
    assert before <= body["now_ms"] <= after


def test_purchase_url_ended(app, client):
    aid = stored_activity(app, -7200, -60).id
    expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("alice")), 410,
           "ended")


def test_purchase_url_sold_out(client, make_activity):
    activity = make_activity(total=1)
    assert buy(client, activity["id"], "first").status_code == 200
    expect(client.get(f"/seckill/url?activity={activity['id']}", headers=user_headers("second")),
           410, "sold_out")


# --- POST /seckill/<aid>/<token>/buy ----------------------------------------------------------


@pytest.mark.parametrize("body", [None, {}, {"quantity": 1}])
def test_purchase_ok_with_each_body_form(client, make_activity, rds, prefix, body):
    activity = make_activity(total=3)
    answer = expect(buy(client, activity["id"], "alice", body), 200)
    assert set(answer) == {"status", "order_id", "quantity"}
    assert answer["status"] == "ok"
    assert isinstance(answer["order_id"], str) and answer["order_id"]
    assert answer["quantity"] == 1
    assert rds.hget(f"{prefix}:{{{activity['id']}}}:meta", "remaining") == "2"


def test_purchase_of_several_units(client, make_activity):
    activity = make_activity(total=5, per_user_limit=3)
    answer = expect(buy(client, activity["id"], "alice", {"quantity": 3}), 200)
    assert answer["quantity"] == 3
    view = expect(client.get(f"/seckill/activities/{activity['id']}"), 200)
    assert view["remaining"] == 2


def test_purchase_empty_whitespace_body_means_one(client, make_activity):
    activity = make_activity(total=2)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    answer = expect(client.post(url, headers=headers, data=b"  \n"), 200)
    assert answer["quantity"] == 1


def test_purchase_unauthenticated(client, make_activity):
    activity = make_activity()
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    expect(client.post(url), 401, "unauthenticated")
    # Nothing was bought by the unauthenticated attempt.
    expect(client.post(url, headers=headers), 200)


def test_purchase_not_started_at_the_edge(app, client):
    activity = stored_activity(app, 600, 1200)
    body = expect(client.post(signed_url(app, activity.id, "alice"),
                              headers=user_headers("alice")), 403, "not_started")
    assert parse_iso(body["starts_at"]).timestamp() * 1000 == pytest.approx(activity.starts_ms,
                                                                             abs=1)
    assert abs(body["now_ms"] - now_ms()) < 5000


def test_purchase_not_started_by_the_script_when_the_edge_cache_is_stale(make_app, rds, prefix):
    """The edge's cached window says open; Redis says the sale starts later: the script wins."""
    app = make_app(SECKILL_META_TTL="300")
    client = app.test_client()
    aid = stored_activity(app, -60, 3600).id
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    later = now_ms() + 600_000
    rds.hset(f"{prefix}:{{{aid}}}:meta", "starts_ms", later)
    body = expect(client.post(url, headers=headers), 403, "not_started")
    assert parse_iso(body["starts_at"]).timestamp() * 1000 == pytest.approx(later, abs=1)
    assert abs(body["now_ms"] - now_ms()) < 5000
    assert rds.hlen(f"{prefix}:{{{aid}}}:buyers") == 0


def test_purchase_ended(app, client):
    aid = stored_activity(app, -7200, -60).id
    expect(client.post(signed_url(app, aid, "alice"), headers=user_headers("alice")), 410,
           "ended")


def test_purchase_ended_by_the_script_when_the_edge_cache_is_stale(make_app, rds, prefix):
    app = make_app(SECKILL_META_TTL="300")
    client = app.test_client()
    aid = stored_activity(app, -60, 3600).id
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    rds.hset(f"{prefix}:{{{aid}}}:meta", "ends_ms", now_ms() - 1000)
    expect(client.post(url, headers=headers), 410, "ended")
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == "5"


def test_purchase_unknown_activity(app, client):
    expect(client.post(signed_url(app, "nosuchactivity", "alice"), headers=user_headers("alice")),
           404, "unknown_activity")


def test_purchase_sold_out_decided_by_the_script(client, make_activity):
    activity = make_activity(total=1)
    urls = {}
    for uid in ("alice", "bob"):
        got = client.get(f"/seckill/url?activity={activity['id']}", headers=user_headers(uid))
        urls[uid] = expect(got, 200)["url"]
    expect(client.post(urls["alice"], headers=user_headers("alice")), 200)
    expect(client.post(urls["bob"], headers=user_headers("bob")), 410, "sold_out")


def test_already_purchased_answers_the_same_order(client, make_activity):
    activity = make_activity(total=1)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    first = expect(client.post(url, headers=headers), 200)
    # The activity is sold out now; the winner repeating still learns their order.
    for _ in range(2):
        again = expect(client.post(url, headers=headers, json={"quantity": 1}), 409,
                       "already_purchased")
        assert again["order_id"] == first["order_id"]


def test_insufficient_stock(client, make_activity):
    activity = make_activity(total=3, per_user_limit=5)
    expect(buy(client, activity["id"], "alice", {"quantity": 2}), 200)
    body = expect(buy(client, activity["id"], "bob", {"quantity": 2}), 409, "insufficient_stock")
    assert body["remaining"] == 1
    assert expect(buy(client, activity["id"], "bob", {"quantity": 1}), 200)["quantity"] == 1
    expect(buy(client, activity["id"], "carol"), 410, "sold_out")


def test_store_unreachable_is_503_unavailable(make_app):
    """The contract's 503: the store cannot be reached (fail closed, never 500 or 200)."""
    app = make_app(REDIS_URL=f"redis://127.0.0.1:{free_listen_port()}/0",
                   SECKILL_REDIS_TIMEOUT="0.5")
    client = app.test_client()
    headers = user_headers("alice")
    token, _ = app.extensions["edge.PurchaseUrls"].signer.sign("someactivity", "alice")
    expect(client.post(f"/seckill/someactivity/{token}/buy", headers=headers), 503,
           "unavailable")
    expect(client.get("/seckill/url?activity=someactivity", headers=headers), 503, "unavailable")
    expect(client.get("/seckill/activities/someactivity"), 503, "unavailable")
    expect(client.get("/seckill/someactivity/order", headers=headers), 503, "unavailable")


# --- GET /seckill/<aid>/order -----------------------------------------------------------------


def test_order_status(client, make_activity):
    activity = make_activity()
    path = f"/seckill/{activity['id']}/order"
    assert expect(client.get(path, headers=user_headers("alice")), 200) == {"status": "none"}
    order_id = expect(buy(client, activity["id"], "alice"), 200)["order_id"]
    assert expect(client.get(path, headers=user_headers("alice")), 200) == {
        "status": "pending", "order_id": order_id,
    }
    assert expect(client.get(path, headers=user_headers("bob")), 200) == {"status": "none"}


def test_order_status_failures(client):
    expect(client.get("/seckill/nosuch/order"), 401, "unauthenticated")
    expect(client.get("/seckill/nosuch/order", headers=user_headers("alice")), 404,
           "unknown_activity")


# --- unlimited stock ("total": null) ----------------------------------------------------------


def test_unlimited_activity(client, make_activity):
    activity = make_activity(total=None)
    assert activity["total"] is None
    assert activity["remaining"] is None
    assert activity["state"] == "open"
    orders = {expect(buy(client, activity["id"], f"user{i}"), 200)["order_id"] for i in range(6)}
    assert len(orders) == 6
    # Still one purchase per user.
    expect(buy(client, activity["id"], "user0"), 409, "already_purchased")
    view = expect(client.get(f"/seckill/activities/{activity['id']}"), 200)
    assert view["total"] is None and view["remaining"] is None and view["state"] == "open"
    stats = expect(client.get(f"/admin/activities/{activity['id']}/stats", headers=ADMIN), 200)
    assert stats["total"] is None
    assert stats["remaining"] is None
    assert stats["sold"] == 6
    assert stats["buyers"] == 6


# --- operator endpoints -----------------------------------------------------------------------


def test_create_activity_201(client):
    body: dict[str, Any] = {"id": new_id(), "name": "Console", "total": 4,
                            "starts_at": "2099-01-01T10:00:00Z",
                            "ends_at": "2099-01-01T12:30:00.250+01:00"}
    created = expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)
    assert set(created) >= PUBLIC_FIELDS
    assert created["id"] == body["id"]
    assert created["total"] == created["remaining"] == 4
    assert created["per_user_limit"] == 1
    assert created["state"] == "upcoming"
    assert parse_iso(created["starts_at"]) == parse_iso(body["starts_at"])
    assert parse_iso(created["ends_at"]) == parse_iso(body["ends_at"])
    # Seeded: the stock is in Redis from then on.
    assert expect(client.get(f"/seckill/activities/{body['id']}"), 200) == created


def test_create_activity_exists(client, make_activity):
    activity = make_activity(total=3)
    again = {"id": activity["id"], "name": "Other", "total": 99, "starts_at": iso(-10),
             "ends_at": iso(100)}
    body = expect(client.post("/admin/activities", json=again, headers=ADMIN), 409,
                  "activity_exists")
    assert body["activity"] == activity["id"]
    # Nothing changed.
    assert expect(client.get(f"/seckill/activities/{activity['id']}"), 200)["total"] == 3


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": "Bearer"},
    {"Authorization": ADMIN["Authorization"].replace("Bearer", "Basic")},
    {"Authorization": ADMIN["Authorization"] + "x"},
    {"Authorization": ADMIN["Authorization"][:-1]},
])
def test_admin_unauthenticated(client, headers, rds, prefix):
    aid = new_id()
    body = {"id": aid, "name": "x", "total": 1, "starts_at": iso(-10), "ends_at": iso(100)}
    expect(client.post("/admin/activities", json=body, headers=headers), 401, "unauthenticated")
    expect(client.get(f"/admin/activities/{aid}/stats", headers=headers), 401, "unauthenticated")
    assert keys_of(rds, prefix) == set()


def test_admin_refuses_a_user_jwt(client):
    expect(client.get("/admin/activities/x/stats", headers=user_headers("alice")), 401,
           "unauthenticated")


def test_stats(client, make_activity):
    activity = make_activity(total=5, per_user_limit=2)
    expect(buy(client, activity["id"], "alice", {"quantity": 2}), 200)
    expect(buy(client, activity["id"], "bob"), 200)
    stats = expect(client.get(f"/admin/activities/{activity['id']}/stats", headers=ADMIN), 200)
    assert stats == {
        "total": 5, "remaining": 2, "sold": 3, "buyers": 2,
        "orders": {"pending": 2, "confirmed": 0, "cancelled": 0},
    }


def test_stats_unknown_activity(client):
    expect(client.get("/admin/activities/nosuch/stats", headers=ADMIN), 404, "unknown_activity")
    expect(client.get("/admin/activities/bad%7Bid%7D/stats", headers=ADMIN), 404,
           "unknown_activity")
