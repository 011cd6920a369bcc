"""The per-user rate limit (``limits`` on the real Valkey), keyed by the authenticated user,
on ``GET /seckill/url`` and the purchase; JSON 429 with Retry-After; fail-open when its Redis
is gone, counted in ``seckill_ratelimit_failures_total``."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from prometheus_client import REGISTRY

import edge
from edge.identity import mint_user_token
from seckill.web import hot
from tests.support.api import create_activity, expect
from tests.support.tokens import JWT_SECRET, METRICS, user_headers


@pytest.fixture
def limited(make_app) -> Flask:
    app: Flask = make_app(SECKILL_USER_RATE="3/minute")
    return app


def assert_rate_limited(response: Any) -> int:
    body = expect(response, 429, "rate_limited")
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert body["retry_after"] == retry_after
    assert response.headers["X-Seckill-Outcome"] == "rate_limited"
    return retry_after


def test_fourth_url_request_is_429(limited):
    client = limited.test_client()
    aid = create_activity(client)["id"]
    headers = user_headers("alice")
    for _ in range(3):
        expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}", headers=headers))
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}", headers=headers))


def test_the_limit_is_per_user(limited):
    client = limited.test_client()
    aid = create_activity(client)["id"]
    for _ in range(3):
        expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("alice")), 200)
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}",
                                   headers=user_headers("alice")))
    for _ in range(3):
        expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("bob")), 200)
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}", headers=user_headers("bob")))


def test_the_limit_follows_the_user_not_the_token(limited):
    """Fresh tokens for the same user do not buy fresh allowance."""
    client = limited.test_client()
    aid = create_activity(client)["id"]
    tokens = {mint_user_token("alice", JWT_SECRET, ttl=600 + i) for i in range(4)}
    assert len(tokens) == 4
    answers = [client.get(f"/seckill/url?activity={aid}",
                          headers={"Authorization": f"Bearer {token}"}) for token in tokens]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert_rate_limited(answers[3])


def test_the_purchase_is_limited_too(limited, rds, prefix):
    client = limited.test_client()
    aid = create_activity(client)["id"]
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    order_id = expect(client.post(url, headers=headers), 200)["order_id"]
    for _ in range(2):
        again = expect(client.post(url, headers=headers), 409, "already_purchased")
        assert again["order_id"] == order_id
    assert_rate_limited(client.post(url, headers=headers))
    # The limited repeat never reached the purchase script.
    assert rds.xlen(f"{prefix}:{{{aid}}}:orders") == 1
    # Another user's purchase is unaffected.
    bob = user_headers("bob")
    bob_url = expect(client.get(f"/seckill/url?activity={aid}", headers=bob), 200)["url"]
    expect(client.post(bob_url, headers=bob), 200)


def test_limited_routes_all_authenticate_first(app):
    """A per-user limit needs its user: every route that asks for the rate filter (a Flask
    view or a hot route) also asks for identity. The edge limits URL issuance; the purchase
    is limited inside its script."""
    routes: dict[str, frozenset[str]] = {endpoint: getattr(view, "edge_filters", frozenset())
              for endpoint, view in app.view_functions.items()}
    routes.update({route.endpoint: route.wanted for route in (hot.BUY, hot.URL)})
    limited = set()
    for endpoint, wanted in routes.items():
        if edge.RATE in wanted:
            limited.add(endpoint)
            assert edge.USER in wanted, endpoint
    assert limited == {"user.purchase_url"}
    with pytest.raises(ValueError, match="needs the user filter"):
        edge.filters(edge.RATE)
    with pytest.raises(ValueError, match="needs the user filter"):
        edge.Route("user.something", edge.RATE)


def failures() -> float:
    return REGISTRY.get_sample_value("seckill_ratelimit_failures_total") or 0.0


def test_fails_open_when_its_redis_is_gone(make_app, private_valkey):
    """With the limiter's Redis gone, a user who was rate-limited is let through (fail open) and
    each such request is counted; the purchase itself still fails closed (503)."""
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_USER_RATE="1/minute",
                   SECKILL_META_TTL="300")
    client = app.test_client()
    aid = create_activity(client)["id"]
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}", headers=headers))

    private_valkey.stop()
    before = failures()
    # The sale window is answered from the in-process cache and the URL is signed without
    # Redis, so only the limiter needs Redis here: it fails open.
    body = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    assert body["url"].startswith(f"/seckill/{aid}/")
    assert failures() == before + 1
    # The purchase's own limit is counted by the purchase script: with Redis gone there is no
    # decision at all, and it fails closed.
    expect(client.post(url, headers=headers), 503, "unavailable")
    assert failures() == before + 1
    metrics = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    assert "seckill_ratelimit_failures_total" in metrics


def test_a_limited_view_without_a_user_fails_closed(settings):
    """Wiring mistake: a rate-limited view that never authenticates (marked by hand, since
    ``edge.filters`` refuses it). The limit has no key: the chain answers 500 and never runs
    the view, rather than letting the request through unlimited."""
    from seckill.web.app import create_app

    application = create_app(settings)
    ran: list[bool] = []

    def unauthenticated_view() -> dict[str, Any]:
        ran.append(True)
        return {"ok": True}

    unauthenticated_view.edge_filters = frozenset({edge.RATE})  # type: ignore[attr-defined]
    application.add_url_rule("/test-unauthenticated-limit", view_func=unauthenticated_view)

    response = application.test_client().get("/test-unauthenticated-limit")
    expect(response, 500, "internal")
    assert ran == []
    application.extensions["seckill"].close()


def test_the_purchase_limit_is_counted_in_the_purchase_round_trip(limited, rds, prefix):
    """One EVALSHA per purchase attempt, rate limit included; the counter is the activity's
    (same hash tag) and expires with its window; Retry-After comes from that window."""
    client = limited.test_client()
    aid = create_activity(client)["id"]
    headers = user_headers("carol")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    before = {k: v["calls"] for k, v in rds.info("commandstats").items()}
    expect(client.post(url, headers=headers), 200)
    after = {k: v["calls"] for k, v in rds.info("commandstats").items()}
    assert after["cmdstat_evalsha"] - before["cmdstat_evalsha"] == 1
    counter = f"{prefix}:{{{aid}}}:rate:purchase:carol:60000"
    assert rds.get(counter) == "1"
    assert 0 < rds.pttl(counter) <= 60000
    for _ in range(2):
        expect(client.post(url, headers=headers), 409, "already_purchased")
    retry_after = assert_rate_limited(client.post(url, headers=headers))
    assert retry_after <= 60
    assert rds.get(counter) == "4"


def test_url_requests_are_counted_in_one_round_trip_for_all_rates(make_app, rds, prefix):
    """Two rates, one EVALSHA of lua/rate_limit.lua per URL request; the counters are the
    user's (one hash tag) and per endpoint; after SCRIPT FLUSH the script is loaded again and
    the request is counted once."""
    app = make_app(SECKILL_USER_RATE="50/second;3/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]
    headers = user_headers("dora")
    before = rds.info("commandstats")["cmdstat_evalsha"]["calls"]
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    assert rds.info("commandstats")["cmdstat_evalsha"]["calls"] - before == 1
    minute = f"{prefix}:{{dora}}:rate:user.purchase_url:dora:60000"
    second = f"{prefix}:{{dora}}:rate:user.purchase_url:dora:1000"
    assert (rds.get(minute), rds.get(second)) == ("1", "1")
    assert 59_000 < rds.pttl(minute) <= 60_000
    rds.script_flush()
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    assert rds.get(minute) == "2"
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    assert_rate_limited(client.get(f"/seckill/url?activity={aid}", headers=headers))
    assert rds.get(minute) == "4"
