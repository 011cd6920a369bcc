"""The operator's blocks: the admin API and the command, the refusal on the URL, the
queue and the purchase (whatever the buyer already holds), and no Redis call for it.

Real servers: the session's Valkey (a private one where commands are counted), a SQLite file
per test, the ``seckill`` command as a process. The gunicorn instances: test_blocks_instances.
"""

from __future__ import annotations

import json
import time
from typing import Any

from flask.testing import FlaskClient

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.admission import join, poll, queued_activity, wait_for_start
from tests.support.api import buy, create_activity, expect
from tests.support.cli import assert_one_line_error, seckill
from tests.support.command_counts import Counts, commands_by_connection, observer  # noqa: F401
from tests.support.database_faults import move_sqlite
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, user_headers


def block(client: FlaskClient, **body: Any) -> dict[str, Any]:
    return expect(client.post("/admin/blocks", json=body, headers=ADMIN), 201)


def listed(client: FlaskClient, query: str = "") -> dict[str, Any]:
    return expect(client.get(f"/admin/blocks{query}", headers=ADMIN), 200)


def url_of(client: FlaskClient, aid: str, uid: str) -> str:
    got = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)), 200)
    return str(got["url"])


def asks_url(client: FlaskClient, aid: str, uid: str) -> int:
    """The status of ``uid``'s ``GET /seckill/url`` (which buys nothing)."""
    return client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)).status_code


def test_a_blocked_user_is_refused_everywhere_until_the_block_is_lifted(client):
    aid = create_activity(client)["id"]
    other = create_activity(client)["id"]
    held = url_of(client, aid, "mallory")  # signed before the block: refused all the same
    made = block(client, user="mallory", reason="farm of 50 accounts")
    assert made["user"] == "mallory" and made["activity"] is None
    assert made["reason"] == "farm of 50 accounts" and made["created_at"].endswith("Z")
    for refused in (client.get(f"/seckill/url?activity={aid}", headers=user_headers("mallory")),
                    client.post(held, headers=user_headers("mallory")),
                    client.get(f"/seckill/url?activity={other}",
                               headers=user_headers("mallory"))):
        assert expect(refused, 403, "blocked")["message"]
        assert refused.headers["X-Seckill-Outcome"] == "blocked"
    assert buy(client, aid, "alice").status_code == 200  # nobody else

    lifted = expect(client.delete("/admin/blocks/user/mallory", headers=ADMIN), 200)
    assert lifted["user"] == "mallory" and lifted["reason"] == "farm of 50 accounts"
    expect(client.delete("/admin/blocks/user/mallory", headers=ADMIN), 404, "unknown_block")
    assert listed(client) == {"blocks": []}
    expect(client.post(held, headers=user_headers("mallory")), 200)


def test_a_new_process_refuses_the_blocked_from_its_first_answer(client, make_app):
    aid = create_activity(client)["id"]
    block(client, user="mallory")
    fresh = make_app().test_client()  # another gateway process on the same stores
    expect(fresh.get(f"/seckill/url?activity={aid}", headers=user_headers("mallory")), 403,
           "blocked")


def test_a_block_on_one_activity_leaves_the_others_and_blocking_again_replaces_the_reason(
        client):
    aid = create_activity(client)["id"]
    other = create_activity(client)["id"]
    block(client, user="eve", activity=aid)
    again = block(client, user="eve", activity=aid, reason="second look")
    assert (again["activity"], again["reason"]) == (aid, "second look")
    assert [b["reason"] for b in listed(client)["blocks"]] == ["second look"]
    expect(buy(client, aid, "eve"), 403, "blocked")
    expect(buy(client, other, "eve"), 200)
    # The lift names the block: without ?activity it is the one on every activity (none here).
    missing = expect(client.delete("/admin/blocks/user/eve", headers=ADMIN), 404,
                     "unknown_block")
    assert (missing["user"], missing["activity"]) == ("eve", None)
    expect(client.delete(f"/admin/blocks/user/eve?activity={aid}", headers=ADMIN), 200)
    expect(buy(client, aid, "eve"), 200)


