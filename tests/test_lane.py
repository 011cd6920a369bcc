"""The purchase lane (``seckill/lane.py``) answers exactly as the Flask route would.

Two activities are set up alike; the same requests go to one through the lane (the app as
gunicorn calls it) and to the other through Flask alone (the WSGI app the lane wraps), and
the answers must match byte for byte once the activity id, order ids and clock readings are
normalised. A counter on the lane's way into Flask proves the lane answered them itself.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import pytest
from flask import Flask
from werkzeug.test import Client

from edge.identity import mint_user_token
from seckill.web.hot import PurchaseLane
from tests.conftest import JWT_SECRET, create_activity, iso, user_headers


class Counted:
    """A WSGI app that counts its calls (the lane's way into Flask)."""

    def __init__(self, inner: Callable[..., Iterable[bytes]]) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.calls += 1
        return self.inner(environ, start_response)


class Pair:
    def __init__(self, app: Flask) -> None:
        lane = app.wsgi_app
        assert isinstance(lane, PurchaseLane)
        self.flask_only = Client(lane.flask_app)
        self.into_flask = Counted(lane.flask_app)
        lane.flask_app = self.into_flask
        self.laned = Client(app)
        self.admin = app.test_client()
        self.signer = app.extensions["seckill"].signer
        self.aids: dict[str, str] = {}  # side -> activity id

    def activities(self, **fields: Any) -> None:
        for side in ("lane", "flask"):
            self.aids[side] = create_activity(self.admin, **fields)["id"]

    def send(self, side: str, uid: str | None, *, token: str | None = None,
             headers: dict[str, str] | None = None, aid: str | None = None,
             **options: Any) -> tuple[str, list[tuple[str, str]], Any]:
        client = self.laned if side == "lane" else self.flask_only
        aid = aid if aid is not None else self.aids[side]
        if token is None:
            token = self.signer.sign(aid, uid or "nobody")[0]
        all_headers = dict(user_headers(uid)) if uid else {}
        all_headers.update(headers or {})
        response = client.post(f"/seckill/{aid}/{token}/buy", headers=all_headers, **options)
        return self.answer(side, response)

    def send_url(self, side: str, uid: str | None, query: str | None,
                 headers: dict[str, str] | None = None) -> tuple[str, list[tuple[str, str]], Any]:
        client = self.laned if side == "lane" else self.flask_only
        query = f"activity={self.aids[side]}" if query is None else query
        all_headers = dict(user_headers(f"{uid}-{side}")) if uid else {}  # own rate counters
        all_headers.update(headers or {})
        response = client.get(f"/seckill/url?{query}", headers=all_headers)
        return self.answer(side, response)

    def answer(self, side: str, response: Any) -> tuple[str, list[tuple[str, str]], Any]:
        """Status line, headers and body, with what differs between the sides by nature
        (activity ids, signed tokens, order ids, clock readings) put in words."""
        text = response.get_data(as_text=True)
        for name, value in self.aids.items():
            text = text.replace(value, f"<aid:{name == side}>")
        text = re.sub(r"/[0-9]+\.[0-9a-f]+\.[A-Za-z0-9_-]+/buy", "/<token>/buy", text)
        text = re.sub(r"-\d{13}-\d+", "-<ms>-<seq>", text)  # order ids
        text = re.sub(r'"(expires_at|now_ms)":\d+', r'"\1":0', text)  # the clock
        listed = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return response.status, listed, orjson.loads(text) if text else text

    def same_url(self, uid: str | None, query: str | None = None, *, flask: bool = False,
                 headers: dict[str, str] | None = None) -> tuple[str, Any]:
        """GET /seckill/url both ways; ``flask``: the lane is expected to pass it on."""
        before = self.into_flask.calls
        laned = self.send_url("lane", uid, query, headers)
        assert self.into_flask.calls == before + (1 if flask else 0)
        plain = self.send_url("flask", uid, query, headers)
        assert laned == plain
        return laned[0], laned[2]

    def same(self, uid: str | None, **options: Any) -> tuple[str, Any]:
        before = self.into_flask.calls
        laned = self.send("lane", uid, **options)
        if options.get("headers", {}).get("Transfer-Encoding") is None:
            assert self.into_flask.calls == before, "the lane passed this request to Flask"
        plain = self.send("flask", uid, **options)
        assert laned == plain
        return laned[0], laned[2]


@pytest.fixture
def pair(make_app: Callable[..., Flask]) -> Pair:
    return Pair(make_app(SECKILL_USER_RATE="1000/second;3/hour"))


def test_purchases_sold_out_and_repeats_answer_alike(pair: Pair) -> None:
    pair.activities(total=2, per_user_limit=2)
    assert pair.same("ann") == ("200 OK", {"status": "ok", "order_id": "<aid:True>-<ms>-<seq>",
                                           "quantity": 1})
    status, body = pair.same("ann")
    assert (status, body["error"]) == ("409 CONFLICT", "already_purchased")
    assert pair.same("bob", json={"quantity": 2})[1]["error"] == "insufficient_stock"
    assert pair.same("bob")[0] == "200 OK"
    assert pair.same("cat")[1]["error"] == "sold_out"  # the script says so ...
    assert pair.same("dan")[1]["error"] == "sold_out"  # ... then the in-process flag
    assert pair.same("bob")[1]["error"] == "already_purchased"  # a winner, from the flag


def test_refusals_at_the_edge_answer_alike(pair: Pair) -> None:
    pair.activities(total=5)
    assert pair.same(None)[1]["error"] == "unauthenticated"
    assert pair.same(None, headers={"Authorization": "Bearer nonsense"})[0] == "401 UNAUTHORIZED"
    expired = mint_user_token("ann", JWT_SECRET, ttl=-100)
    assert pair.same(None, headers={"Authorization": f"Bearer {expired}"})[0] == "401 UNAUTHORIZED"
    assert pair.same("ann", token="1.2.3")[1]["error"] == "bad_signature"
    for side in ("lane", "flask"):  # a URL signed for someone else
        stolen = pair.signer.sign(pair.aids[side], "bob")[0]
        assert pair.send(side, "ann", token=stolen)[0] == "403 FORBIDDEN"
    assert pair.same("ann", aid="no-such-thing")[1]["error"] == "unknown_activity"
    assert pair.same("ann", aid="caf\u00e9")[1]["error"] == "unknown_activity"
    assert pair.same("ann", data=b"x" * 5000)[1]["error"] == "too_large"
    assert pair.same("ann", data=b"{not json")[1]["error"] == "bad_request"
    assert pair.same("ann", json={"quantity": 0})[1]["error"] == "bad_request"
    assert pair.same("ann", json={"quantity": 1, "colour": "red"})[1]["fields"] == ["colour"]
    assert pair.same("ann", json=[1])[1]["error"] == "bad_request"


def test_the_per_user_limit_and_its_retry_after_answer_alike(pair: Pair) -> None:
    pair.activities(total=50, per_user_limit=1)
    answers = [pair.same("ann")[0] for _ in range(4)]
    assert answers == ["200 OK", "409 CONFLICT", "409 CONFLICT", "429 TOO MANY REQUESTS"]


def test_the_sale_window_answers_alike(pair: Pair) -> None:
    pair.activities(starts_at=iso(3600), ends_at=iso(7200))
    status, body = pair.same("ann")
    assert (status, body["error"], body["now_ms"]) == ("403 FORBIDDEN", "not_started", 0)
    pair.activities(starts_at=iso(-60), ends_at=iso(1))
    time.sleep(1.2)  # an activity cannot be created already ended
    assert pair.same("ann")[1]["error"] == "ended"


def test_a_chunked_body_goes_to_flask_and_is_answered_alike(pair: Pair) -> None:
    pair.activities(total=5)
    before = pair.into_flask.calls
    chunked = {"Transfer-Encoding": "chunked"}
    assert pair.same("ann", headers=chunked, data=b'{"quantity": 1}')[0] == "200 OK"
    assert pair.into_flask.calls == before + 1


def test_when_redis_is_away_both_answer_503(make_app: Callable[..., Flask]) -> None:
    pair = Pair(make_app(REDIS_URL="redis://127.0.0.1:1/0", SECKILL_REDIS_TIMEOUT="0.2"))
    pair.aids = {"lane": "somewhere", "flask": "somewhere"}
    status, body = pair.same("ann")
    assert (status, body["error"]) == ("503 SERVICE UNAVAILABLE", "unavailable")


def test_other_methods_and_paths_are_flasks(pair: Pair) -> None:
    pair.activities(total=5)
    aid = pair.aids["lane"]
    token = pair.signer.sign(aid, "ann")[0]
    before = pair.into_flask.calls
    assert pair.laned.get(f"/seckill/{aid}/{token}/buy").status_code == 405
    assert pair.laned.post(f"/seckill/{aid}/{token}/buy/").status_code == 404
    assert pair.laned.post(f"/seckill//{token}/buy").status_code in (308, 404)
    assert pair.into_flask.calls == before + 3
    uid = f"u{uuid.uuid4().hex[:6]}"
    assert pair.laned.post(f"/seckill/{aid}/{pair.signer.sign(aid, uid)[0]}/buy",
                           headers=user_headers(uid)).status_code == 200
    assert pair.into_flask.calls == before + 3


def test_url_issuance_answers_alike(pair: Pair) -> None:
    pair.activities(total=1)
    status, body = pair.same_url("ann")
    assert (status, body) == ("200 OK", {"url": "/seckill/<aid:True>/<token>/buy",
                                         "expires_at": 0})
    assert pair.same_url(None)[1]["error"] == "unauthenticated"
    assert pair.same_url("ann", "activity=no-such-thing")[1]["error"] == "unknown_activity"
    # Queries that need decoding, or are not just the activity, are Flask's.
    assert pair.same_url("ann", "", flask=True)[1]["error"] == "bad_request"
    assert pair.same_url("ann", "activity=", flask=True)[1]["error"] == "bad_request"
    assert pair.same_url("ann", "activity=caf%C3%A9", flask=True)[1]["error"] == (
        "unknown_activity")
    assert pair.same_url("ann", "activity=x&activity=y", flask=True)[1]["error"] == (
        "unknown_activity")
    for _ in range(3):  # 3/hour: the 4th URL request of a user is refused
        assert pair.same_url("bob")[0] == "200 OK"
    status, body = pair.same_url("bob")
    assert (status, body["error"]) == ("429 TOO MANY REQUESTS", "rate_limited")
    assert pair.same("cat")[0] == "200 OK"  # the last unit goes ...
    assert pair.same_url("dan")[1]["error"] == "sold_out"  # ... and no more URLs are issued


def test_url_issuance_outside_the_window_answers_alike(pair: Pair) -> None:
    pair.activities(starts_at=iso(3600), ends_at=iso(7200))
    status, body = pair.same_url("ann")
    assert (status, body["error"], body["now_ms"]) == ("403 FORBIDDEN", "not_started", 0)
