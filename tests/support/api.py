"""The gateway's HTTP API through a Flask test client, as the tests call it: an activity made
by the operator, a purchase through a signed URL, a buyer's order, the operator's numbers, and
:func:`expect`, the contract's check of an answer (status, JSON, error body)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, cast

from flask import Flask
from flask.testing import FlaskClient

from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers


def expect(response: Any, status: int, error: str | None = None) -> dict[str, Any]:
    """Assert the status, a JSON Content-Type and (for failures) the contract's error body."""
    assert response.status_code == status, (response.status_code, response.get_data()[:300])
    assert response.mimetype == "application/json", response.headers
    body = response.get_json()
    assert isinstance(body, dict), body
    if error is None:
        assert "error" not in body, body
    else:
        assert body["error"] == error, body
        assert isinstance(body["message"], str) and body["message"], body
    return body


def create_activity(client: FlaskClient, **fields: Any) -> dict[str, Any]:
    """Create an activity through the operator API with ``client``; open now, for an hour,
    unless told (the ``make_activity`` fixture does this with the ``client`` fixture)."""
    body: dict[str, Any] = {
        "id": f"a{uuid.uuid4().hex[:10]}",
        "name": "Test phone",
        "total": 10,
        "starts_at": iso(-60),
        "ends_at": iso(3600),
    }
    body.update(fields)
    if body.get("kind") == "packets" and "total" not in fields:
        del body["total"]  # packets have amount and count
    response = client.post("/admin/activities", json=body, headers=ADMIN)
    assert response.status_code == 201, response.get_json()
    created: dict[str, Any] = response.get_json()
    return created


def buy(client: FlaskClient, aid: str, uid: str, body: Any = None) -> Any:
    """Fetch a signed URL for ``uid`` and purchase through it; returns the purchase response,
    or the URL request's response when no URL was issued (e.g. 410 sold_out)."""
    headers = user_headers(uid)
    got = client.get(f"/seckill/url?activity={aid}", headers=headers)
    if got.status_code != 200:
        return got
    if body is None:
        return client.post(got.get_json()["url"], headers=headers)
    return client.post(got.get_json()["url"], headers=headers, json=body)


def keep_buying(app: Flask, aid: str, uid: str, start: threading.Event,
                returns_done: threading.Event) -> Any:
    """A newcomer racing cancellations: from ``start``, keep trying while they may still free
    a unit, one last try once ``returns_done`` (15 s at most); the last purchase response."""
    start.wait(10)
    own = app.test_client()
    deadline = time.monotonic() + 15
    while True:
        last_round = returns_done.is_set()
        response = buy(own, aid, uid)
        if response.status_code == 200 or last_round or time.monotonic() > deadline:
            return response
        time.sleep(0.005)


def order_status(client: FlaskClient, aid: str, uid: str) -> dict[str, Any]:
    """``GET /seckill/<aid>/order`` for ``uid``: must answer 200."""
    return expect(client.get(f"/seckill/{aid}/order", headers=user_headers(uid)), 200)


def activity_stats(client: FlaskClient, aid: str) -> dict[str, Any]:
    """The operator's ``GET /admin/activities/<aid>/stats``: must answer 200."""
    return expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)


def buy_ok(client: FlaskClient, aid: str, uid: str) -> str:
    """Buy through a signed URL, which must answer 200; returns the order id."""
    response = buy(client, aid, uid)
    assert response.status_code == 200, response.get_json()
    return cast(str, response.get_json()["order_id"])