def test_the_list_is_paginated_like_the_activities(client):
    for n in range(5):
        block(client, user=f"u{n}")
    block(client, person="p-1")
    first = listed(client, "?limit=2")
    assert [b.get("user") for b in first["blocks"]] == ["u0", "u1"]
    second = listed(client, f"?limit=2&cursor={first['next']}")
    assert [b.get("user") for b in second["blocks"]] == ["u2", "u3"]
    expect(client.delete("/admin/blocks/user/u4", headers=ADMIN), 200)
    last = listed(client, f"?limit=2&cursor={second['next']}")
    assert last["blocks"] == [{"person": "p-1", "activity": None, "reason": None,
                               "created_at": last["blocks"][0]["created_at"]}]
    assert "next" not in last
    assert len(listed(client)["blocks"]) == 5  # default 50 a page


BAD_BLOCKS = [
    ({"user": "a", "person": "b"}, "fields", ["user", "person"]),
    ({}, "fields", ["user", "person"]),
    ({"activity": "x"}, "fields", ["user", "person"]),
    ({"user": "bad/id"}, "field", "user"),
    ({"user": ""}, "field", "user"),
    ({"user": 7}, "field", "user"),
    ({"user": "x" * 65}, "field", "user"),
    ({"person": "p" * 129}, "field", "person"),
    ({"person": "a b"}, "field", "person"),
    ({"person": None}, "field", "person"),
    ({"user": "a", "reason": "r" * 201}, "field", "reason"),
    ({"user": "a", "reason": "nul\u0000inside"}, "message", "a text in the body holds a NUL "
     "character (\\u0000)"),
    ({"user": "a", "reason": "line\nbreak"}, "field", "reason"),
    ({"user": "a", "reason": 5}, "field", "reason"),
    ({"user": "a", "activity": "a/b"}, "field", "activity"),
    ({"user": "a", "activity": ""}, "field", "activity"),
    ({"user": "a", "activity": 12}, "field", "activity"),
    ({"user": "a", "until": 5}, "fields", ["until"]),
    (["user", "a"], None, None),
    ("user", None, None),
]


def test_every_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(client):
    for body, key, value in BAD_BLOCKS:
        refused = expect(client.post("/admin/blocks", json=body, headers=ADMIN), 400,
                         "bad_request")
        if key is not None:
            assert refused[key] == value, (body, refused)
    assert expect(client.post("/admin/blocks", data=b"{", headers=ADMIN), 400, "bad_request")
    missing = expect(client.post("/admin/blocks", json={"user": "a", "activity": "nosuch"},
                                 headers=ADMIN), 404, "unknown_activity")
    assert missing["activity"] == "nosuch"
    expect(client.delete("/admin/blocks/users/a", headers=ADMIN), 404, "not_found")
    for path, field in (("/admin/blocks/user/a!b", "user"), ("/admin/blocks/user/a:b", "user"),
                        (f"/admin/blocks/user/{'u' * 65}", "user"),
                        ("/admin/blocks/person/a%20b", "person"),
                        ("/admin/blocks/user/a?activity=", "activity"),
                        ("/admin/blocks/user/a?activity=a%2Fb", "activity")):
        refused = expect(client.delete(path, headers=ADMIN), 400, "bad_request")
        assert refused["field"] == field, path
    for query, field in (("?limit=0", "limit"), ("?limit=201", "limit"), ("?limit=x", "limit"),
                         ("?limit=\u0662", "limit"), ("?cursor=abc", "cursor"),
                         ("?cursor=-1", "cursor"), ("?cursor=" + "9" * 19, "cursor")):
        assert expect(client.get(f"/admin/blocks{query}", headers=ADMIN), 400,
                      "bad_request")["field"] == field, query
    expect(client.get("/admin/blocks?activity=%00", headers=ADMIN), 400, "bad_request")
    for call in (client.get("/admin/blocks"), client.post("/admin/blocks", json={"user": "a"}),
                 client.delete("/admin/blocks/user/a", headers=user_headers("a"))):
        expect(call, 401, "unauthenticated")
    assert listed(client) == {"blocks": []}


def test_a_blocked_buyer_with_a_queue_admission_is_refused_at_the_purchase(client):
    activity = queued_activity(client, total=2, starts_in=0.5)
    aid = activity["id"]
    for uid in ("ann", "bob"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    admitted = {uid: poll(client, aid, uid) for uid in ("ann", "bob")}
    assert {s["status"] for s in admitted.values()} == {"admitted"}
    block(client, user="ann", activity=aid)
    expect(client.post(admitted["ann"]["url"], headers=user_headers("ann")), 403, "blocked")
    expect(client.get(f"/seckill/{aid}/queue", headers=user_headers("ann")), 403, "blocked")
    expect(join(client, aid, "ann"), 403, "blocked")
    expect(client.post(admitted["bob"]["url"], headers=user_headers("bob")), 200)
    assert expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)["sold"] == 1


