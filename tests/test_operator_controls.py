"""The operator's levers on a live sale: the list of activities, pause, resume and end (on one
server and on a cluster), and what a paused sale answers in every process."""

from __future__ import annotations

import time

import pytest

from tests.support.api import buy, create_activity, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.command_counts import Counts, commands_by_connection, observer  # noqa: F401
from tests.support.timing import iso, wait_until
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database


def lever(client, aid, action):
    return client.post(f"/admin/activities/{aid}/{action}", headers=ADMIN)


def listing(client, query=""):
    return expect(client.get(f"/admin/activities{query}", headers=ADMIN), 200)


@BOTH_BACKENDS
def test_the_list_shows_every_activity_with_its_state_and_numbers_page_by_page(
        client, make_activity):
    opened = make_activity(id="a-open", total=3)["id"]
    make_activity(id="b-soon", total=5, starts_at=iso(600), ends_at=iso(1200))
    sold_out = make_activity(id="c-gone", total=1)["id"]
    paused = make_activity(id="d-paused", total=2, shards=2)["id"]
    assert buy(client, opened, "alice").status_code == 200
    assert buy(client, sold_out, "bob").status_code == 200
    expect(lever(client, paused, "pause"), 200)

    every = listing(client)
    assert "next" not in every
    rows = {row["id"]: row for row in every["activities"]}
    assert list(rows) == ["a-open", "b-soon", "c-gone", "d-paused"]
    assert (rows["a-open"]["state"], rows["a-open"]["remaining"], rows["a-open"]["sold"]) == (
        "open", 2, 1)
    assert (rows["c-gone"]["state"], rows["c-gone"]["sold"]) == ("sold_out", 1)
    assert rows["b-soon"]["state"] == "upcoming"
    assert rows["d-paused"]["paused"] is True and rows["d-paused"]["total"] == 2
    assert rows["a-open"]["paused"] is False

    for state, ids in {"open": ["a-open"], "upcoming": ["b-soon"], "sold_out": ["c-gone"],
                       "paused": ["d-paused"], "ended": []}.items():
        found = listing(client, f"?state={state}")["activities"]
        assert [row["id"] for row in found] == ids, state

    seen, cursor, pages = [], None, 0
    while True:
        page = listing(client, "?limit=1" + (f"&cursor={cursor}" if cursor else ""))
        seen += [row["id"] for row in page["activities"]]
        pages += 1
        cursor = page.get("next")
        if cursor is None:
            break
    assert seen == list(rows) and pages == 4


def test_the_list_refuses_bad_queries_and_strangers(client, make_activity):
    make_activity()
    for query in ("?state=closed", "?limit=0", "?limit=201", "?limit=x", "?cursor=a%20b"):
        expect(client.get(f"/admin/activities{query}", headers=ADMIN), 400, "bad_request")
    expect(client.get("/admin/activities"), 401, "unauthenticated")
    expect(client.get("/admin/activities", headers=user_headers("alice")), 401,
           "unauthenticated")
    for action in ("pause", "resume", "end"):
        expect(lever(client, "nope", action), 404, "unknown_activity")
        expect(client.post(f"/admin/activities/nope/{action}"), 401, "unauthenticated")


@BOTH_BACKENDS
def test_a_paused_sale_issues_no_url_and_sells_nothing_until_resumed(client, make_activity,
                                                                      rds, prefix):
    aid = make_activity(total=5)["id"]
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]

    body = expect(lever(client, aid, "pause"), 200)
    assert body["paused"] is True and body["remaining"] == 5
    refused = client.get(f"/seckill/url?activity={aid}", headers=headers)
    assert expect(refused, 503, "paused")["retry_after"] >= 1
    assert int(refused.headers["Retry-After"]) >= 1
    expect(client.post(url, headers=headers), 503, "paused")
    assert expect(client.get(f"/seckill/activities/{aid}"), 200)["paused"] is True
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "sold") == "0"

    assert expect(lever(client, aid, "resume"), 200)["paused"] is False
    expect(client.post(url, headers=headers), 200)
    assert expect(client.get(f"/seckill/activities/{aid}"), 200)["remaining"] == 4


