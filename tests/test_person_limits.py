"""Limits per person: ``SECKILL_PERSON_CLAIM`` and ``"limit_by": "person"``, through
the gateway (in-process, the hot routes included) on the session's Valkey and a SQLite file.

The claim (absent, malformed: 401), the activity field (400s, the view), 403
``verification_required`` on every route of a person-limited activity, 30 accounts of one
person racing for one purchase, the person's order seen from any of their accounts (and its id
in the 409), ``hold_expired`` per person, the order in the database naming the account, a
rebuild, a purchase's one round trip, the sold-out flag's winners, and a sharded activity on
the cluster (one home part per person, a borrow settled for the person). The queue and the
draw: tests/test_person_queue.py.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from edge.purchase_url import PurchaseUrlSigner
from seckill.domain.clock import now_ms
from seckill.domain.people import PERSON_KEY
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.worker.expiry import Expirer
from tests.support.api import create_activity, expect
from tests.support.orders import built_worker, drain
from tests.support.people import CLAIM, buy_as, headers, person_activity, status_as
from tests.support.timing import iso
from tests.support.tokens import ADMIN, URL_KEY


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The gateway's environment, naming the person claim."""
    return {**env, "SECKILL_PERSON_CLAIM": CLAIM}


# -- the claim and the field -----------------------------------------------------------------


@pytest.mark.parametrize("bad", [12345, None, "x" * 129, "p" * 500, "a b", "a/b", "é", "", True,
                                 ["a"], {"id": "a"}])
def test_a_malformed_person_claim_makes_the_token_invalid(client: FlaskClient, bad: Any) -> None:
    aid = create_activity(client)["id"]  # an activity limited by user: the token is still bad
    body = expect(client.get(f"/seckill/url?activity={aid}", headers=headers("ann", bad)), 401,
                  "unauthenticated")
    assert CLAIM in body["message"]
    expect(client.get(f"/seckill/{aid}/order", headers=headers("ann", bad)), 401,
           "unauthenticated")


def test_a_token_without_the_claim_buys_where_accounts_count_but_not_where_people_do(
        client: FlaskClient) -> None:
    by_user = create_activity(client)
    assert "limit_by" not in by_user  # the default, "user", is not shown
    expect(buy_as(client, by_user["id"], "ann", None), 200)
    expect(buy_as(client, by_user["id"], "bob", "person-1"), 200)  # a claim changes nothing
    aid = person_activity(client)
    for response in (
            client.get(f"/seckill/url?activity={aid}", headers=headers("ann")),
            client.post(f"/seckill/{aid}/1.2.3/buy", headers=headers("ann")),
            client.get(f"/seckill/{aid}/order", headers=headers("ann"))):
        expect(response, 403, "verification_required")
    assert client.get(f"/seckill/activities/{aid}").get_json()["remaining"] == 10
    expect(buy_as(client, aid, "ann", "person-1"), 200)


def test_limit_by_is_validated_and_needs_the_claim(client: FlaskClient,
                                                   make_app: Any) -> None:
    for bad in ("people", "", None, 1, ["person"]):
        body = expect(client.post("/admin/activities", headers=ADMIN, json={
            "id": f"a{uuid.uuid4().hex[:8]}", "name": "x", "total": 1, "starts_at": iso(-1),
            "ends_at": iso(60), "limit_by": bad}), 400, "bad_request")
        assert body["field"] == "limit_by"
    body = expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": "pk1", "name": "x", "kind": "packets", "amount": 100, "count": 2,
        "starts_at": iso(-1), "ends_at": iso(60), "limit_by": "person"}), 400, "bad_request")
    assert body["field"] == "limit_by"
    unclaimed = make_app(SECKILL_PERSON_CLAIM="").test_client()
    body = expect(unclaimed.post("/admin/activities", headers=ADMIN, json={
        "id": "nop", "name": "x", "total": 1, "starts_at": iso(-1), "ends_at": iso(60),
        "limit_by": "person"}), 400, "bad_request")
    assert (body["field"], "SECKILL_PERSON_CLAIM" in body["message"]) == ("limit_by", True)
    expect(client.get("/seckill/activities/nop"), 404, "unknown_activity")  # nothing created


# -- the purchase ----------------------------------------------------------------------------