def test_refusing_the_blocked_costs_no_redis_call(make_app, private_valkey, observer):  # noqa: F811
    app = make_app(REDIS_URL=private_valkey.url)
    client = app.test_client()
    aid = create_activity(client)["id"]
    queued = queued_activity(client, starts_in=30)["id"]
    url = url_of(client, aid, "mallory")
    block(client, user="mallory")
    before = commands_by_connection(observer)
    headers = user_headers("mallory")
    for _ in range(20):
        expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 403, "blocked")
        expect(client.post(url, headers=headers), 403, "blocked")
        expect(client.post(f"/seckill/{queued}/queue", json={}, headers=headers), 403,
               "blocked")
        expect(client.get(f"/seckill/{queued}/queue", headers=headers), 403, "blocked")
    assert Counts(before, commands_by_connection(observer)).requests == 0


def test_blocks_from_the_command_line_reach_a_running_gateway(client, env):
    aid = create_activity(client)["id"]
    url = url_of(client, aid, "trudy")
    made = seckill("block", "--user", "trudy", "--activity", aid, "--reason", "chargebacks",
                   env=env)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["activity"] == aid
    since = time.monotonic()
    wait_until(lambda: asks_url(client, aid, "trudy") == 403, 2, what="the command's block")
    assert time.monotonic() - since < 1.0
    expect(client.post(url, headers=user_headers("trudy")), 403, "blocked")
    assert seckill("block", "--person", "pers-9", env=env).returncode == 0

    table = seckill("blocks", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["kind", "id", "activity", "created_at", "reason"]
    assert lines[1].split()[:3] == ["user", "trudy", aid] and lines[1].endswith("chargebacks")
    assert lines[2].split()[:3] == ["person", "pers-9", "(every)"]
    rows = [json.loads(line) for line in seckill("blocks", "--json", env=env).stdout.splitlines()]
    assert [(r.get("user"), r.get("person")) for r in rows] == [("trudy", None), (None, "pers-9")]
    assert rows == listed(client)["blocks"]

    assert seckill("unblock", "--user", "trudy", "--activity", aid, env=env).returncode == 0
    wait_until(lambda: asks_url(client, aid, "trudy") == 200, 2, what="the lift")
    expect(client.post(url, headers=user_headers("trudy")), 200)
    assert_one_line_error(seckill("unblock", "--user", "trudy", "--activity", aid, env=env), 1,
                          "unknown_block")
    assert_one_line_error(seckill("block", "--user", "a/b", env=env), 2, "user")
    assert_one_line_error(seckill("block", "--user", "a", "--reason", "r" * 201, env=env), 2,
                          "reason")
    assert_one_line_error(seckill("block", "--user", "a", "--activity", "nosuch", env=env), 1,
                          "no activity")
    both = seckill("block", "--user", "a", "--person", "b", env=env)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_while_the_database_cannot_be_read_the_last_copy_stays_and_the_sale_goes_on(
        make_app, private_valkey: EmbeddedValkey, tmp_path):
    """The blocks' database away: the process keeps the blocks it last read (the purchase
    needs only Redis) and says so in its log; it follows them again once it can read them."""
    database = tmp_path / "orders.db"
    app = make_app(REDIS_URL=private_valkey.url, DATABASE_URL=f"sqlite:///{database}")
    client = app.test_client()
    aid = create_activity(client)["id"]
    block(client, user="mallory", activity=aid)
    expect(buy(client, aid, "mallory"), 403, "blocked")
    watch = app.extensions["seckill"].blocks
    watch.book.engine.dispose()
    # The whole database away (with its WAL journal, which holds what was not checkpointed
    # yet): a new, empty database in its place, no tables.
    move_sqlite(database, tmp_path / "away.db")
    try:
        wait_until(lambda: watch.failing, 3, what="the failing reading")
        expect(buy(client, aid, "alice"), 200)
        expect(buy(client, aid, "mallory"), 403, "blocked")
    finally:
        watch.book.engine.dispose()
        move_sqlite(tmp_path / "away.db", database)
        watch.book.engine.dispose()
    wait_until(lambda: not watch.failing, 3, what="the database again")
