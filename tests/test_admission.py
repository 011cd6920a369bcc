"""Fair admission through the gateway (in-process), on one server and on the cluster: the
activity fields, the queue's refusals, the pre-queue's order (uncorrelated with the join
order, later joiners in arrival order), admission bounded by the units left times the
operator's factor, sold out for every waiter at once, reopening when units come back, the
draw recomputed from its seed, and the waiting list admitted as admissions lapse."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support.admission import (
    buy_admitted,
    independent_order,
    join,
    poll,
    queued_activity,
    spearman,
    state,
    wait_for_start,
    wait_past,
)
from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

pytestmark = BOTH_BACKENDS


def test_the_activity_shows_its_admission_and_a_draw_its_commitment_then_its_seed(
        client: FlaskClient) -> None:
    queue = queued_activity(client, "queue", starts_in=30)
    assert (queue["admission"], queue["challenge"], queue["admission_factor"]) == (
        "queue", False, 1.0)
    assert "draw_commitment" not in queue and "draw_seed" not in queue
    draw = queued_activity(client, "draw", starts_in=1)
    assert len(draw["draw_commitment"]) == 64 and "draw_seed" not in draw
    wait_for_start(draw)
    after = expect(client.get(f"/seckill/activities/{draw['id']}"), 200)
    assert hashlib.sha256(after["draw_seed"].encode()).hexdigest() == draw["draw_commitment"]
    plain = expect(client.get(f"/seckill/activities/{queue['id']}"), 200)
    assert plain["queue_opens_at"] == queue["queue_opens_at"]


@pytest.mark.parametrize(("fields", "field"), [
    ({"admission": "lottery"}, "admission"),
    ({"admission": "queue"}, "queue_opens_at"),
    ({"admission": "queue", "queue_opens_at": iso(7200)}, "queue_opens_at"),
    ({"admission": "queue", "queue_opens_at": "soon"}, "queue_opens_at"),
    ({"admission": "draw", "queue_opens_at": iso(-5), "challenge": "yes"}, "challenge"),
    ({"challenge": True}, "challenge"),
    ({"queue_opens_at": iso(-5)}, "queue_opens_at"),
    ({"admission": "queue", "queue_opens_at": iso(-5), "shards": 4}, "admission"),
])
def test_bad_admission_fields_are_refused_naming_the_field(
        client: FlaskClient, fields: dict[str, Any], field: str) -> None:
    body = {"id": "bad-admission", "name": "x", "total": 3, "starts_at": iso(60),
            "ends_at": iso(3600), **fields}
    refused = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                     "bad_request")
    assert refused["field"] == field


def test_a_queue_hands_out_urls_only_through_the_queue(client: FlaskClient) -> None:
    later = queued_activity(client, starts_in=60, queue_opens_at=iso(30))
    refused = expect(join(client, later["id"], "early"), 403, "not_open")
    assert refused["queue_opens_at"] == later["queue_opens_at"]
    activity = queued_activity(client, total=1, starts_in=0.5)
    aid = activity["id"]
    assert poll(client, aid, "ann")["status"] == "none"
    waiting = expect(join(client, aid, "ann"), 200)
    assert waiting["status"] == "waiting" and "position" not in waiting  # drawn at the start
    assert waiting["poll_after_ms"] >= 250
    expect(join(client, aid, "bob"), 200)
    wait_for_start(activity)
    statuses = {uid: poll(client, aid, uid) for uid in ("ann", "bob")}
    admitted = [uid for uid, s in statuses.items() if s["status"] == "admitted"]
    assert len(admitted) == 1
    other = ({"ann", "bob"} - set(admitted)).pop()
    assert statuses[other]["position"] == 1
    refused = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(other)),
                     403, "not_admitted")
    assert refused["position"] == 1
    expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(admitted[0])), 403,
           "not_admitted")
    url = statuses[admitted[0]]["url"]
    expect(client.post(url, headers=user_headers(other)), 403, "bad_signature")  # not theirs
    bought = expect(client.post(url, headers=user_headers(admitted[0])), 200)
    done = poll(client, aid, admitted[0])
    assert (done["status"], done["order_id"]) == ("purchased", bought["order_id"])
    expect(join(client, aid, admitted[0]), 409, "already_purchased")
    assert poll(client, aid, other)["status"] == "sold_out"  # the next poll, not later
    expect(join(client, aid, "carl"), 410, "sold_out")
    closed = state(client, aid)
    assert (closed["state"], closed["remaining"]) == ("sold_out", 0)


@pytest.mark.parametrize("body", [b"null", b"[]", b'"x"', b"1", b'{"altcha": null}'])
def test_a_join_body_that_is_not_an_object_is_400_and_joins_nothing(client: FlaskClient,
                                                                     body: bytes) -> None:
    # The contract's body is {} or {"altcha": ...}, or none; a fuzzed `null` was admitted.
    aid = queued_activity(client, total=1, starts_in=60)["id"]
    headers = {**user_headers("ann"), "Content-Type": "application/json"}
    expect(client.post(f"/seckill/{aid}/queue", data=body, headers=headers), 400,
           "bad_request")
    assert poll(client, aid, "ann")["status"] == "none"
    expect(client.post(f"/seckill/{aid}/queue", data=b"", headers=headers), 200)


def test_a_first_come_activity_has_no_queue(client: FlaskClient, make_activity: Any) -> None:
    aid = make_activity()["id"]
    expect(join(client, aid, "ann"), 400, "bad_request")
    expect(client.get(f"/seckill/{aid}/queue", headers=user_headers("ann")), 400, "bad_request")
    expect(client.get(f"/seckill/{aid}/queue/state"), 400, "bad_request")
    expect(join(client, "nope-none", "ann"), 404, "unknown_activity")
    expect(client.post(f"/seckill/{aid}/queue", json={"x": 1}, headers=user_headers("a")), 400,
           "bad_request")
    expect(client.get(f"/seckill/{aid}/queue"), 401, "unauthenticated")


def test_the_pre_queue_order_is_unrelated_to_the_join_order_and_later_joiners_queue_in_order(
        client: FlaskClient) -> None:
    """2,000 users join before the start in a known order; at the start their places' rank
    correlation with that order is below 0.1 in absolute value. Joiners after the start are
    placed in arrival order, behind them all."""
    users = [f"early{i:04d}" for i in range(2000)]
    # The joins must all land before the start: time 200 joins on a queue of their own and
    # give the 2,000 twice the time that rate takes (a loaded machine joins slower).
    trial = queued_activity(client, total=1, starts_in=60)["id"]
    began = time.perf_counter()
    for n in range(200):
        expect(join(client, trial, f"trial{n:03d}"), 200)
    budget = 2 * 10 * (time.perf_counter() - began) + 0.5
    activity = queued_activity(client, total=1, starts_in=budget)
    aid = activity["id"]
    for uid in users:
        expect(join(client, aid, uid), 200)
    assert time.time() * 1000 < activity["starts_ms"], "joining took past the start"
    wait_for_start(activity)
    places = {uid: poll(client, aid, uid).get("position", 0) for uid in users}
    assert sorted(places.values()) == list(range(0, 1999 + 1))  # one admitted, 1999 waiting
    rho = spearman([float(i) for i in range(len(users))], [float(places[u]) for u in users])
    assert abs(rho) < 0.1, rho
    late = [f"late{i:02d}" for i in range(20)]
    for uid in late:
        expect(join(client, aid, uid), 200)
    assert [poll(client, aid, uid)["position"] for uid in late] == list(range(2000, 2020))


def test_admissions_never_exceed_the_units_left_times_the_factor(
        client: FlaskClient, make_app: Any) -> None:
    activity = queued_activity(client, total=3, starts_in=1)
    aid = activity["id"]
    users = [f"u{i}" for i in range(10)]
    for uid in users:
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    assert state(client, aid)["admitted"] == 3
    bought = 0
    for uid in users:  # each admitted user buys; the bound holds after every step
        response = buy_admitted(client, aid, uid)
        if response is not None:
            expect(response, 200)
            bought += 1
        now = state(client, aid)
        assert now["admitted"] <= now["remaining"], now
    assert bought == 3
    assert {poll(client, aid, uid)["status"] for uid in users} == {"purchased", "sold_out"}
    # Units come back: a restock admits the next users at their next poll.
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 2}, headers=ADMIN), 200)
    assert [poll(client, aid, uid)["status"] for uid in users].count("admitted") == 2
    # The operator doubles the factor: twice as many admitted as units left.
    view = expect(client.post(f"/admin/activities/{aid}/admission", json={"factor": 2},
                              headers=ADMIN), 200)
    assert view["admission_factor"] == 2
    assert state(client, aid)["admitted"] == 4
    for bad in ({"factor": 0}, {"factor": "2"}, {"factor": 101}, {}, {"factor": True}):
        refused = expect(client.post(f"/admin/activities/{aid}/admission", json=bad,
                                     headers=ADMIN), 400, "bad_request")
        assert refused["field"] == "factor"


def test_a_cancel_admits_the_next_user(client: FlaskClient) -> None:
    activity = queued_activity(client, total=1, starts_in=0.5)
    aid = activity["id"]
    for uid in ("a", "b"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    winner = next(uid for uid in ("a", "b") if poll(client, aid, uid)["status"] == "admitted")
    order = expect(buy_admitted(client, aid, winner), 200)["order_id"]
    loser = "b" if winner == "a" else "a"
    assert poll(client, aid, loser)["status"] == "sold_out"
    expect(client.post(f"/admin/orders/{order}/cancel", headers=ADMIN), 200)
    assert poll(client, aid, loser)["status"] == "admitted"
    expect(buy_admitted(client, aid, loser), 200)


def test_an_unused_admission_lapses_and_the_next_user_is_admitted(make_app: Any) -> None:
    app: Flask = make_app(SECKILL_URL_TTL="1")
    client = app.test_client()
    activity = queued_activity(client, total=1, starts_in=0.5)
    aid = activity["id"]
    for uid in ("a", "b"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    first = next(uid for uid in ("a", "b") if poll(client, aid, uid)["status"] == "admitted")
    second = "b" if first == "a" else "a"
    assert poll(client, aid, second)["status"] == "waiting"
    wait_past(poll(client, aid, first)["expires_at"])
    assert poll(client, aid, second)["status"] == "admitted"
    lapsed = poll(client, aid, first)
    assert (lapsed["status"], lapsed.get("lapsed")) == ("none", True)
    expect(join(client, aid, first), 200)  # back in, at the end of the queue
    assert poll(client, aid, first)["position"] == 1


def test_the_draw_is_the_one_its_seed_gives_and_its_waiting_list_follows_lapses(
        make_app: Any) -> None:
    app: Flask = make_app(SECKILL_URL_TTL="1")
    client = app.test_client()
    activity = queued_activity(client, "draw", total=3, starts_in=1.5)
    aid = activity["id"]
    entries = [f"entrant{i:02d}" for i in range(12)]
    for uid in reversed(entries):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    expect(join(client, aid, "too-late"), 403, "entries_closed")
    seed = expect(client.get(f"/seckill/activities/{aid}"), 200)["draw_seed"]
    drawn = independent_order(seed, entries)
    statuses = {uid: poll(client, aid, uid) for uid in entries}
    winners = [uid for uid in entries if statuses[uid]["status"] == "admitted"]
    assert sorted(winners) == sorted(drawn[:3])
    for place, uid in enumerate(drawn[3:], start=1):
        assert (statuses[uid]["status"], statuses[uid]["position"]) == ("not_drawn", place)
    expect(buy_admitted(client, aid, drawn[0]), 200)  # one winner buys, two let it lapse
    wait_past(max(statuses[uid]["expires_at"] for uid in drawn[1:3]))
    after = {uid: poll(client, aid, uid)["status"] for uid in drawn}
    assert after[drawn[0]] == "purchased"
    assert [after[uid] for uid in drawn[3:5]] == ["admitted", "admitted"]
    assert after[drawn[5]] == "not_drawn"


def test_the_queue_keys_share_the_activity_slot_and_a_rebuild_keeps_the_admission(
        client: FlaskClient, app: Flask, rds: Any) -> None:
    """Every key the queue scripts touch is in the activity's slot (one cluster master); after
    Redis loses the activity, the rebuild from the database keeps its admission, its seed (the
    same draw) and the operator's factor."""
    from redis.cluster import key_slot

    from seckill.store.sale.admission.queue import queue_keys

    services = app.extensions["seckill"]
    draw = queued_activity(client, "draw", total=2, starts_in=30)
    aid = draw["id"]
    keys = queue_keys(services.keys, aid)
    assert len({key_slot(key.encode()) for key in keys}) == 1, keys
    expect(client.post(f"/admin/activities/{aid}/admission", json={"factor": 1.5},
                       headers=ADMIN), 200)
    rds.delete(services.keys.meta(aid))  # Redis lost it
    services.cache.forget(aid)
    assert join(client, aid, "after-loss").status_code == 200  # rebuilt on the way
    again = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert (again["admission"], again["draw_commitment"], again["admission_factor"]) == (
        "draw", draw["draw_commitment"], 1.5)


