"""One application layer of operator actions (``seckill.operator``): the admin API and the
``seckill`` command take the same path, so what one door does the other does too (issue #24,
item 1). Real Valkey, real database, the command run as a real process."""

from __future__ import annotations

import json

from tests.conftest import ADMIN, buy, expect
from tests.faults import wait_until
from tests.test_cli import assert_one_line_error, seckill


def _listeners(rds, channel: str) -> int:
    return int(dict(rds.pubsub_numsub(channel)).get(channel, 0))


def test_a_create_from_the_command_line_is_heard_by_a_process_that_found_the_id_unknown(
        env, make_app, rds, prefix) -> None:
    """The admin API's create tells every process (they forget a remembered "unknown"); the
    command's create did not, so a process asked for the id before stayed at 404 until its
    refresh (an hour here)."""
    app = make_app(SECKILL_META_TTL="3600")
    client = app.test_client()
    aid = "cli-late"
    expect(client.get(f"/seckill/activities/{aid}"), 404, "unknown_activity")
    channel = f"{prefix}:stock-returned"
    # The process listens for announcements once it remembers an id (unknown ones included).
    wait_until(lambda: _listeners(rds, channel) >= 1, 5.0, what="the process listening")

    created = seckill("activity", "create", "--id", aid, "--name", "Late", "--total", "2",
                      "--starts-in", "-5", "--duration", "600", env=env)
    assert created.returncode == 0, created.stderr

    wait_until(lambda: client.get(f"/seckill/activities/{aid}").status_code == 200, 1.0,
               what="the other process knowing the new activity")
    assert expect(buy(client, aid, "ann"), 200)["quantity"] == 1


def test_the_restock_bound_is_refused_in_the_same_words_by_both_doors(
        env, client, make_activity) -> None:
    aid = make_activity(total=3)["id"]
    too_many = 10**12
    web = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": too_many},
                             headers=ADMIN), 400, "bad_request")
    cli = seckill("activity", "restock", aid, str(too_many), env=env)
    assert_one_line_error(cli, 2, web["message"])
    assert cli.stderr.strip() == f"seckill: {web['message']}"
    shown = json.loads(seckill("activity", "show", aid, env=env).stdout)
    assert (shown["total"], shown["remaining"]) == (3, 3)
