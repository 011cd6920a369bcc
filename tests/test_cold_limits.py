"""The cold routes' limits (``seckill/web/limits.py``, flask-limiter on the gateway's Redis):
order status per user (``SECKILL_STATUS_RATE``), operator calls (``SECKILL_ADMIN_RATE``)."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask

from tests.support.api import create_activity, expect
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, METRICS, user_headers


def _failures(client) -> float:
    text = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    for line in text.splitlines():
        if line.startswith("seckill_ratelimit_failures_total "):
            return float(line.split()[1])
    return 0.0


def test_order_status_is_limited_per_user(make_app: Callable[..., Flask]) -> None:
    app = make_app(SECKILL_STATUS_RATE="3/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]
    for _ in range(3):
        expect(client.get(f"/seckill/{aid}/order", headers=user_headers("ann")), 200)
    refused = client.get(f"/seckill/{aid}/order", headers=user_headers("ann"))
    body = expect(refused, 429, "rate_limited")
    assert 1 <= body["retry_after"] <= 60
    assert refused.headers["Retry-After"] == str(body["retry_after"])
    assert refused.headers["X-Seckill-Outcome"] == "rate_limited"
    # Another user has a budget of their own; a new token does not buy ann a fresh one.
    expect(client.get(f"/seckill/{aid}/order", headers=user_headers("bob")), 200)
    expect(client.get(f"/seckill/{aid}/order", headers=user_headers("ann", ttl=900)), 429,
           "rate_limited")


def test_an_unauthenticated_caller_is_refused_before_being_counted(
        make_app: Callable[..., Flask]) -> None:
    app = make_app(SECKILL_STATUS_RATE="2/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]
    for _ in range(5):
        expect(client.get(f"/seckill/{aid}/order"), 401, "unauthenticated")
    expect(client.get(f"/seckill/{aid}/order", headers=user_headers("ann")), 200)


def test_operator_calls_are_limited(make_app: Callable[..., Flask]) -> None:
    app = make_app(SECKILL_ADMIN_RATE="4/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]  # 1
    for _ in range(3):  # 2, 3, 4
        expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 429, "rate_limited")
    # A wrong token is refused by the edge first, never counted nor limited.
    expect(client.get(f"/admin/activities/{aid}/stats",
                      headers={"Authorization": "Bearer wrong"}), 401, "unauthenticated")
    # The public routes are not the operator's.
    expect(client.get(f"/seckill/activities/{aid}"), 200)


def test_the_limit_fails_open_when_its_redis_is_away(make_app: Callable[..., Flask]) -> None:
    """No Redis: the limiter lets the request through (counted), and the view answers what it
    answers without Redis: 503 unavailable, not a limiter's 500."""
    app = make_app(REDIS_URL="redis://127.0.0.1:1/0", SECKILL_REDIS_TIMEOUT="0.2",
                   SECKILL_STATUS_RATE="1/minute")
    client = app.test_client()
    before = _failures(client)
    for _ in range(3):
        expect(client.get("/seckill/somewhere/order", headers=user_headers("ann")), 503,
               "unavailable")
    # The body is kept for the metrics interval: the count shows once it is made again.
    wait_until(lambda: _failures(client) - before == 3, 5, what="3 fail-open requests counted")
