"""A person's key (seckill/domain/people.py) is HMAC-SHA256 as docs/API.md states it,
whichever way the gateway computes it: the keys already in Redis and the database were made
with ``hmac`` and ``base64``, and a person who bought before an upgrade must still be known
after it. Stable, one per person and per activity. And what a person's purchase writes (the
buyers hash, the stream entry with the account) through ``lua/purchase.lua``'s two ways of
writing the entry: without a payment window (no list built) and with one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from seckill.domain.people import PERSON_ID, PERSON_KEY, new_salt, person_key
from seckill.store.plumbing.keys import KeySpace
from tests.support.api import expect
from tests.support.people import CLAIM, buy_as, person_activity


def documented_key(salt: str, person: str) -> str:
    """docs/API.md's key: ``p:`` and the first 22 base64url characters of HMAC-SHA256 of the
    person id under the activity's salt."""
    mac = hmac.new(salt.encode("ascii"), person.encode(), hashlib.sha256)
    return "p:" + base64.urlsafe_b64encode(mac.digest()).decode("ascii")[:22]


persons = st.from_regex(PERSON_ID, fullmatch=True)
# The salts the gateway draws (64 hex characters), and any other ASCII text: shorter, and
# longer than SHA-256's block, which HMAC hashes first.
salts = st.one_of(st.builds(lambda _: new_salt(), st.integers()),
                  st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                          max_size=130))


@settings(max_examples=300, deadline=None)
@given(salts, persons)
def test_the_key_is_the_documented_hmac_and_stable(salt: str, person: str) -> None:
    fresh = person_key.__wrapped__(salt, person)  # computed, not remembered
    assert fresh == documented_key(salt, person)
    assert person_key(salt, person) == fresh == person_key.__wrapped__(salt, person)
    assert PERSON_KEY.fullmatch(fresh), fresh


@settings(max_examples=300, deadline=None)
@given(salts, salts, persons, persons)
def test_keys_differ_by_person_and_by_activity(salt: str, other_salt: str, person: str,
                                               other: str) -> None:
    if person != other:
        assert person_key(salt, person) != person_key(salt, other)
    if salt != other_salt:
        assert person_key(salt, person) != person_key(other_salt, person)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The gateway's environment, naming the person claim."""
    return {**env, "SECKILL_PERSON_CLAIM": CLAIM}


@pytest.mark.parametrize("window", [0, 300])
def test_a_person_s_purchase_writes_the_documented_key_and_the_account(
        client: FlaskClient, rds: Any, prefix: str, window: int) -> None:
    """The buyers hash is keyed by the documented key; the stream entry has the fields it
    always had, in the same order, the account last (after pay_by with a payment window)."""
    aid = person_activity(client, total=10, **({"payment_window": window} if window else {}))
    bought = expect(buy_as(client, aid, "acct-1", "pat-42"), 200)
    keys = KeySpace(prefix)
    salt = rds.hget(keys.meta(aid), "person_salt")
    who = documented_key(salt, "pat-42")
    assert rds.hgetall(keys.buyers(aid)) == {who: bought["order_id"]}
    [(_, entry)] = rds.xrange(keys.orders(aid))
    expected = ["type", "order_id", "activity", "user", "quantity", "ts"]
    expected += ["pay_by", "account"] if window else ["account"]
    assert list(entry) == expected, entry
    assert (entry["user"], entry["account"], entry["order_id"], entry["quantity"]) == (
        who, "acct-1", bought["order_id"], "1")
    expect(buy_as(client, aid, "acct-2", "pat-42"), 409, "already_purchased")
