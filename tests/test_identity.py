"""Identity: user JWTs (HS256 only, exp and sub required, sub a valid user id) and the
operator token. Pure checks of ``edge.identity`` and the same tokens over HTTP."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest

from edge.identity import Identity, bearer, mint_user_token, user_from_jwt
from seckill.domain import errors
from tests.support.api import expect
from tests.support.tokens import ADMIN, ADMIN_TOKEN, JWT_SECRET, user_headers


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], claims: dict[str, Any], key: bytes | None,
              digest: Any = hashlib.sha256) -> str:
    """A JWT built by hand, so that nothing a library refuses to produce is out of reach."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    if key is None:
        return signing_input + "."
    tag = hmac.new(key, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64(tag)}"


def claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"sub": "alice", "iat": now, "exp": now + 600}
    base.update(extra)
    return {k: v for k, v in base.items() if v is not ...}


def hs256(payload: dict[str, Any], secret: str = JWT_SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def tampered_payload() -> str:
    header, _, signature = hs256(claims()).split(".")
    forged = b64(json.dumps(claims(sub="mallory")).encode())
    return f"{header}.{forged}.{signature}"


SECRET = JWT_SECRET.encode()
NOW = int(time.time())

BAD_TOKENS: list[tuple[str, str]] = [
    ("garbage", "abc"),
    ("three garbage parts", "a.b.c"),
    ("empty parts", ".."),
    ("wrong key", hs256(claims(), "another-secret-0123456789abcdef0123456789")),
    ("expired", hs256(claims(iat=NOW - 3600, exp=NOW - 60))),
    ("no exp", hs256(claims(exp=...))),
    ("exp not a number", hand_made({"alg": "HS256", "typ": "JWT"},
                                   claims(exp="soon"), SECRET)),
    # Claims are strictly typed: PyJWT reads a numeric string with int() and would accept it.
    ("exp a numeric string", hand_made({"alg": "HS256", "typ": "JWT"},
                                       claims(exp=str(NOW + 600)), SECRET)),
    ("exp a boolean", hand_made({"alg": "HS256", "typ": "JWT"}, claims(exp=True), SECRET)),
    ("exp a list", hand_made({"alg": "HS256", "typ": "JWT"}, claims(exp=[NOW + 600]), SECRET)),
    ("exp huge", hand_made({"alg": "HS256", "typ": "JWT"}, claims(exp=10**400), SECRET)),
    ("exp infinite", hand_made({"alg": "HS256", "typ": "JWT"}, claims(exp=1e400), SECRET)),
    ("nbf a numeric string", hand_made({"alg": "HS256", "typ": "JWT"},
                                       claims(nbf=str(NOW - 60)), SECRET)),
    ("iat a numeric string", hand_made({"alg": "HS256", "typ": "JWT"},
                                       claims(iat=str(NOW)), SECRET)),
    ("iat an object", hand_made({"alg": "HS256", "typ": "JWT"}, claims(iat={"n": 1}), SECRET)),
    ("nbf null", hand_made({"alg": "HS256", "typ": "JWT"}, claims(nbf=None), SECRET)),
    ("no sub", hs256(claims(sub=...))),
    ("sub empty", hand_made({"alg": "HS256", "typ": "JWT"}, claims(sub=""), SECRET)),
    ("sub a number", hand_made({"alg": "HS256", "typ": "JWT"}, claims(sub=42), SECRET)),
    ("sub a list", hand_made({"alg": "HS256", "typ": "JWT"}, claims(sub=["alice"]), SECRET)),
    ("sub with space", hs256(claims(sub="al ice"))),
    ("sub with |", hs256(claims(sub="alice|bob"))),
    ("sub with :", hs256(claims(sub="alice:bob"))),
    ("sub with /", hs256(claims(sub="alice/bob"))),
    ("sub with braces", hs256(claims(sub="{alice}"))),
    ("sub with newline", hs256(claims(sub="alice\n"))),
    ("sub non-ascii", hs256(claims(sub="al\u00efce"))),
    ("sub 65 chars", hs256(claims(sub="a" * 65))),
    ("sub 1000 chars", hs256(claims(sub="a" * 1000))),
    ("not yet valid", hs256(claims(nbf=NOW + 3600))),
    ("alg none", hand_made({"alg": "none", "typ": "JWT"}, claims(), None)),
    ("alg None", hand_made({"alg": "None", "typ": "JWT"}, claims(), None)),
    ("alg none with a tag", hand_made({"alg": "none", "typ": "JWT"}, claims(), SECRET)),
    ("no alg", hand_made({"typ": "JWT"}, claims(), SECRET)),
    # Genuine HS512/HS384 tokens under the right key (built by hand: PyJWT warns about the key
    # length for those algorithms, and pytest turns warnings into errors).
    ("HS512, right key", hand_made({"alg": "HS512", "typ": "JWT"}, claims(), SECRET,
                                   hashlib.sha512)),
    ("HS384, right key", hand_made({"alg": "HS384", "typ": "JWT"}, claims(), SECRET,
                                   hashlib.sha384)),
    ("RS256 header, HMAC tag", hand_made({"alg": "RS256", "typ": "JWT"}, claims(), SECRET)),
    ("HS256 header, HS512 tag", hand_made({"alg": "HS256", "typ": "JWT"}, claims(), SECRET,
                                          hashlib.sha512)),
    ("tampered payload", tampered_payload()),
    ("truncated signature", hs256(claims())[:-3]),
    ("too long", hs256(claims(pad="x" * 5000))),
]


@pytest.mark.parametrize(("case", "token"), BAD_TOKENS, ids=[c for c, _ in BAD_TOKENS])
def test_bad_tokens_are_refused(case, token):
    with pytest.raises(errors.Unauthenticated):
        user_from_jwt(token, JWT_SECRET)


def test_library_alg_none_token_is_refused():
    token = jwt.encode(claims(), "", algorithm="none")  # "": no key, as alg none wants
    with pytest.raises(errors.Unauthenticated):
        user_from_jwt(token, JWT_SECRET)


@pytest.mark.parametrize("uid", ["alice", "a", "A.b@c-d_9", "x" * 64, "user@example.com"])
def test_valid_tokens_give_their_sub(uid):
    assert user_from_jwt(hs256(claims(sub=uid)), JWT_SECRET) == uid
    assert user_from_jwt(mint_user_token(uid, JWT_SECRET), JWT_SECRET) == uid


def test_expiry_leeway_is_the_clock_skew_and_no_more():
    now = int(time.time())
    token = hs256(claims(iat=now - 100, exp=now - 2))
    assert user_from_jwt(token, JWT_SECRET, leeway=5) == "alice"
    with pytest.raises(errors.Unauthenticated):
        user_from_jwt(token, JWT_SECRET, leeway=0)
    stale = hs256(claims(iat=now - 100, exp=now - 30))
    with pytest.raises(errors.Unauthenticated):
        user_from_jwt(stale, JWT_SECRET, leeway=5)


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", "Bearer    ", "Basic dXNlcjpwYXNz", "Token abc", "abc",
    "Bearerabc",
])
def test_bearer_refuses_malformed_headers(header):
    with pytest.raises(errors.Unauthenticated):
        bearer(header)