@BOTH_BACKENDS
def test_the_purchase_script_refuses_a_paused_sale_so_a_stale_process_cannot_sell(
        make_app, rds, prefix):
    # Two gateway processes; the second never hears of the pause (its copies are an hour
    # old and it is told nothing): its purchase still gets to the script, which refuses.
    first = make_app().test_client()
    aid = create_activity(first, total=4, shards=2)["id"]
    stale = make_app(SECKILL_META_TTL="3600")
    stale_client = stale.test_client()
    headers = user_headers("bob")
    url = expect(stale_client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    services = stale.extensions["seckill"]
    services.board.close()  # the listener would drop its copy: this process stays stale
    expect(lever(first, aid, "pause"), 200)
    assert services.cache.get(aid).paused is False  # still the old copy
    expect(stale_client.post(url, headers=headers), 503, "paused")
    assert sum(int(rds.hget(key, "sold")) for key in rds.scan_iter(f"{prefix}:*:meta")) == 0


def test_a_pause_reaches_another_process_within_a_second_and_costs_it_no_redis_call(
        make_app, private_valkey, observer):  # noqa: F811
    operator = make_app(REDIS_URL=private_valkey.url).test_client()
    crowd_app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="3600")
    crowd = crowd_app.test_client()
    aid = create_activity(operator, total=100)["id"]
    users = [f"u{i}" for i in range(50)]
    urls = {uid: expect(crowd.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)),
                        200)["url"] for uid in users}

    expect(lever(operator, aid, "pause"), 200)
    paused_at = time.monotonic()  # the operator has the 200: from now, within a second
    wait_until(lambda: crowd.get(f"/seckill/url?activity={aid}",
                                 headers=user_headers("u0")).status_code == 503, 1.0,
               what="the other process answering paused")
    assert time.monotonic() - paused_at < 1.0

    before = commands_by_connection(observer)
    for uid in users:
        expect(crowd.post(urls[uid], headers=user_headers(uid)), 503, "paused")
        expect(crowd.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)), 503,
               "paused")
    assert Counts(before, commands_by_connection(observer)).requests == 0


@BOTH_BACKENDS
def test_end_closes_the_sale_now_everywhere_and_only_once(client, make_activity, rds, prefix):
    aid = make_activity(total=3)["id"]
    headers = user_headers("carol")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    body = expect(lever(client, aid, "end"), 200)
    assert body["state"] == "ended"
    expect(client.post(url, headers=headers), 410, "ended")
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 410, "ended")
    expect(lever(client, aid, "end"), 409, "already_ended")
    assert int(rds.hget(f"{prefix}:{{{aid}}}:meta", "ends_ms")) <= time.time() * 1000
    assert [row["id"] for row in listing(client, "?state=ended")["activities"]] == [aid]


@pytest.mark.parametrize("action", ["pause", "end"])
def test_a_lever_survives_redis_losing_the_activity(client, make_activity, rds, prefix,
                                                   app, action):
    """The database keeps the operator's choice: a rebuild after Redis lost the activity
    comes back paused (or ended), not open."""
    aid = make_activity(total=3)["id"]
    expect(lever(client, aid, action), 200)
    for key in list(rds.scan_iter(f"{prefix}:{{{aid}}}:*")):
        rds.delete(key)
    app.extensions["seckill"].cache.forget(aid)
    view = expect(client.get(f"/seckill/activities/{aid}"), 200)
    if action == "pause":
        assert view["paused"] is True
        expect(buy(client, aid, "dave"), 503, "paused")
    else:
        assert view["state"] == "ended"
        expect(buy(client, aid, "dave"), 410, "ended")



@BOTH_BACKENDS
def test_an_edit_changes_what_the_page_shows_in_every_process_and_nothing_else(
        client, make_app, rds, prefix):
    aid = create_activity(client, total=4, shards=2, description="old",
                          price={"amount": 100, "currency": "EUR"})["id"]
    other = make_app().test_client()
    assert expect(other.get(f"/seckill/activities/{aid}"), 200)["description"] == "old"
    body = expect(client.patch(f"/admin/activities/{aid}", headers=ADMIN, json={
        "name": "Phone X2", "description": None, "image_url": "/img/x2.png",
        "price": {"amount": 250, "currency": "USD"}}), 200)
    assert (body["name"], body["image_url"], body["price"]) == (
        "Phone X2", "/img/x2.png", {"amount": 250, "currency": "USD"})
    assert "description" not in body and body["total"] == 4
    wait_until(lambda: other.get(f"/seckill/activities/{aid}").get_json()["name"] == "Phone X2",
               1.0, what="the other process showing the edit")
    view = expect(other.get(f"/seckill/activities/{aid}"), 200)
    assert "description" not in view and view["price"]["currency"] == "USD"
    for bad in ({}, {"total": 5}, {"starts_at": iso(5)}, {"name": ""},
                {"price": {"amount": 1, "currency": "XXX"}}, [1]):
        expect(client.patch(f"/admin/activities/{aid}", headers=ADMIN, json=bad), 400,
               "bad_request")
    expect(client.patch("/admin/activities/nope", headers=ADMIN, json={"name": "x"}), 404,
           "unknown_activity")
    expect(client.patch(f"/admin/activities/{aid}", json={"name": "x"}), 401,
           "unauthenticated")
    assert expect(client.get(f"/seckill/activities/{aid}"), 200)["name"] == "Phone X2"


def test_the_operator_reads_one_activity_fresh_with_its_sales(client, make_activity):
    aid = make_activity(total=2)["id"]
    assert buy(client, aid, "erin").status_code == 200
    body = expect(client.get(f"/admin/activities/{aid}", headers=ADMIN), 200)
    assert (body["remaining"], body["sold"], body["paused"]) == (1, 1, False)
    expect(client.get("/admin/activities/nope", headers=ADMIN), 404, "unknown_activity")
    expect(client.get(f"/admin/activities/{aid}"), 401, "unauthenticated")
