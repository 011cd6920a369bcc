"""Buyers' tokens from the shop's identity provider, over HTTP: a gateway verifying against the
keys a real JWKS server publishes (tests/support/jwks_server.py), keys made by the tests.

Each algorithm buys; every bad token is 401 ``unauthenticated`` on the URL, the order status and
the purchase; a flood of made-up kids costs one fetch; keys rotated mid-sale; a restart while the
provider is down; HS256 beside a JWKS. The purchases run on one server and on the cluster."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from flask import Flask
from jwt.algorithms import ECAlgorithm

from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.jwks_server import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    SigningKey,
    hand_made,
    hmac_signer,
    idp_claims,
    issuer_env,
    signer,
)
from tests.support.timing import wait_until
from tests.support.tokens import JWT_SECRET, user_headers

ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")


@pytest.fixture(scope="module")
def keys() -> dict[str, SigningKey]:
    """One key per algorithm, for the module (an RSA key takes a while to make)."""
    return {alg: SigningKey.make(alg) for alg in ALGORITHMS}


@pytest.fixture
def idp(keys: dict[str, SigningKey]) -> Iterator[JwksServer]:
    with JwksServer() as server:
        server.publish(*keys.values())
        yield server


@pytest.fixture
def gateway(make_app: Callable[..., Flask], idp: JwksServer) -> Callable[..., Flask]:
    """A gateway verifying the provider's tokens (and HS256 ones), ``overrides`` added."""

    def make(**overrides: str) -> Flask:
        return make_app(**{**issuer_env(idp.url), **overrides})

    return make


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def purchase(app: Flask, aid: str, token: str) -> dict[str, Any]:
    """A buyer's purchase with ``token``: the URL, then the purchase; the purchase's body."""
    client = app.test_client()
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=bearer(token)), 200)["url"]
    return expect(client.post(url, headers=bearer(token)), 200)


def refused_everywhere(app: Flask, aid: str, token: str, alices: str | None = None) -> None:
    """401 on the URL, the order status and a purchase through a genuine URL for alice (got
    with ``alices``, a token the gateway takes: by default HS256)."""
    client = app.test_client()
    expect(client.get(f"/seckill/url?activity={aid}", headers=bearer(token)), 401,
           "unauthenticated")
    expect(client.get(f"/seckill/{aid}/order", headers=bearer(token)), 401, "unauthenticated")
    genuine = bearer(alices) if alices else user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=genuine), 200)["url"]
    expect(client.post(url, headers=bearer(token)), 401, "unauthenticated")


def status(app: Flask, aid: str, token: str) -> int:
    return int(app.test_client().get(f"/seckill/{aid}/order", headers=bearer(token)).status_code)


# --- each algorithm buys, on one server and on the cluster ----------------------------------


@BOTH_BACKENDS
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_a_token_of_each_algorithm_buys(gateway, make_activity, keys, alg):
    app = gateway()
    aid = make_activity()["id"]
    body = purchase(app, aid, keys[alg].token(idp_claims(f"buyer-{alg}")))
    assert body["status"] == "ok" and body["quantity"] == 1
    order = expect(app.test_client().get(
        f"/seckill/{aid}/order", headers=bearer(keys[alg].token(idp_claims(f"buyer-{alg}")))),
        200)
    assert order["order_id"] == body["order_id"]


# --- every bad token: 401 --------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _rsa_pem(key: SigningKey) -> bytes:
    return key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _tampered(token: str, claims: dict[str, Any]) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


def _rs512(key: SigningKey) -> Callable[[bytes], bytes]:
    return lambda message: key.private.sign(message, padding.PKCS1v15(), hashes.SHA512())


def _stranger(key: SigningKey) -> SigningKey:
    """Another private key under ``key``'s kid: not the key the set holds."""
    return SigningKey(key.kid, key.alg, SigningKey.make(key.alg).private)