def test_bearer_extracts_the_token():
    assert bearer("Bearer abc.def") == "abc.def"
    assert bearer("bearer abc.def") == "abc.def"  # the scheme is case-insensitive (RFC 7235)


# --- over HTTP --------------------------------------------------------------------------------


def user_paths(aid: str) -> list[tuple[str, str]]:
    return [("GET", f"/seckill/url?activity={aid}"), ("GET", f"/seckill/{aid}/order")]


@pytest.mark.parametrize(("case", "token"), BAD_TOKENS, ids=[c for c, _ in BAD_TOKENS])
def test_bad_tokens_get_401_over_http(client, make_activity, case, token):
    activity = make_activity()
    headers = {"Authorization": f"Bearer {token}"}
    for method, path in user_paths(activity["id"]):
        expect(client.open(path, method=method, headers=headers), 401, "unauthenticated")
    # The purchase needs a user before anything else, even with a genuine URL for alice.
    url = expect(client.get(f"/seckill/url?activity={activity['id']}",
                            headers=user_headers("alice")), 200)["url"]
    expect(client.post(url, headers=headers), 401, "unauthenticated")
    assert expect(client.post(url, headers=user_headers("alice")), 200)["status"] == "ok"


@pytest.mark.parametrize("header", [
    "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token {token}", "{token}", "Bearer{token}",
    "Bearer {token} extra", f"Bearer {ADMIN_TOKEN}",
])
def test_malformed_authorization_headers_over_http(client, make_activity, header):
    activity = make_activity()
    value = header.format(token=mint_user_token("alice", JWT_SECRET))
    for method, path in user_paths(activity["id"]):
        expect(client.open(path, method=method, headers={"Authorization": value}), 401,
               "unauthenticated")


def test_missing_authorization_over_http(client, make_activity):
    activity = make_activity()
    for method, path in user_paths(activity["id"]):
        expect(client.open(path, method=method), 401, "unauthenticated")


def test_unauthenticated_comes_before_unknown_activity(client):
    """Identity is the first check: an anonymous caller learns nothing about activities."""
    expect(client.get("/seckill/url?activity=nosuch"), 401, "unauthenticated")
    expect(client.post("/seckill/nosuch/1.2.3/buy"), 401, "unauthenticated")


def test_lowercase_scheme_and_boundary_sub_are_accepted(client, make_activity):
    activity = make_activity()
    uid = "u" * 64
    token = mint_user_token(uid, JWT_SECRET)
    body = expect(client.get(f"/seckill/{activity['id']}/order",
                             headers={"Authorization": f"bearer {token}"}), 200)
    assert body == {"status": "none"}


def test_operator_token(client):
    expect(client.get("/admin/activities/nosuch/stats", headers=ADMIN), 404, "unknown_activity")
    for value in (None, "", "Bearer", f"Bearer {ADMIN_TOKEN} ", f"Basic {ADMIN_TOKEN}",
                  f"Bearer {ADMIN_TOKEN.upper()}", f"Bearer {ADMIN_TOKEN}0",
                  f"Bearer {mint_user_token('admin', JWT_SECRET)}"):
        headers = {} if value is None else {"Authorization": value}
        response = client.get("/admin/activities/nosuch/stats", headers=headers)
        if value == f"Bearer {ADMIN_TOKEN} ":
            # Surrounding whitespace is not part of the token; HTTP strips it anyway.
            expect(response, 404, "unknown_activity")
        else:
            expect(response, 401, "unauthenticated")


def test_the_last_half_of_the_remembered_tokens_are_always_remembered():
    """The memory of verified tokens is bounded by dropping its older half, never all of it:
    a buyer's purchase right after their URL finds the token whatever the crowd between."""
    identity = Identity(JWT_SECRET, ADMIN_TOKEN, leeway=0)
    identity.MAX_REMEMBERED = 4  # two generations of two
    tokens = [mint_user_token(f"u{n}", JWT_SECRET) for n in range(5)]
    for token in tokens:
        identity.verified(token)
    # A remembered token is not verified again: under another secret only those still verify.
    identity.jwt_secret = "another-secret-0123456789abcdef0123456789"
    assert identity.user(tokens[-1]) == "u4" and identity.user(tokens[-2]) == "u3"
    with pytest.raises(errors.Unauthenticated):
        identity.user(tokens[0])