def test_an_expired_payment_hold_reopens_the_queue(client: FlaskClient, app: Flask) -> None:
    """The only unit is bought and held; the buyer never pays; when the hold expires the
    unit is back and the next waiter is admitted (the queue reopens by itself)."""
    import threading

    from seckill.worker.expiry import Expirer
    from seckill.worker.stop import StopFlag

    services = app.extensions["seckill"]
    activity = queued_activity(client, total=1, starts_in=0.5, payment_window=1)
    aid = activity["id"]
    for uid in ("first", "second"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    winner = next(u for u in ("first", "second") if poll(client, aid, u)["status"] == "admitted")
    other = "second" if winner == "first" else "first"
    assert "pay_by" in expect(buy_admitted(client, aid, winner), 200)
    assert poll(client, aid, other)["status"] == "sold_out"
    expirer = Expirer(services.client, services.keys, services.book, refresh_seconds=0.2)
    stop = StopFlag()
    thread = threading.Thread(target=expirer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while poll(client, aid, other)["status"] != "admitted":
            assert time.monotonic() < deadline, poll(client, aid, other)
            time.sleep(0.1)
    finally:
        stop.event.set()
        thread.join(timeout=5)
    expect(join(client, aid, winner), 409, "hold_expired")
    expect(buy_admitted(client, aid, other), 200)



def test_a_paused_queue_admits_no_one_and_keeps_its_order(client: FlaskClient) -> None:
    activity = queued_activity(client, total=2, starts_in=0.5)
    aid = activity["id"]
    for uid in ("a", "b"):
        expect(join(client, aid, uid), 200)
    expect(client.post(f"/admin/activities/{aid}/pause", headers=ADMIN), 200)
    wait_for_start(activity)
    for uid in ("a", "b"):
        assert poll(client, aid, uid)["status"] == "waiting"
    assert state(client, aid)["admitted"] == 0
    expect(client.post(f"/admin/activities/{aid}/resume", headers=ADMIN), 200)
    assert {poll(client, aid, uid)["status"] for uid in ("a", "b")} == {"admitted"}
    expect(buy_admitted(client, aid, "a"), 200)