Keys = dict[str, SigningKey]
NOW = int(time.time())
# Each case: the token, made from the keys the provider publishes.
BAD_TOKENS: dict[str, Callable[[Keys], str]] = {
    "wrong issuer": lambda k: k["RS256"].token(idp_claims(iss="https://other.example.test/")),
    "issuer without its slash": lambda k: k["RS256"].token(idp_claims(iss=ISSUER.rstrip("/"))),
    "no issuer": lambda k: k["RS256"].token(idp_claims(iss=...)),
    "wrong audience": lambda k: k["RS256"].token(idp_claims(aud="https://shop.example.test/x")),
    "no audience": lambda k: k["RS256"].token(idp_claims(aud=...)),
    "audience list without ours": lambda k: k["RS256"].token(idp_claims(aud=["a", "b"])),
    "expired": lambda k: k["RS256"].token(idp_claims(iat=NOW - 3600, exp=NOW - 60)),
    "not yet valid": lambda k: k["ES256"].token(idp_claims(nbf=NOW + 3600)),
    "no exp": lambda k: k["RS256"].token(idp_claims(exp=...)),
    "exp a numeric string": lambda k: k["RS256"].token(idp_claims(exp=str(NOW + 600))),
    "lives longer than SECKILL_JWT_MAX_TTL": lambda k: k["RS256"].token(
        idp_claims(ttl=31 * 86_400)),
    "no sub": lambda k: k["RS256"].token(idp_claims(sub=...)),
    "sub a number": lambda k: k["RS256"].token(idp_claims(sub=42)),
    "sub an Auth0 user id": lambda k: k["RS256"].token(
        idp_claims(sub="auth0|64f1c2e9a1b2c3d4e5f60718")),
    "sub 65 chars": lambda k: k["RS256"].token(idp_claims(sub="a" * 65)),
    "alg none": lambda k: hand_made({"alg": "none", "kid": k["RS256"].kid}, idp_claims(), None),
    "alg none with RS256's signature": lambda k: hand_made(
        {"alg": "none", "kid": k["RS256"].kid}, idp_claims(), signer(k["RS256"])),
    "HS256 with the RSA public key's PEM as secret": lambda k: hand_made(
        {"alg": "HS256", "kid": k["RS256"].kid}, idp_claims(), hmac_signer(_rsa_pem(k["RS256"]))),
    "HS256 with the JWK's n as secret": lambda k: hand_made(
        {"alg": "HS256", "kid": k["RS256"].kid}, idp_claims(),
        hmac_signer(k["RS256"].jwk()["n"].encode())),
    "RS512, not an accepted algorithm": lambda k: hand_made(
        {"alg": "RS512", "kid": k["RS256"].kid}, idp_claims(), _rs512(k["RS256"])),
    "an RSA key's kid with ES256 in the header": lambda k: hand_made(
        {"alg": "ES256", "kid": k["RS256"].kid}, idp_claims(), signer(k["ES256"])),
    "an EC key's kid with RS256 in the header": lambda k: hand_made(
        {"alg": "RS256", "kid": k["ES256"].kid}, idp_claims(), signer(k["RS256"])),
    "an Ed25519 key's kid with ES256 in the header": lambda k: hand_made(
        {"alg": "ES256", "kid": k["EdDSA"].kid}, idp_claims(), signer(k["ES256"])),
    "signed by a key not in the set, under a kid in it": lambda k: _stranger(k["RS256"]).token(
        idp_claims()),
    "a kid nobody published": lambda k: SigningKey.make("ES256").token(idp_claims()),
    "kid a number": lambda k: hand_made({"alg": "RS256", "kid": 7}, idp_claims(),
                                        signer(k["RS256"])),
    "tampered claims": lambda k: _tampered(k["RS256"].token(idp_claims("alice")),
                                           idp_claims("mallory")),
    "truncated signature": lambda k: k["RS256"].token(idp_claims())[:-4],
    "header nested too deep": lambda k: f"{_b64(b'[' * 3000)}.{_b64(b'{}')}.c2ln",
    "header not an object": lambda k: f"{_b64(b'[1]')}.{_b64(b'{}')}.c2ln",
    "token over 8 KiB": lambda k: k["RS256"].token(idp_claims(pad="x" * 9000)),
    "not a JWT": lambda k: "abc",
}


@pytest.mark.parametrize("case", list(BAD_TOKENS))
def test_every_bad_token_is_401(gateway, make_activity, keys, case):
    refused_everywhere(gateway(), make_activity()["id"], BAD_TOKENS[case](keys))


