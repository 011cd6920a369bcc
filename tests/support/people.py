"""Helpers of the limits-per-person suites: tokens that name a person (the
``SECKILL_PERSON_CLAIM`` claim), purchases, order status, joins and person-limited activities
through the gateway."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from edge.identity import mint_user_token
from tests.support.api import create_activity, expect
from tests.support.tokens import JWT_SECRET

CLAIM = "https://shop.example/person"  # the claim SECKILL_PERSON_CLAIM names in these suites
ABSENT = object()


def headers(uid: str, person: Any = ABSENT, **claims: Any) -> dict[str, str]:
    """A user's bearer header; ``person`` (any JSON value, null too) as the person claim when
    given (None from the helpers below: no claim)."""
    if person is not ABSENT:
        claims[CLAIM] = person
    token = mint_user_token(uid, JWT_SECRET, 600, claims=claims)
    return {"Authorization": f"Bearer {token}"}


def buy_as(client: FlaskClient, aid: str, uid: str, person: str | None) -> Any:
    """Fetch a signed URL as ``uid`` (of ``person``) and buy through it; the last response."""
    sent = headers(uid) if person is None else headers(uid, person)
    got = client.get(f"/seckill/url?activity={aid}", headers=sent)
    if got.status_code != 200:
        return got
    return client.post(got.get_json()["url"], headers=sent)


def status_as(client: FlaskClient, aid: str, uid: str, person: str | None) -> dict[str, Any]:
    sent = headers(uid) if person is None else headers(uid, person)
    return expect(client.get(f"/seckill/{aid}/order", headers=sent), 200)


def person_activity(client: FlaskClient, **fields: Any) -> str:
    made = create_activity(client, limit_by="person", **fields)
    assert made["limit_by"] == "person", made
    return str(made["id"])


def join_as(client: FlaskClient, aid: str, uid: str, person: str) -> Any:
    """``POST /seckill/<aid>/queue`` as ``uid``, an account of ``person``."""
    return client.post(f"/seckill/{aid}/queue", json={}, headers=headers(uid, person))
