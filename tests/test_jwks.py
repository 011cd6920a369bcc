"""The issuer's key set (``edge.jwks``) on its own: which JWKs become keys, how long a set is
fresh, and the fetching against a real JWKS server (tests/support/jwks_server.py): the last good
set kept, saved and loaded, one fetch at a time; and the settings that describe the provider."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge.issuer import Issuer, unverified_header
from edge.jwks import (
    DEFAULT_FRESH,
    REFRESH_MAX,
    IssuerKeys,
    KeySetError,
    freshness,
    key_of,
    parse_key_set,
)
from seckill.config import ConfigError, Settings, issuer_settings
from seckill.domain import errors
from tests.support.jwks_server import AUDIENCE, ISSUER, JwksServer, SigningKey, idp_claims
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, URL_KEY

EVERY = frozenset({"RS256", "PS256", "ES256", "EdDSA"})


@pytest.fixture(scope="module")
def rsa() -> SigningKey:
    return SigningKey.make("RS256")


@pytest.fixture(scope="module")
def ec() -> SigningKey:
    return SigningKey.make("ES256")


class MemoryCopy:
    """A KeyCopy kept in a dict (Redis's is tests/test_identity_jwks.py's restart test)."""

    def __init__(self) -> None:
        self.saved: dict[str, str] = {}

    def load(self, source: str) -> str | None:
        return self.saved.get(source)

    def save(self, source: str, document: str) -> None:
        self.saved[source] = document


# --- which JWKs are keys ------------------------------------------------------------------


def test_each_key_type_fits_its_algorithms_only(rsa, ec):
    ed = SigningKey.make("EdDSA")
    assert key_of(rsa.jwk(with_alg=False), EVERY).algorithms == {"RS256", "PS256"}  # type: ignore[union-attr]
    assert key_of(rsa.jwk(), EVERY).algorithms == {"RS256"}  # type: ignore[union-attr]
    assert key_of(ec.jwk(with_alg=False), EVERY).algorithms == {"ES256"}  # type: ignore[union-attr]
    assert key_of(ed.jwk(with_alg=False), EVERY).algorithms == {"EdDSA"}  # type: ignore[union-attr]
    assert key_of(rsa.jwk(with_alg=False), frozenset({"ES256"})) is None  # none allowed fits


@pytest.mark.parametrize("case", [
    "use enc", "key_ops without verify", "private parts", "alg of another type", "alg RS512",
    "alg HS256", "kty oct", "P-384", "RSA 1024", "kid a number", "not an object", "no kty",
    "garbage n",
])
def test_jwks_that_are_no_verifying_key_are_left_out(case, rsa, ec):
    jwk: Any = {
        "use enc": lambda: rsa.jwk(use="enc"),
        "key_ops without verify": lambda: rsa.jwk(key_ops=["encrypt"]),
        "private parts": lambda: {**rsa.jwk(), "d": "AQAB"},
        "alg of another type": lambda: rsa.jwk(alg="ES256"),
        "alg RS512": lambda: rsa.jwk(alg="RS512"),
        "alg HS256": lambda: rsa.jwk(alg="HS256"),
        "kty oct": lambda: {"kty": "oct", "k": "c2VjcmV0", "kid": "s", "alg": "HS256"},
        "P-384": lambda: SigningKey.make("ES384").jwk(with_alg=False),
        "RSA 1024": lambda: SigningKey.make("RS256", bits=1024).jwk(),
        "kid a number": lambda: rsa.jwk(kid=7),
        "not an object": lambda: ["kty", "RSA"],
        "no kty": lambda: {k: v for k, v in ec.jwk().items() if k != "kty"},
        "garbage n": lambda: rsa.jwk(n="!!"),
    }[case]()
    assert key_of(jwk, EVERY) is None
    with pytest.raises(KeySetError, match="no usable key"):
        parse_key_set(json.dumps({"keys": [jwk]}), EVERY)
    assert [k.kid for k in parse_key_set(json.dumps({"keys": [jwk, ec.jwk()]}), EVERY)] \
        == [ec.kid]


@pytest.mark.parametrize("document", ["", "[", "[]", '{"keys": {}}', '{"nokeys": []}',
                                      '{"keys": []}', "[" * 5000, '{"keys": ["x"]}'])
def test_documents_that_are_no_usable_jwks(document):
    with pytest.raises(KeySetError):
        parse_key_set(document, EVERY)


# --- freshness ------------------------------------------------------------------------------


@pytest.mark.parametrize(("cache_control", "age", "expected"), [
    ("public, max-age=600", None, 600),
    ("max-age=600", "100", 500),
    ('max-age="900"', None, 900),
    ("public, s-maxage=30, max-age=120", None, 120),
    ("max-age=5", None, 60),  # the floor
    ("max-age=9999999", None, REFRESH_MAX),  # the ceiling
    ("no-cache", None, 60),
    ("no-store, max-age=600", None, 60),
    (None, None, DEFAULT_FRESH),
    ("public", None, DEFAULT_FRESH),
    ("max-age=abc", None, DEFAULT_FRESH),
])
def test_freshness_follows_cache_control_within_bounds(cache_control, age, expected):
    assert freshness(cache_control, age, 60) == expected


@given(st.one_of(st.none(), st.text(max_size=60)), st.one_of(st.none(), st.text(max_size=12)),
       st.floats(min_value=1, max_value=86_400))
def test_freshness_is_always_within_its_bounds(cache_control, age, low):
    assert low <= freshness(cache_control, age, low) <= REFRESH_MAX


# --- the header read before the key is chosen -----------------------------------------------


@pytest.mark.parametrize("token", ["", "abc", "!!!.x.y", "W10.e30.", "bnVsbA.e30.",
                                   "x" * 9000, "WwWwWwWwWw" * 400 + ".e30.c2ln"])
def test_an_unreadable_header_is_unauthenticated(token):
    with pytest.raises(errors.Unauthenticated):
        unverified_header(token)


# --- fetching against a real server ---------------------------------------------------------


def test_keys_fetched_at_start_and_saved(rsa, ec):
    copy = MemoryCopy()
    with JwksServer() as idp:
        idp.publish(rsa, ec)
        keys = IssuerKeys(idp.url, None, EVERY, copy)
        try:
            assert keys.find(rsa.kid, "RS256") is not None
            assert keys.find(ec.kid, "ES256") is not None
            assert keys.find(rsa.kid, "ES256") is None  # an RSA key never verifies ES256
            assert idp.requests == 1
            assert json.loads(copy.saved[idp.url]) == {"keys": [rsa.jwk(), ec.jwk()]}
        finally:
            keys.close()


def test_a_failed_fetch_keeps_the_last_good_set_and_retries(rsa, ec):
    with JwksServer(cache_control="max-age=1") as idp:
        idp.publish(rsa)
        keys = IssuerKeys(idp.url, None, EVERY, MemoryCopy(), refresh_min=1)
        try:
            found = keys.find(rsa.kid, "RS256")
            assert found is not None
            idp.status = 503
            wait_until(lambda: idp.requests >= 3, timeout=6, what="two refetches that fail")
            assert keys.holds(found)  # the last good set is still in force
            idp.raw = b"not a jwks"
            idp.status = 200
            wait_until(lambda: idp.requests >= 4, timeout=6, what="a refetch of garbage")
            assert keys.holds(found)
            idp.publish(ec)
            wait_until(lambda: not keys.holds(found), timeout=8, what="the set replaced")
            assert keys.find(ec.kid, "ES256") is not None
        finally:
            keys.close()


def test_a_process_started_while_the_provider_is_down_uses_the_saved_set(rsa):
    copy = MemoryCopy()
    with JwksServer() as idp:
        idp.publish(rsa)
        first = IssuerKeys(idp.url, None, EVERY, copy)
        assert first.find(rsa.kid, "RS256") is not None
        first.close()
        idp.stop()
        started = time.monotonic()
        second = IssuerKeys(idp.url, None, EVERY, copy)
        try:
            assert second.find(rsa.kid, "RS256") is not None
            assert time.monotonic() - started < 2  # a refused connection fails at once
            nothing = IssuerKeys(idp.url, None, EVERY, MemoryCopy())
            assert nothing.find(rsa.kid, "RS256") is None
            nothing.close()
        finally:
            second.close()


def test_unknown_kids_refetch_once_per_cooldown_one_fetch_at_a_time(rsa):
    with JwksServer() as idp:
        idp.publish(rsa)
        keys = IssuerKeys(idp.url, None, EVERY, None, refresh_min=1)
        try:
            assert keys.find(rsa.kid, "RS256") is not None
            assert idp.requests == 1
            assert keys.find("made-up", "RS256") is None
            assert idp.requests == 1  # the fetch at start is less than a cooldown ago
            wait_until(lambda: not keys.cooling_down(), timeout=3, what="the cooldown over")
            barrier = threading.Barrier(50)

            def ask(n: int) -> None:
                barrier.wait()
                assert keys.find(f"made-up-{n}", "RS256") is None

            threads = [threading.Thread(target=ask, args=(n,)) for n in range(50)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert idp.requests == 2  # one fetch for the 50 at once
            assert keys.find("made-up-again", "RS256") is None
            assert idp.requests == 2  # within the cooldown: none
        finally:
            keys.close()


def test_a_kid_asked_for_during_a_fetch_waits_for_its_answer(rsa, ec):
    """One fetch at a time: the buyers whose new kid arrives while it is under way are answered
    from it, not refused for the cooldown it started."""
    with JwksServer() as idp:
        idp.publish(rsa)
        keys = IssuerKeys(idp.url, None, EVERY, None, refresh_min=1)
        try:
            assert keys.find(rsa.kid, "RS256") is not None
            wait_until(lambda: not keys.cooling_down(), timeout=3, what="the cooldown over")
            idp.publish(rsa, ec)
            idp.delay = 0.5
            barrier = threading.Barrier(10)
            found: list[object] = []

            def ask() -> None:
                barrier.wait()
                found.append(keys.find(ec.kid, "ES256"))

            threads = [threading.Thread(target=ask) for _ in range(10)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(found) == 10 and all(key is not None for key in found)
            assert idp.requests == 2
        finally:
            keys.close()


def test_a_redirect_is_a_failed_fetch(rsa):
    with JwksServer() as idp:
        idp.publish(rsa)
        idp.status = 302
        keys = IssuerKeys(idp.url, None, EVERY, None)
        try:
            assert keys.find(rsa.kid, "RS256") is None
        finally:
            keys.close()


def test_the_file_and_the_url_make_one_set(tmp_path: Path, rsa, ec):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [ec.jwk()]}))
    with JwksServer() as idp:
        idp.publish(rsa)
        keys = IssuerKeys(idp.url, path, EVERY, None)
        try:
            assert keys.find(rsa.kid, "RS256") is not None
            assert keys.find(ec.kid, "ES256") is not None
            path.write_text("garbage")  # a broken file keeps its last good keys
            time.sleep(0.01)
            keys.refetch_for_unknown()
            assert keys.find(ec.kid, "ES256") is not None
        finally:
            keys.close()


def test_an_issuer_verifies_and_names_the_key(rsa):
    with JwksServer() as idp:
        idp.publish(rsa)
        keys = IssuerKeys(idp.url, None, EVERY, None)
        try:
            issuer = Issuer(keys, ISSUER, (AUDIENCE,), EVERY)
            token = rsa.token(idp_claims("bob", person="p-1"))
            uid, expires, person, key = issuer.verify(token, unverified_header(token),
                                                      person_claim="person")
            assert (uid, person, key.kid) == ("bob", "p-1", rsa.kid)
            assert expires == idp_claims()["exp"] or expires > time.time()
            assert issuer.holds(key)
        finally:
            keys.close()


# --- the settings -----------------------------------------------------------------------------

BASE = {"SECKILL_ENV": "production", "SECKILL_SECRET_KEY": URL_KEY,
        "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN}
PROVIDER = {"SECKILL_JWT_JWKS_URL": "https://idp.example.test/.well-known/jwks.json",
            "SECKILL_JWT_ISSUER": ISSUER, "SECKILL_JWT_AUDIENCE": AUDIENCE}


def test_a_provider_makes_the_jwt_secret_optional():
    settings = Settings.from_env({**BASE, **PROVIDER})
    assert settings.jwt_secret == ""
    assert settings.issuer is not None
    assert settings.issuer.algorithms == ("RS256", "ES256")
    assert settings.issuer.user_claim == "sub"
    both = Settings.from_env({**BASE, **PROVIDER, "SECKILL_JWT_SECRET": JWT_SECRET})
    assert both.jwt_secret == JWT_SECRET and both.issuer == settings.issuer
    with pytest.raises(ConfigError, match=r"SECKILL_JWT_SECRET is not set .*JWKS"):
        Settings.from_env(BASE)


@pytest.mark.parametrize(("change", "message"), [
    ({"SECKILL_JWT_ISSUER": ""}, "SECKILL_JWT_ISSUER is required"),
    ({"SECKILL_JWT_AUDIENCE": " , "}, "SECKILL_JWT_AUDIENCE is required"),
    ({"SECKILL_JWT_ALGORITHMS": "RS256,HS256"}, "may hold only .* got 'HS256'"),
    ({"SECKILL_JWT_ALGORITHMS": "none"}, "got 'none'"),
    ({"SECKILL_JWT_ALGORITHMS": "rs256"}, "got 'rs256'"),
    ({"SECKILL_JWT_ALGORITHMS": "ES384"}, "got 'ES384'"),
    ({"SECKILL_JWT_ALGORITHMS": ","}, "holds no algorithm"),
    ({"SECKILL_JWT_USER_CLAIM": "aud"}, "SECKILL_JWT_USER_CLAIM"),
    ({"SECKILL_JWT_JWKS_URL": "http://idp.example.test/jwks"}, "https://"),
    ({"SECKILL_JWT_JWKS_URL": "ftp://idp.example.test/jwks"}, "https://"),
    ({"SECKILL_JWT_JWKS_URL": "https:///jwks"}, "https://"),
    ({"SECKILL_JWT_JWKS_URL": "", "SECKILL_JWT_JWKS_FILE": "/nonexistent/jwks.json"},
     "names no file"),
    ({"SECKILL_JWT_JWKS_REFRESH_MIN": "0"}, "REFRESH_MIN must be >= 1"),
    ({"SECKILL_JWT_JWKS_REFRESH_MIN": "100000"}, "REFRESH_MIN must be <= 86400"),
])
def test_settings_that_cannot_be_right_stop_the_gateway(change, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({**BASE, **PROVIDER, **change})


def test_provider_settings_without_a_jwks_stop_the_gateway():
    with pytest.raises(ConfigError, match="SECKILL_JWT_ISSUER, SECKILL_JWT_AUDIENCE set, but"):
        Settings.from_env({**BASE, "SECKILL_JWT_SECRET": JWT_SECRET,
                           "SECKILL_JWT_ISSUER": ISSUER, "SECKILL_JWT_AUDIENCE": AUDIENCE})


def test_plain_http_only_to_this_machine_or_in_development(tmp_path: Path):
    for url in ("http://127.0.0.1:8080/jwks", "http://localhost/jwks", "http://[::1]:9/jwks"):
        found = issuer_settings({**PROVIDER, "SECKILL_JWT_JWKS_URL": url})
        assert found is not None and found.jwks_url == url
    assert issuer_settings({**PROVIDER, "SECKILL_ENV": "development",
                            "SECKILL_JWT_JWKS_URL": "http://keycloak:8080/jwks"}) is not None
    path = tmp_path / "jwks.json"
    path.write_text("{}")
    found = issuer_settings({**PROVIDER, "SECKILL_JWT_JWKS_URL": "",
                             "SECKILL_JWT_JWKS_FILE": str(path),
                             "SECKILL_JWT_AUDIENCE": "a, b", "SECKILL_JWT_ALGORITHMS": "EdDSA"})
    assert found is not None
    assert (found.jwks_url, found.jwks_file, found.audience, found.algorithms) == (
        None, path, ("a", "b"), ("EdDSA",))