@pytest.mark.parametrize("case", [case for case in BAD_TOKENS if "alg" in case or "HS256" in case
                                  or "header" in case])
def test_the_algorithm_cases_on_a_gateway_without_hs256(gateway, make_activity, keys, case):
    """Without SECKILL_JWT_SECRET, no token reaches an HMAC check at all."""
    refused_everywhere(gateway(SECKILL_JWT_SECRET=""), make_activity()["id"],
                       BAD_TOKENS[case](keys), keys["ES256"].token(idp_claims("alice")))


def test_a_token_without_kid_needs_exactly_one_key_to_fit(gateway, make_activity):
    aid = make_activity()["id"]
    first, second = SigningKey.make("RS256"), SigningKey.make("RS256")
    with JwksServer() as other:
        other.publish(first, SigningKey.make("ES256"))
        app = gateway(SECKILL_JWT_JWKS_URL=other.url)
        assert status(app, aid, first.token(idp_claims(), kid=None)) == 200
    with JwksServer() as other:
        other.publish(first, second)
        app = gateway(SECKILL_JWT_JWKS_URL=other.url)
        refused_everywhere(app, aid, first.token(idp_claims(), kid=None))
        assert status(app, aid, first.token(idp_claims())) == 200


def test_the_bad_tokens_differ_from_a_good_one_in_one_thing(gateway, make_activity, keys):
    """The refusals above are refusals of what each case changes: the same key's token
    with the right claims buys, and a kid-less token verifies where one key fits."""
    aid = make_activity()["id"]
    app = gateway()
    assert purchase(app, aid, keys["RS256"].token(idp_claims("good")))["status"] == "ok"
    alone = gateway(SECKILL_JWT_ALGORITHMS="ES256")  # one key fits ES256
    assert status(alone, aid, keys["ES256"].token(idp_claims("kidless"), kid=None)) == 200


def test_an_algorithm_left_out_of_the_list_is_refused(gateway, make_activity, keys):
    aid = make_activity()["id"]
    app = gateway(SECKILL_JWT_ALGORITHMS="RS256,ES256")
    for alg in ("PS256", "EdDSA"):
        refused_everywhere(app, aid, keys[alg].token(idp_claims()))
    assert status(app, aid, keys["RS256"].token(idp_claims())) == 200
    # An RSA key published without "alg" fits RS256 and PS256; PS256 is still not accepted.
    bare = SigningKey.make("RS256")
    with JwksServer() as other:
        other.publish(bare.jwk(with_alg=False))
        app = gateway(SECKILL_JWT_JWKS_URL=other.url, SECKILL_JWT_ALGORITHMS="RS256")
        refused_everywhere(app, aid, bare.token(idp_claims(), alg="PS256"))
        assert status(app, aid, bare.token(idp_claims())) == 200


def test_keys_the_set_must_not_hold_verify_nothing(gateway, make_activity):
    """A JWK for encryption, one with its private parts, a short RSA key, a P-384 key and one
    whose "alg" says another algorithm are left out; the good key beside them verifies."""
    aid = make_activity()["id"]
    good, enc, private, short, p384, liar = (
        SigningKey.make("ES256"), SigningKey.make("RS256"), SigningKey.make("ES256"),
        SigningKey.make("RS256", bits=1024), SigningKey.make("ES384"), SigningKey.make("RS256"))
    with JwksServer() as other:
        other.publish(good, enc.jwk(use="enc"),
                      {**ECAlgorithm.to_jwk(private.private, as_dict=True), "kid": private.kid,
                       "use": "sig"},
                      short, p384, liar.jwk(alg="ES256"))
        app = gateway(SECKILL_JWT_JWKS_URL=other.url,
                      SECKILL_JWT_ALGORITHMS="RS256,ES256,PS256")
        assert status(app, aid, good.token(idp_claims())) == 200
        for key in (enc, private, liar):
            refused_everywhere(app, aid, key.token(idp_claims()))
        # (PyJWT warns when it signs with a short key: signed by hand.)
        refused_everywhere(app, aid, hand_made({"alg": "RS256", "kid": short.kid}, idp_claims(),
                                               signer(short)))
        refused_everywhere(app, aid, p384.token(idp_claims(), alg="ES384"))


