"""The two hot routes (``seckill/web/hot.py``) through HTTP: the usual requests and the
unusual ones (chunked bodies, queries that need decoding, other methods, odd paths), each
answered as the contract says, by the one implementation of each route."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import Client

from edge.identity import mint_user_token
from tests.support.api import create_activity, expect
from tests.support.timing import iso
from tests.support.tokens import JWT_SECRET, user_headers


class Hot:
    """An app on a test's Valkey, its operator client, and a way to send each hot route."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.http = app.test_client()  # through the whole WSGI stack, hot routes first
        self.signer = app.extensions["edge.PurchaseUrls"].signer
        self.aid = ""

    def activity(self, **fields: Any) -> str:
        self.aid = create_activity(self.http, **fields)["id"]
        return self.aid

    def buy(self, uid: str | None, *, token: str | None = None, aid: str | None = None,
            headers: dict[str, str] | None = None, **options: Any) -> Any:
        aid = self.aid if aid is None else aid
        token = self.signer.sign(aid, uid or "nobody")[0] if token is None else token
        sent = {**(user_headers(uid) if uid else {}), **(headers or {})}
        return self.http.post(f"/seckill/{aid}/{token}/buy", headers=sent, **options)

    def url(self, uid: str | None, query: str | None = None, method: str = "GET") -> Any:
        query = f"activity={self.aid}" if query is None else query
        return self.http.open(f"/seckill/url?{query}", method=method,
                              headers=user_headers(uid) if uid else {})


@pytest.fixture
def hot(make_app: Callable[..., Flask]) -> Hot:
    return Hot(make_app(SECKILL_USER_RATE="1000/second;3/hour"))


def test_the_hot_routes_are_not_flask_routes(hot: Hot) -> None:
    """One implementation per route: Flask's URL map does not know the hot routes."""
    endpoints = {rule.endpoint for rule in hot.app.url_map.iter_rules()}
    assert not endpoints & {"user.purchase", "user.purchase_url"}
    assert {"user.order_status", "activities.create_activity"} <= endpoints


def test_purchases_sold_out_and_repeats(hot: Hot) -> None:
    hot.activity(total=2, per_user_limit=2)
    first = expect(hot.buy("ann"), 200)
    assert first == {"status": "ok", "order_id": first["order_id"], "quantity": 1}
    assert first["order_id"].startswith(f"{hot.aid}-")
    repeat = expect(hot.buy("ann"), 409, "already_purchased")
    assert repeat["order_id"] == first["order_id"]
    expect(hot.buy("bob", json={"quantity": 2}), 409, "insufficient_stock")
    expect(hot.buy("bob"), 200)
    expect(hot.buy("cat"), 410, "sold_out")  # the script says so ...
    expect(hot.buy("dan"), 410, "sold_out")  # ... then the in-process flag
    expect(hot.buy("bob"), 409, "already_purchased")  # a winner, from the flag


def test_every_answer_carries_the_instance_and_outcome_headers(hot: Hot) -> None:
    hot.activity(total=1)
    for response, outcome in ((hot.buy("ann"), "ok"), (hot.buy("bob"), "sold_out"),
                              (hot.url(None), "unauthenticated")):
        assert response.headers["X-Seckill-Outcome"] == outcome
        assert response.headers["X-Seckill-Instance"]
        assert int(response.headers["Content-Length"]) == len(response.get_data())


def test_refusals_at_the_edge(hot: Hot) -> None:
    hot.activity(total=5)
    expect(hot.buy(None), 401, "unauthenticated")
    expect(hot.buy(None, headers={"Authorization": "Bearer nonsense"}), 401, "unauthenticated")
    expired = mint_user_token("ann", JWT_SECRET, ttl=-100)
    expect(hot.buy(None, headers={"Authorization": f"Bearer {expired}"}), 401,
           "unauthenticated")
    expect(hot.buy("ann", token="1.2.3"), 403, "bad_signature")
    stolen = hot.signer.sign(hot.aid, "bob")[0]  # a URL signed for someone else
    expect(hot.buy("ann", token=stolen), 403, "bad_signature")
    expect(hot.buy("ann", aid="no-such-thing"), 404, "unknown_activity")
    expect(hot.buy("ann", aid="caf\u00e9"), 404, "unknown_activity")
    expect(hot.buy("ann", data=b"x" * 5000), 413, "too_large")
    expect(hot.buy("ann", data=b"{not json"), 400, "bad_request")
    expect(hot.buy("ann", json={"quantity": 0}), 400, "bad_request")
    assert expect(hot.buy("ann", json={"quantity": 1, "colour": "red"}), 400,
                  "bad_request")["fields"] == ["colour"]
    expect(hot.buy("ann", json=[1]), 400, "bad_request")


def test_the_per_user_limit_and_its_retry_after(hot: Hot) -> None:
    hot.activity(total=50, per_user_limit=1)
    answers = [hot.buy("ann").status_code for _ in range(4)]
    assert answers == [200, 409, 409, 429]
    limited = hot.buy("ann")
    assert expect(limited, 429, "rate_limited")["retry_after"] >= 1
    assert int(limited.headers["Retry-After"]) >= 1