def test_thirty_accounts_of_one_person_racing_buy_once(
        app: Flask, client: FlaskClient, settings: Any, database_url: str,
        rds: Any, prefix: str) -> None:
    aid = person_activity(client, total=100, per_user_limit=1)
    accounts = [f"farm-{i}" for i in range(30)]
    start = threading.Barrier(len(accounts))
    answers: dict[str, Any] = {}

    def race(uid: str) -> None:
        own = app.test_client()
        url = expect(own.get(f"/seckill/url?activity={aid}", headers=headers(uid, "mallory")),
                     200)["url"]
        start.wait(10)
        answers[uid] = own.post(url, headers=headers(uid, "mallory"))

    threads = [threading.Thread(target=race, args=(uid,)) for uid in accounts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    codes = sorted(r.status_code for r in answers.values())
    assert codes == [200] + [409] * 29, codes
    winner = next(uid for uid, r in answers.items() if r.status_code == 200)
    order_id = answers[winner].get_json()["order_id"]
    for response in answers.values():
        if response.status_code == 409:
            assert response.get_json() == {**response.get_json(), "error": "already_purchased",
                                           "order_id": order_id}
    assert client.get(f"/seckill/activities/{aid}").get_json()["remaining"] == 99
    keys = KeySpace(prefix)
    buyers = rds.hgetall(keys.buyers(aid))
    assert len(buyers) == 1 and PERSON_KEY.fullmatch(next(iter(buyers))), buyers
    # The stream names the person's key and the account that bought; never the raw claim.
    [(_, entry)] = rds.xrange(keys.orders(aid))
    assert (entry["account"], PERSON_KEY.fullmatch(entry["user"]) is not None) == (winner, True)
    assert "mallory" not in repr(rds.hgetall(keys.meta(aid))) + repr(entry)
    with built_worker(settings) as worker:
        drain(worker)
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT order_id, user_id, account FROM seckill_orders "
                                    "WHERE activity_id = :aid"), {"aid": aid}).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(order_id, entry["user"], winner)]
    # Another person buys; the first person's other accounts still cannot.
    expect(buy_as(client, aid, "farm-0", "someone-else"), 200)
    expect(buy_as(client, aid, "fresh-account", "mallory"), 409, "already_purchased")


def test_the_person_s_order_and_expired_hold_are_seen_from_every_account(
        app: Flask, client: FlaskClient, rds: Any, prefix: str) -> None:
    aid = person_activity(client, total=2, payment_window=3600)
    bought = expect(buy_as(client, aid, "acct-a", "pat"), 200)
    status = status_as(client, aid, "acct-b", "pat")
    assert (status["status"], status["order_id"], status["payment"]) == (
        "pending", bought["order_id"], "due")
    assert status_as(client, aid, "acct-a", "sam")["status"] == "none"  # another person
    # Time passes, the test's way: the hold's pay_by moves into the past; one expiry step.
    keys = KeySpace(prefix)
    rds.zadd(keys.holds(aid), {bought["order_id"]: now_ms() - 1})
    services = app.extensions["seckill"]
    assert Expirer(services.client, services.keys, services.book).step() == 1
    for account in ("acct-a", "acct-b", "acct-c"):
        refused = expect(buy_as(client, aid, account, "pat"), 409, "hold_expired")
        assert refused["order_id"] == bought["order_id"]
        status = status_as(client, aid, account, "pat")
        assert (status["status"], status["payment"]) == ("cancelled", "expired")
    expect(buy_as(client, aid, "acct-a", "sam"), 200)  # the same account, another person


def test_a_rebuilt_person_activity_still_knows_its_people(
        app: Flask, client: FlaskClient, settings: Any, rds: Any, prefix: str) -> None:
    aid = person_activity(client, total=3)
    order_id = expect(buy_as(client, aid, "one", "quinn"), 200)["order_id"]
    with built_worker(settings) as worker:
        drain(worker)
    keys = KeySpace(prefix)
    for key in (keys.meta(aid), keys.buyers(aid), keys.orders(aid)):
        rds.delete(key)
    status = status_as(client, aid, "two", "quinn")  # rebuilt from the database
    assert (status["status"], status["order_id"]) == ("confirmed", order_id)
    expect(buy_as(client, aid, "three", "quinn"), 409, "already_purchased")
    expect(buy_as(client, aid, "two", "rita"), 200)