# --- a flood of made-up kids ------------------------------------------------------------------


def test_a_flood_of_made_up_kids_costs_one_fetch(gateway, make_activity, keys, idp):
    app = gateway(SECKILL_JWT_JWKS_REFRESH_MIN="1")  # a kid may cause a fetch once a second
    aid = make_activity()["id"]
    assert status(app, aid, keys["RS256"].token(idp_claims())) == 200
    issuer_keys = app.extensions["edge.Identity"].issuer.keys
    wait_until(lambda: not issuer_keys.cooling_down(), timeout=3, what="the cooldown over")
    before = idp.requests
    forger = SigningKey.make("ES256")
    tokens = [SigningKey(f"made-up-{uuid.uuid4().hex}", "ES256", forger.private).token(
        idp_claims(f"u{n}")) for n in range(200)]
    answers: list[int] = []
    lock = threading.Lock()

    def send(batch: list[str]) -> None:
        client = app.test_client()
        for token in batch:
            code = client.get(f"/seckill/{aid}/order", headers=bearer(token)).status_code
            with lock:
                answers.append(code)

    threads = [threading.Thread(target=send, args=(tokens[n::20],)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [401] * 200
    assert idp.requests - before == 1, idp.requests - before


# --- keys rotated mid-sale --------------------------------------------------------------------


@BOTH_BACKENDS
def test_keys_rotated_mid_sale(gateway, make_activity, idp):
    """A new key's tokens verify within one refresh; a removed key's tokens stop after the
    next refresh, a token the gateway already remembers included."""
    old, new = SigningKey.make("RS256"), SigningKey.make("ES256")
    idp.publish(old)
    idp.cache_control = "public, max-age=1"
    app = gateway(SECKILL_JWT_JWKS_REFRESH_MIN="1")
    aid = make_activity(total=100)["id"]
    assert purchase(app, aid, old.token(idp_claims("before")))["status"] == "ok"
    # The buyer who got a URL with the old key: that token is remembered from here on.
    remembered = old.token(idp_claims("mid"))
    client = app.test_client()
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=bearer(remembered)),
                 200)["url"]

    idp.publish(old, new)
    wait_until(lambda: status(app, aid, new.token(idp_claims("probe"))) == 200, timeout=3,
               interval=0.05, what="the new key's token verifying")
    assert purchase(app, aid, new.token(idp_claims("after")))["status"] == "ok"

    idp.publish(new)
    wait_until(lambda: status(app, aid, old.token(idp_claims("probe-old"))) == 401, timeout=4,
               interval=0.05, what="the removed key's token refused")
    expect(client.post(url, headers=bearer(remembered)), 401, "unauthenticated")
    expect(client.get(f"/seckill/url?activity={aid}", headers=bearer(remembered)), 401,
           "unauthenticated")
    assert status(app, aid, new.token(idp_claims("after"))) == 200


# --- the provider down at a restart ----------------------------------------------------------


@BOTH_BACKENDS
def test_a_restart_while_the_provider_is_down_verifies_with_the_saved_set(
        gateway, make_activity, keys, idp, env):
    aid = make_activity()["id"]
    first = gateway()
    assert status(first, aid, keys["ES256"].token(idp_claims())) == 200
    idp.stop()
    restarted = gateway()  # a gateway started now finds the provider down
    assert purchase(restarted, aid, keys["ES256"].token(idp_claims("after-restart")))[
        "status"] == "ok"
    # What verified is the set saved in Redis: a deployment with nothing saved refuses.
    elsewhere = gateway(SECKILL_KEY_PREFIX=f"{env['SECKILL_KEY_PREFIX']}x")
    expect(elsewhere.test_client().get(f"/seckill/url?activity={aid}",
                                       headers=bearer(keys["ES256"].token(idp_claims()))),
           401, "unauthenticated")


# --- HS256 beside a JWKS, and each alone ------------------------------------------------------