def test_the_sale_window(hot: Hot) -> None:
    hot.activity(starts_at=iso(3600), ends_at=iso(7200))
    early = expect(hot.buy("ann"), 403, "not_started")
    assert early["now_ms"] > 0 and early["starts_at"]
    hot.activity(starts_at=iso(-60), ends_at=iso(1))
    time.sleep(1.2)  # an activity cannot be created already ended
    expect(hot.buy("ann"), 410, "ended")


def test_a_chunked_body_is_read_and_bought(hot: Hot) -> None:
    """A chunked body, as gunicorn hands it over (it ends the stream: wsgi.input_terminated)."""
    hot.activity(total=5, per_user_limit=2)
    chunked = {"Transfer-Encoding": "chunked"}
    bought = expect(hot.buy("ann", headers=chunked, data=b'{"quantity": 2}',
                            environ_overrides={"wsgi.input_terminated": True}), 200)
    assert bought["quantity"] == 2


def test_when_redis_is_away_the_purchase_answers_503(make_app: Callable[..., Flask]) -> None:
    away = Hot(make_app(REDIS_URL="redis://127.0.0.1:1/0", SECKILL_REDIS_TIMEOUT="0.2"))
    away.aid = "somewhere"
    expect(away.buy("ann"), 503, "unavailable")
    expect(away.url("ann"), 503, "unavailable")


def test_other_methods_and_paths(hot: Hot) -> None:
    hot.activity(total=5)
    token = hot.signer.sign(hot.aid, "ann")[0]
    wrong = hot.http.get(f"/seckill/{hot.aid}/{token}/buy", headers=user_headers("ann"))
    expect(wrong, 405, "method_not_allowed")
    assert wrong.headers["Allow"] == "POST"
    for method in ("PUT", "OPTIONS", "DELETE"):
        refused = hot.url("ann", method=method)
        expect(refused, 405, "method_not_allowed")
        assert refused.headers["Allow"] == "GET, HEAD"
    expect(hot.http.post(f"/seckill/{hot.aid}/{token}/buy/"), 404, "not_found")
    assert hot.http.post(f"/seckill//{token}/buy").status_code == 404
    expect(hot.http.post(f"/seckill/{hot.aid}/{token}/x/buy"), 404, "not_found")
    uid = f"u{uuid.uuid4().hex[:6]}"
    expect(hot.buy(uid), 200)


def test_a_head_request_for_a_url_has_its_headers_and_no_body(hot: Hot) -> None:
    hot.activity(total=5)
    response = hot.url("ann", method="HEAD")
    assert response.status_code == 200
    assert response.get_data() == b""
    assert int(response.headers["Content-Length"]) > 0


def test_url_issuance(hot: Hot) -> None:
    hot.activity(total=1)
    issued = expect(hot.url("ann"), 200)
    assert issued["url"].startswith(f"/seckill/{hot.aid}/") and issued["url"].endswith("/buy")
    assert issued["expires_at"] > time.time()
    expect(hot.url(None), 401, "unauthenticated")
    expect(hot.url("ann", "activity=no-such-thing"), 404, "unknown_activity")
    # Queries that need decoding, or hold more than the activity, read as Flask reads them.
    expect(hot.url("ann", ""), 400, "bad_request")
    expect(hot.url("ann", "activity="), 400, "bad_request")
    expect(hot.url("ann", "activity=caf%C3%A9"), 404, "unknown_activity")
    expect(hot.url("ann", "activity=x&activity=y"), 404, "unknown_activity")
    assert expect(hot.url("ann", f"other=1&activity={hot.aid}"), 200)["url"].startswith(
        f"/seckill/{hot.aid}/")
    encoded = "".join(f"%{ord(c):02X}" for c in hot.aid)
    assert expect(hot.url("eve", f"activity={encoded}"), 200)["url"].startswith(
        f"/seckill/{hot.aid}/")
    for _ in range(3):  # 3/hour: the 4th URL request of a user is refused
        expect(hot.url("bob"), 200)
    expect(hot.url("bob"), 429, "rate_limited")
    expect(hot.buy("cat"), 200)  # the last unit goes ...
    expect(hot.url("dan"), 410, "sold_out")  # ... and no more URLs are issued


def test_url_issuance_outside_the_window(hot: Hot) -> None:
    hot.activity(starts_at=iso(3600), ends_at=iso(7200))
    expect(hot.url("ann"), 403, "not_started")


def test_the_raw_wsgi_status_lines_are_werkzeugs(hot: Hot) -> None:
    """The hot routes write the same status lines as Flask ("410 GONE")."""
    hot.activity(total=1)
    raw = Client(hot.app)
    expect(hot.buy("ann"), 200)
    token = hot.signer.sign(hot.aid, "bob")[0]
    response = raw.post(f"/seckill/{hot.aid}/{token}/buy", headers=user_headers("bob"))
    assert response.status == "410 GONE"
