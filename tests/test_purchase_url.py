"""Purchase URL tokens: HMAC-SHA256 over (activity, user, expiry), key rotation, clock skew.

The signer is tested as a pure function with an explicit ``now``; then the same tokens go
through the gateway, where every refusal is 403 ``bad_signature`` and buys nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from edge.purchase_url import PurchaseUrlSigner
from seckill.domain import errors
from tests.support.api import create_activity, expect
from tests.support.tokens import URL_KEY, user_headers

OLD_KEY = "old-url-key-0123456789abcdef0123456789abcdef"
NEW_KEY = "new-url-key-0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def signer(*keys: str, ttl: int = 60, skew: int = 5) -> PurchaseUrlSigner:
    return PurchaseUrlSigner(keys or (URL_KEY,), ttl, skew)


def replace_part(token: str, index: int, value: str) -> str:
    parts = token.split(".")
    parts[index] = value
    return ".".join(parts)


def flip_last(text: str) -> str:
    return text[:-1] + ("A" if text[-1] != "A" else "B")


# --- the signer -------------------------------------------------------------------------------


def test_sign_and_verify():
    s = signer()
    token, expires_at = s.sign("phone1", "alice", now=T0)
    assert expires_at == int(T0) + 60
    assert token.startswith(f"{expires_at}.")
    assert s.verify(token, "phone1", "alice", now=T0) == expires_at
    assert s.verify(token, "phone1", "alice", now=T0 + 60) == expires_at


def test_tokens_are_bound_to_user_activity_and_expiry():
    s = signer()
    token, _ = s.sign("phone1", "alice", now=T0)
    others = {s.sign("phone1", "bob", now=T0)[0], s.sign("phone2", "alice", now=T0)[0],
              s.sign("phone1", "alice", now=T0 + 1)[0]}
    assert token not in others and len(others) == 3
    with pytest.raises(errors.BadSignature):
        s.verify(token, "phone1", "bob", now=T0)
    with pytest.raises(errors.BadSignature):
        s.verify(token, "phone2", "alice", now=T0)


def test_expiry_tolerates_the_clock_skew_and_no_more():
    s = signer(ttl=60, skew=5)
    token, expires_at = s.sign("phone1", "alice", now=T0)
    assert s.verify(token, "phone1", "alice", now=expires_at + 5) == expires_at
    with pytest.raises(errors.BadSignature) as refused:
        s.verify(token, "phone1", "alice", now=expires_at + 5.001)
    assert "expired" in refused.value.message
    strict = signer(ttl=60, skew=0)
    with pytest.raises(errors.BadSignature):
        strict.verify(token, "phone1", "alice", now=expires_at + 1)


@pytest.mark.parametrize("how", ["tag", "expiry", "expiry later", "key id", "unknown key id",
                                 "extra part", "missing part", "empty", "non-digit expiry",
                                 "negative expiry", "too long", "padded tag", "swapped case"])
def test_tampered_tokens(how):
    s = signer()
    token, expires_at = s.sign("phone1", "alice", now=T0)
    exp, kid, tag = token.split(".")
    tampered = {
        "tag": replace_part(token, 2, flip_last(tag)),
        "expiry": replace_part(token, 0, str(expires_at - 1)),
        "expiry later": replace_part(token, 0, str(expires_at + 3600)),
        "key id": replace_part(token, 1, flip_last(kid)),
        "unknown key id": replace_part(token, 1, "00000000"),
        "extra part": token + ".x",
        "missing part": f"{exp}.{tag}",
        "empty": "",
        "non-digit expiry": replace_part(token, 0, f"{exp[:-1]}x"),
        "negative expiry": replace_part(token, 0, f"-{exp}"),
        "too long": token + "A" * 200,
        "padded tag": token + "=",
        "swapped case": replace_part(token, 2, tag.swapcase()),
    }[how]
    assert tampered != token
    with pytest.raises(errors.BadSignature):
        s.verify(tampered, "phone1", "alice", now=T0)


def test_a_different_key_does_not_verify():
    token, _ = signer(OLD_KEY).sign("phone1", "alice", now=T0)
    with pytest.raises(errors.BadSignature):
        signer(NEW_KEY).verify(token, "phone1", "alice", now=T0)


def test_forged_tag_with_the_right_key_id():
    """Knowing the key id (it is public, in every URL) does not help forge the tag."""
    genuine, _ = signer().sign("phone1", "alice", now=T0)
    kid = genuine.split(".")[1]
    forged_tag = signer("attacker-key-0123456789abcdef0123456789abcdef").sign(
        "phone1", "alice", now=T0)[0].split(".")[2]
    with pytest.raises(errors.BadSignature):
        signer().verify(f"{int(T0) + 60}.{kid}.{forged_tag}", "phone1", "alice", now=T0)


def test_rotation_newest_signs_all_verify():
    old_token, _ = signer(OLD_KEY).sign("phone1", "alice", now=T0)
    rotated = signer(NEW_KEY, OLD_KEY)
    assert rotated.verify(old_token, "phone1", "alice", now=T0) == int(T0) + 60
    new_token, _ = rotated.sign("phone1", "alice", now=T0)
    assert new_token != old_token
    assert signer(NEW_KEY).verify(new_token, "phone1", "alice", now=T0) == int(T0) + 60
    with pytest.raises(errors.BadSignature):
        signer(OLD_KEY).verify(new_token, "phone1", "alice", now=T0)
    # Once the old key is retired, its tokens stop working.
    with pytest.raises(errors.BadSignature):
        signer(NEW_KEY).verify(old_token, "phone1", "alice", now=T0)


def test_a_signer_needs_a_key():
    with pytest.raises(ValueError):
        PurchaseUrlSigner([], 60)


# --- through the gateway ----------------------------------------------------------------------


def url_for(aid: str, token: str) -> str:
    return f"/seckill/{aid}/{token}/buy"


def issued(client: Any, aid: str, uid: str) -> str:
    body = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)), 200)
    return str(body["url"])


def assert_nothing_bought(rds: Any, prefix: str, aid: str, total: int = 10) -> None:
    assert rds.hlen(f"{prefix}:{{{aid}}}:buyers") == 0
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == str(total)


def test_forged_and_tampered_urls_are_refused(client, make_activity, rds, prefix):
    aid = make_activity()["id"]
    headers = user_headers("alice")
    genuine = issued(client, aid, "alice")
    token = genuine.split("/")[3]
    exp, kid, tag = token.split(".")
    candidates = [
        f"{int(time.time()) + 60}.{kid}.{'A' * 43}",
        replace_part(token, 2, flip_last(tag)),
        replace_part(token, 0, str(int(exp) + 3600)),
        replace_part(token, 1, flip_last(kid)),
        signer("attacker-key-0123456789abcdef0123456789abcdef").sign(aid, "alice")[0],
        "1.2.3",
    ]
    for forged in candidates:
        expect(client.post(url_for(aid, forged), headers=headers), 403, "bad_signature")
    assert_nothing_bought(rds, prefix, aid)
    expect(client.post(genuine, headers=headers), 200)


def test_expired_url_is_refused(app, client, make_activity, rds, prefix):
    aid = make_activity()["id"]
    gateway_signer = app.extensions["edge.PurchaseUrls"].signer
    skew = app.extensions["seckill"].settings.clock_skew
    stale, _ = gateway_signer.sign(aid, "alice", now=time.time() - gateway_signer.ttl - skew - 2)
    body = expect(client.post(url_for(aid, stale), headers=user_headers("alice")), 403,
                  "bad_signature")
    assert "expired" in body["message"]
    assert_nothing_bought(rds, prefix, aid)
    # Just expired but within the skew between gateway clocks: still good.
    recent, _ = gateway_signer.sign(aid, "alice", now=time.time() - gateway_signer.ttl - 1)
    expect(client.post(url_for(aid, recent), headers=user_headers("alice")), 200)


def test_another_users_url_is_refused(client, make_activity, rds, prefix):
    aid = make_activity()["id"]
    alices = issued(client, aid, "alice")
    expect(client.post(alices, headers=user_headers("mallory")), 403, "bad_signature")
    assert_nothing_bought(rds, prefix, aid)
    expect(client.post(alices, headers=user_headers("alice")), 200)


def test_another_activitys_url_is_refused(client, make_activity, rds, prefix):
    first = make_activity()["id"]
    second = make_activity()["id"]
    token = issued(client, first, "alice").split("/")[3]
    expect(client.post(url_for(second, token), headers=user_headers("alice")), 403,
           "bad_signature")
    assert_nothing_bought(rds, prefix, second)


def test_key_rotation_through_the_gateway(make_app, make_activity, rds, prefix):
    """SECKILL_SECRET_KEY=new,old: URLs issued under the old key still buy; a gateway that no
    longer lists the old key refuses them."""
    old_gateway = make_app(SECKILL_SECRET_KEY=OLD_KEY)
    rotated = make_app(SECKILL_SECRET_KEY=f"{NEW_KEY}, {OLD_KEY}")
    retired = make_app(SECKILL_SECRET_KEY=NEW_KEY)
    aid = make_activity(total=5)["id"]

    old_url = issued(old_gateway.test_client(), aid, "alice")
    expect(retired.test_client().post(old_url, headers=user_headers("alice")), 403,
           "bad_signature")
    expect(rotated.test_client().post(old_url, headers=user_headers("alice")), 200)

    new_url = issued(rotated.test_client(), aid, "bob")
    expect(old_gateway.test_client().post(new_url, headers=user_headers("bob")), 403,
           "bad_signature")
    expect(retired.test_client().post(new_url, headers=user_headers("bob")), 200)
    assert rds.hlen(f"{prefix}:{{{aid}}}:buyers") == 2


def test_unknown_key_is_refused_through_the_gateway(make_app, make_activity, rds, prefix):
    foreign = make_app(SECKILL_SECRET_KEY="foreign-key-0123456789abcdef0123456789abcdef")
    home = make_app()
    aid = make_activity()["id"]
    url = issued(foreign.test_client(), aid, "alice")
    expect(home.test_client().post(url, headers=user_headers("alice")), 403, "bad_signature")
    assert_nothing_bought(rds, prefix, aid)


def test_verifying_needs_no_redis(make_app, private_valkey):
    """A bad signature is refused without Redis: once the gateway knows the activity (cached),
    it answers 403 even after its Redis is gone."""
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="300")
    client = app.test_client()
    aid = create_activity(client)["id"]
    url = issued(client, aid, "alice")  # caches the activity in this app
    private_valkey.stop()
    forged = replace_part(url.split("/")[3], 2, "A" * 43)
    expect(client.post(url_for(aid, forged), headers=user_headers("alice")), 403,
           "bad_signature")
    # Proof that Redis really was gone: the genuine URL cannot be decided.
    expect(client.post(url, headers=user_headers("alice")), 503, "unavailable")