@BOTH_BACKENDS
def test_hs256_and_the_providers_tokens_at_once(gateway, make_activity, keys, client):
    aid = make_activity(total=100)["id"]
    both = gateway()
    assert purchase(both, aid, keys["RS256"].token(idp_claims("from-idp")))["status"] == "ok"
    hs256 = user_headers("from-login-service")["Authorization"].removeprefix("Bearer ")
    assert purchase(both, aid, hs256)["status"] == "ok"

    provider_only = gateway(SECKILL_JWT_SECRET="")
    refused_everywhere(provider_only, aid, user_headers("hs")["Authorization"][7:],
                       keys["ES256"].token(idp_claims("alice")))
    assert status(provider_only, aid, keys["EdDSA"].token(idp_claims())) == 200
    # The HS256-only gateway (the suite's usual one) refuses the provider's tokens.
    expect(client.get(f"/seckill/{aid}/order",
                      headers=bearer(keys["RS256"].token(idp_claims()))), 401, "unauthenticated")


# --- the user claim: an Auth0-shaped user id -------------------------------------------------


@BOTH_BACKENDS
def test_a_claim_of_the_shops_names_the_user_when_sub_is_no_user_id(
        gateway, make_activity, keys):
    """Auth0's subs (``auth0|64f1...``) hold a "|", which user ids do not (docs/deployment.md):
    the shop's login adds a claim of its own, and SECKILL_JWT_USER_CLAIM names it."""
    claim = "https://shop.example.test/buyer"
    aid = make_activity()["id"]
    sub = "auth0|64f1c2e9a1b2c3d4e5f60718"
    app = gateway(SECKILL_JWT_USER_CLAIM=claim)
    token = keys["RS256"].token({**idp_claims(sub), claim: "auth0.64f1c2e9a1b2c3d4e5f60718"})
    assert purchase(app, aid, token)["status"] == "ok"
    refused_everywhere(app, aid, keys["RS256"].token(idp_claims(sub)))  # no such claim
    refused_everywhere(gateway(), aid, token)  # sub names the user by default


# --- a JWKS file ------------------------------------------------------------------------------


def test_a_jwks_file_read_again_when_it_changes(make_app, make_activity, tmp_path: Path,
                                                keys):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [keys["RS256"].jwk()]}))
    app = make_app(**issuer_env(None, SECKILL_JWT_JWKS_FILE=str(path)))
    aid = make_activity()["id"]
    assert status(app, aid, keys["RS256"].token(idp_claims())) == 200
    added = SigningKey.make("ES256")
    path.write_text(json.dumps({"keys": [keys["RS256"].jwk(), added.jwk()]}))
    wait_until(lambda: status(app, aid, added.token(idp_claims())) == 200, timeout=3,
               interval=0.05, what="the file's new key verifying")
    path.write_text(json.dumps({"keys": [added.jwk()]}))
    wait_until(lambda: status(app, aid, keys["RS256"].token(idp_claims())) == 401, timeout=3,
               interval=0.05, what="the key removed from the file refused")


def test_a_jwks_file_beside_the_url_adds_its_keys(gateway, make_activity, tmp_path: Path,
                                                  keys):
    extra = SigningKey.make("EdDSA")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [extra.jwk()]}))
    app = gateway(SECKILL_JWT_JWKS_FILE=str(path))
    aid = make_activity()["id"]
    assert status(app, aid, extra.token(idp_claims())) == 200
    assert status(app, aid, keys["PS256"].token(idp_claims())) == 200


def test_the_audience_may_be_one_of_several(gateway, make_activity, keys):
    aid = make_activity()["id"]
    app = gateway(SECKILL_JWT_AUDIENCE=f"https://other.example.test,{AUDIENCE}")
    assert status(app, aid, keys["RS256"].token(idp_claims(aud=[AUDIENCE, "x"]))) == 200
    assert status(app, aid, keys["RS256"].token(idp_claims(aud="https://other.example.test"))) \
        == 200
    refused_everywhere(app, aid, keys["RS256"].token(idp_claims(aud="https://third.test")))


def test_a_jwt_secret_still_verifies_hs256_beside_the_issuer(gateway, make_activity):
    aid = make_activity()["id"]
    token = user_headers("hs-buyer", JWT_SECRET)["Authorization"][7:]
    assert purchase(gateway(), aid, token)["status"] == "ok"
