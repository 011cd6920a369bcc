"""The person claim's canonical form (``SECKILL_PERSON_CANON``): ``exact`` (the default) keeps
the claim byte for byte; ``nfkc_casefold`` makes ``PERSON-Z``, ``person-z`` and its full-width
spelling one person, alike for a person-limited activity's limit, a queue's or a draw's entry and a
block (the admin API's and the command's). A trailing dot is data, not space: ``PB-x.`` stays
another person than ``PB-x``. Real servers: the session's Valkey, a SQLite file per test.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from flask import Flask
from hypothesis import given
from hypothesis import strategies as st

from seckill.config import ConfigError, Settings
from seckill.domain.people import PERSON_ID, canonical_person, is_person_id
from tests.support.admission import queued_activity
from tests.support.api import create_activity, expect
from tests.support.cli import seckill
from tests.support.people import CLAIM, buy_as, headers, join_as, person_activity
from tests.support.tokens import ADMIN

FULL_WIDTH = "\uff30\uff25\uff32\uff33\uff2f\uff2e\uff0d\uff3a"  # full-width; NFKC: PERSON-Z
SPELLINGS = ("PERSON-Z", "person-z", FULL_WIDTH, " Person-Z\t", "\u212aATE-Z")  # K: Kelvin sign


# -- the canonical form ----------------------------------------------------------------------


@given(st.text())
def test_exact_is_the_identity(text: str) -> None:
    assert canonical_person(text, "exact") == text


@given(st.text())
def test_nfkc_casefold_is_idempotent(text: str) -> None:
    once = canonical_person(text, "nfkc_casefold")
    assert canonical_person(once, "nfkc_casefold") == once
    assert once == once.strip() and unicodedata.is_normalized("NFKC", once)


@given(st.from_regex(PERSON_ID, fullmatch=True))
def test_a_valid_id_folds_to_its_lower_case_and_stays_valid(person: str) -> None:
    assert canonical_person(person, "nfkc_casefold") == person.lower()
    assert is_person_id(canonical_person(person, "nfkc_casefold"))


def test_the_spellings_of_one_person() -> None:
    assert {canonical_person(s, "nfkc_casefold") for s in SPELLINGS[:4]} == {"person-z"}
    assert canonical_person(SPELLINGS[4], "nfkc_casefold") == "kate-z"
    assert len({canonical_person(s, "exact") for s in SPELLINGS}) == len(SPELLINGS)
    # Only white space is trimmed: a dot is a character of ids (and of e-mail addresses).
    assert canonical_person("PB-x.", "nfkc_casefold") == "pb-x."
    assert canonical_person("\u3000PB-x.\u00a0", "nfkc_casefold") == "pb-x."
    with pytest.raises(ValueError, match="nfkc"):
        canonical_person("a", "lower")


def test_the_setting_is_checked(env: dict[str, str]) -> None:
    assert Settings.from_env(env).person_canon == "exact"
    assert Settings.from_env({**env, "SECKILL_PERSON_CANON": "NFKC_Casefold"}).person_canon == \
        "nfkc_casefold"
    with pytest.raises(ConfigError, match="SECKILL_PERSON_CANON"):
        Settings.from_env({**env, "SECKILL_PERSON_CANON": "lower"})


# -- through the gateway ---------------------------------------------------------------------


@pytest.fixture(params=["exact", "nfkc_casefold"])
def canon(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def app_of(make_app: Any, canon: str) -> Flask:
    """A gateway naming the person claim, in the ``canon`` form (exact: the default)."""
    extra = {} if canon == "exact" else {"SECKILL_PERSON_CANON": canon}
    return make_app(SECKILL_PERSON_CLAIM=CLAIM, **extra)


def test_the_spellings_are_one_person_for_a_limit_only_when_folded(app_of: Flask,
                                                                   canon: str) -> None:
    client = app_of.test_client()
    aid = person_activity(client)
    codes = [buy_as(client, aid, f"acct-{i}", s).status_code for i, s in enumerate(SPELLINGS[:4])]
    if canon == "exact":  # a full-width dash or white space is no id character: 401
        assert codes == [200, 200, 401, 401], codes
    else:
        assert codes == [200, 409, 409, 409], codes
    # A trailing dot is another person in either form.
    expect(buy_as(client, aid, "dot-1", "PB-x"), 200)
    expect(buy_as(client, aid, "dot-2", "PB-x."), 200)


@pytest.mark.parametrize("admission", ["queue", "draw"])
def test_the_spellings_are_one_entry_only_when_folded(app_of: Flask, canon: str,
                                                      admission: str) -> None:
    client = app_of.test_client()
    aid = queued_activity(client, admission=admission, total=3, starts_in=60,
                          limit_by="person")["id"]
    codes = [join_as(client, aid, f"acct-{i}", s).status_code for i, s in enumerate(SPELLINGS[:3])]
    assert codes == ([200, 200, 401] if canon == "exact" else [200, 409, 409]), codes


def test_a_block_names_the_person_in_the_same_form(app_of: Flask, canon: str) -> None:
    client = app_of.test_client()
    aid = person_activity(client)
    made = expect(client.post("/admin/blocks", json={"person": "Person-Z"}, headers=ADMIN), 201)
    folded = canon == "nfkc_casefold"
    assert made["person"] == ("person-z" if folded else "Person-Z")
    for i, spelling in enumerate(SPELLINGS[:3]):
        got = buy_as(client, aid, f"acct-{i}", spelling)
        wanted = 403 if folded else 401 if spelling == FULL_WIDTH else 200
        assert got.status_code == wanted, (spelling, got.get_json())
    assert buy_as(client, aid, "acct-x", "Person-Z").status_code == 403
    # Lifted by any spelling of the person when folded; by the exact one otherwise.
    lift = client.delete(f"/admin/blocks/person/{FULL_WIDTH}", headers=ADMIN)
    assert lift.status_code == (200 if folded else 400), lift.get_json()
    if not folded:
        expect(client.delete("/admin/blocks/person/Person-Z", headers=ADMIN), 200)
    # Folded, the person was refused until now and buys; exact, PERSON-Z bought above.
    if folded:
        expect(buy_as(client, aid, "acct-y", "PERSON-Z"), 200)
    else:
        expect(buy_as(client, aid, "acct-y", "PERSON-Z"), 409, "already_purchased")


def test_a_folded_claim_or_block_that_is_no_id_is_refused(make_app: Any) -> None:
    client = make_app(SECKILL_PERSON_CLAIM=CLAIM,
                      SECKILL_PERSON_CANON="nfkc_casefold").test_client()
    aid = person_activity(client)
    for bad in (" \t", "\u3000", "é", "İ", "a b", "x" * 129):
        body = expect(client.get(f"/seckill/url?activity={aid}", headers=headers("ann", bad)),
                      401, "unauthenticated")
        assert CLAIM in body["message"]
        refused = expect(client.post("/admin/blocks", json={"person": bad}, headers=ADMIN), 400,
                         "bad_request")
        assert refused["field"] == "person"
    assert expect(client.get("/admin/blocks", headers=ADMIN), 200)["blocks"] == []


def test_the_command_blocks_the_folded_person(client: Any, env: dict[str, str]) -> None:
    create_activity(client)  # the gateway's database
    folded = {**env, "SECKILL_PERSON_CANON": "nfkc_casefold"}
    done = seckill("block", "--person", FULL_WIDTH, env=folded)
    assert done.returncode == 0, done.stderr
    assert '"person": "person-z"' in done.stdout
    lifted = seckill("unblock", "--person", "PERSON-Z", env=folded)
    assert lifted.returncode == 0, lifted.stderr