def test_a_person_s_purchase_is_one_round_trip_as_a_user_s(client: FlaskClient, rds: Any) -> None:
    """20 purchases on an activity limited by user, then 20 limited by person: the same one
    EVALSHA each, and as many server socket reads (the background threads' few aside)."""
    by_user = create_activity(client, total=100)["id"]
    by_person = person_activity(client, total=100)

    def counts() -> tuple[int, int]:
        calls: Any = rds.info("commandstats")
        reads: Any = rds.info("stats")
        return (int(calls.get("cmdstat_evalsha", {}).get("calls", 0)),
                int(reads["total_reads_processed"]))

    spent = {}
    for aid, person in ((by_user, None), (by_person, "someone")):
        sent = [headers(f"rt-{i}") if person is None else headers(f"rt-{i}", f"{person}-{i}")
                for i in range(21)]
        urls = [expect(client.get(f"/seckill/url?activity={aid}", headers=h), 200)["url"]
                for h in sent]
        expect(client.post(urls[0], headers=sent[0]), 200)  # warm: the copy, the script
        evalsha0, reads0 = counts()
        for url, h in zip(urls[1:], sent[1:], strict=True):
            expect(client.post(url, headers=h), 200)
        evalsha1, reads1 = counts()
        spent[aid] = (evalsha1 - evalsha0, reads1 - reads0)
    assert spent[by_user][0] == spent[by_person][0] == 20, spent
    assert spent[by_person][1] <= spent[by_user][1] + 10, spent


@pytest.mark.parametrize("redis_backend", ["cluster"], indirect=True)
def test_a_sharded_activity_keeps_a_person_s_accounts_on_one_part(
        app: Flask, client: FlaskClient, rds: Any, prefix: str) -> None:
    """4 parts of 1 unit each, on the cluster; 12 accounts of one person race for 2 units: the
    home part (the person's) borrows a unit from another part and settles one order, which
    names the account; every other account is refused."""
    aid = person_activity(client, total=4, shards=4, per_user_limit=2)
    accounts = [f"shard-{i}" for i in range(12)]
    urls = {uid: expect(client.get(f"/seckill/url?activity={aid}",
                                   headers=headers(uid, "sharer")), 200)["url"]
            for uid in accounts}
    start = threading.Barrier(len(accounts))
    answers: dict[str, Any] = {}

    def race(uid: str) -> None:
        own = app.test_client()
        start.wait(10)
        answers[uid] = own.post(urls[uid], json={"quantity": 2}, headers=headers(uid, "sharer"))

    threads = [threading.Thread(target=race, args=(uid,)) for uid in accounts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [uid for uid, r in answers.items() if r.status_code == 200]
    assert len(winners) == 1, {u: r.get_json() for u, r in answers.items()}
    refused = {r.get_json()["error"] for r in answers.values() if r.status_code != 200}
    assert refused <= {"already_purchased", "purchase_in_progress"}, refused
    order_id = answers[winners[0]].get_json()["order_id"]
    for uid in accounts[:4]:  # once settled, every account gets the person's order
        again = expect(client.post(urls[uid], json={"quantity": 2},
                                   headers=headers(uid, "sharer")), 409, "already_purchased")
        assert again["order_id"] == order_id
    keys = KeySpace(prefix)
    entries = [fields for tag in part_tags(aid, 4) for _, fields in rds.xrange(keys.orders(tag))
               if fields.get("type", "purchase") == "purchase"]
    assert [(e["order_id"], e["account"], e["quantity"]) for e in entries] == [
        (order_id, winners[0], "2")]
    assert client.get(f"/seckill/activities/{aid}").get_json()["remaining"] == 2
    expect(buy_as(client, aid, "shard-0", "other-person"), 200)


def test_the_sold_out_flag_knows_the_winning_people(client: FlaskClient, app: Flask,
                                                    rds: Any) -> None:
    """Once this process flags the activity sold out, the edge answers from the flag (no
    Redis): the winner's other accounts get the person's order, other people 410, a token
    naming no person 403."""
    aid = person_activity(client, total=1)
    order_id = expect(buy_as(client, aid, "w-1", "winner"), 200)["order_id"]
    signer = PurchaseUrlSigner([URL_KEY], 60)
    expect(client.post(f"/seckill/{aid}/{signer.sign(aid, 'l-1')[0]}/buy",
                       headers=headers("l-1", "loser")), 410, "sold_out")  # raises the flag
    assert app.extensions["seckill"].board.is_flagged(aid)
    scripts_run = int(rds.info("commandstats")["cmdstat_evalsha"]["calls"])
    for uid, person, code, error in (("w-2", "winner", 409, "already_purchased"),
                                     ("l-2", "loser", 410, "sold_out"),
                                     ("n-1", None, 403, "verification_required")):
        sent = headers(uid) if person is None else headers(uid, person)
        url = f"/seckill/{aid}/{signer.sign(aid, uid)[0]}/buy"
        body = expect(client.post(url, headers=sent), code, error)
        if code == 409:
            assert body["order_id"] == order_id
    assert int(rds.info("commandstats")["cmdstat_evalsha"]["calls"]) == scripts_run
