"""Limits per person in a queue and a draw, through the gateway (in-process, the
hot routes included) on the session's Valkey: one place per person (the joining account's;
409 ``already_joined`` for the person's other accounts, ``none`` as their status), a draw of 50
accounts of one person among 10 other people (one entry, at most one account drawn, the draw
recomputed from the seed and the published entries, never the raw claim), and a drawn person's
one purchase.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from seckill.domain.people import PERSON_KEY
from seckill.store.plumbing.keys import KeySpace
from tests.support.admission import independent_order, queued_activity, wait_for_start
from tests.support.api import expect
from tests.support.people import CLAIM, headers, join_as


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The gateway's environment, naming the person claim."""
    return {**env, "SECKILL_PERSON_CLAIM": CLAIM}


def test_a_person_holds_one_place_in_a_queue(client: FlaskClient) -> None:
    activity = queued_activity(client, admission="queue", total=2, starts_in=60,
                               limit_by="person")
    aid = activity["id"]
    expect(client.post(f"/seckill/{aid}/queue", json={}, headers=headers("x1")), 403,
           "verification_required")
    expect(client.get(f"/seckill/{aid}/queue", headers=headers("x1")), 403,
           "verification_required")
    first = expect(client.post(f"/seckill/{aid}/queue", json={}, headers=headers("x1", "vic")),
                   200)
    assert first["status"] == "waiting" and "entry" not in first  # a queue, not a draw
    # Joining again from the same account keeps the place; another account is refused.
    expect(client.post(f"/seckill/{aid}/queue", json={}, headers=headers("x1", "vic")), 200)
    expect(client.post(f"/seckill/{aid}/queue", json={}, headers=headers("x2", "vic")), 409,
           "already_joined")
    # The place is the joining account's: the person's other accounts hold none.
    seen = expect(client.get(f"/seckill/{aid}/queue", headers=headers("x2", "vic")), 200)
    assert seen["status"] == "none"
    assert expect(client.get(f"/seckill/{aid}/queue", headers=headers("x1", "vic")),
                  200)["status"] == "waiting"
    state = expect(client.get(f"/seckill/{aid}/queue/state"), 200)
    assert state["waiting"] == 1


@pytest.fixture
def farm_draw(client: FlaskClient) -> Iterator[dict[str, Any]]:
    """A draw of 5 units: 50 accounts of one person and 10 other people joined."""
    activity = queued_activity(client, admission="draw", total=5, starts_in=2.0,
                               limit_by="person")
    aid = activity["id"]
    farm = [f"bot-{i}" for i in range(50)]
    answers = [join_as(client, aid, uid, "farmer") for uid in farm]
    assert [r.status_code for r in answers].count(200) == 1
    assert all(r.get_json()["error"] == "already_joined" for r in answers[1:])
    entries = {"farmer": answers[0].get_json()["entry"]}
    for i in range(10):
        joined = expect(join_as(client, aid, f"honest-{i}", f"person-{i}"), 200)
        entries[f"person-{i}"] = joined["entry"]
    activity.update(farm=farm, entries=entries)
    yield activity


def test_fifty_accounts_of_one_person_are_one_entry_of_a_draw(
        client: FlaskClient, farm_draw: dict[str, Any], rds: Any, prefix: str) -> None:
    aid, entries = farm_draw["id"], farm_draw["entries"]
    # Published entries: the per-draw salted HMAC of the person, never the claim itself (nor
    # its plain hash, which anyone could compute from a guessed phone number).
    assert len(set(entries.values())) == 11
    for person, entry in entries.items():
        assert PERSON_KEY.fullmatch(entry), entry
        assert person not in entry and hashlib.sha256(person.encode()).hexdigest()[:8] not in entry
    keys = KeySpace(prefix)
    assert sorted(rds.zrange(keys.queue(aid), 0, -1)) == sorted(entries.values())
    wait_for_start(farm_draw)
    view = client.get(f"/seckill/activities/{aid}").get_json()
    seed = view["draw_seed"]
    assert hashlib.sha256(seed.encode()).hexdigest() == view["draw_commitment"]
    drawn_entries = independent_order(seed, list(entries.values()))[:5]
    admitted = set()
    for uid in farm_draw["farm"]:
        status = expect(client.get(f"/seckill/{aid}/queue", headers=headers(uid, "farmer")), 200)
        if status["status"] == "admitted":
            admitted.add(uid)
    others = {f"person-{i}" for i in range(10) if expect(client.get(
        f"/seckill/{aid}/queue", headers=headers(f"honest-{i}", f"person-{i}")),
        200)["status"] == "admitted"}
    farmer_drawn = entries["farmer"] in drawn_entries
    # The farmer's one entry is the account's that joined: at most that one is drawn.
    assert admitted == ({"bot-0"} if farmer_drawn else set())
    assert {entries[p] for p in others} | ({entries["farmer"]} if farmer_drawn else set()) == \
        set(drawn_entries)


def test_a_drawn_person_buys_once_from_all_their_accounts(client: FlaskClient) -> None:
    """A person alone in a draw is drawn: the account that joined is admitted and buys; the
    person's other accounts are never admitted, and see the person's order once bought."""
    activity = queued_activity(client, admission="draw", total=3, starts_in=1.0,
                               limit_by="person")
    aid = activity["id"]
    assert [join_as(client, aid, f"b{i}", "solo").status_code for i in range(5)] == \
        [200, 409, 409, 409, 409]
    wait_for_start(activity)
    seen = [expect(client.get(f"/seckill/{aid}/queue", headers=headers(f"b{i}", "solo")), 200)
            for i in range(5)]
    assert [s["status"] for s in seen] == ["admitted", "none", "none", "none", "none"], seen
    assert all("url" not in s for s in seen[1:])
    # The other accounts' own URLs (from GET /seckill/url) are not handed out either.
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers("b1", "solo")), 403,
           "not_admitted")
    expect(client.post(seen[0]["url"], headers=headers("b0", "solo")), 200)
    # The order is the person's, whichever account asks; the place is gone.
    for i in range(5):
        status = expect(client.get(f"/seckill/{aid}/queue", headers=headers(f"b{i}", "solo")),
                        200)
        assert status["status"] == "purchased", status
        expect(client.post(f"/seckill/{aid}/queue", json={}, headers=headers(f"b{i}", "solo")),
               409, "already_purchased")
    state = expect(client.get(f"/seckill/{aid}/queue/state"), 200)
    assert (state["remaining"], state["admitted"]) == (2, 0)
    expect(join_as(client, aid, "late", "late-person"), 403, "entries_closed")
