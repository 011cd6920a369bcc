"""One application layer of operator actions (``seckill.operator``): the admin API and the
``seckill`` command take the same path, so what one door does the other does too. Real
Valkey, real database, the command run in-process through its entry point."""

from __future__ import annotations

import json

import pytest

from seckill.domain.clock import now_ms
from seckill.domain.operators import ADMIN as ADMIN_ROLE
from seckill.domain.operators import Operator
from tests.support.api import buy, expect
from tests.support.cli import assert_one_line_error, seckill
from tests.support.timing import iso, wait_until
from tests.support.tokens import ADMIN, user_headers

BY = Operator("layer-test", ADMIN_ROLE)  # who the actions called directly are by


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


# -- the layer itself, called as both doors call it --------------------------------------


def test_checked_add_refuses_what_is_not_a_whole_number_of_units_in_bounds() -> None:
    from seckill.domain.activities import MAX_TOTAL
    from seckill.domain.errors import BadRequest
    from seckill.operator.activities import checked_add

    assert checked_add(-MAX_TOTAL) == -MAX_TOTAL and checked_add(MAX_TOTAL) == MAX_TOTAL
    for bad in (MAX_TOTAL + 1, -MAX_TOTAL - 1, True, 1.0, "1", None):
        with pytest.raises(BadRequest) as refused:
            checked_add(bad)
        assert refused.value.extra == {"field": "add"}


def test_the_actions_write_announce_and_return_the_activity_as_it_is_now(app, rds,
                                                                       prefix) -> None:
    from seckill.domain import errors
    from seckill.operator import activities, levers, orders

    services = app.extensions["seckill"]
    client = app.test_client()
    with pytest.raises(errors.UnknownActivity):
        activities.find(services, "layer-one")  # this process now remembers it unknown
    made = activities.create(services, activities.new_activity({
        "id": "layer-one", "name": "Layer", "total": 2, "starts_at": iso(-5),
        "ends_at": iso(600)}), by=BY)
    assert activities.find(services, "layer-one").total == made.total == 2  # forgotten here

    bought = expect(buy(client, "layer-one", "ann"), 200)
    restocked = activities.restock(services, made, 3, by=BY)
    assert (restocked.total, restocked.remaining) == (5, 4)
    assert rds.hget(f"{prefix}:{{layer-one}}:meta", "total") == "5"

    cancelled = orders.cancel(services, bought["order_id"], by=BY)
    assert (cancelled.order_id, cancelled.remaining) == (bought["order_id"], 5)
    with pytest.raises(errors.AlreadyCancelled):
        orders.cancel(services, bought["order_id"], by=BY)

    paused = levers.pause(services, activities.find(services, "layer-one"), by=BY)
    assert paused.paused and activities.find(services, "layer-one").paused
    expect(client.get("/seckill/url?activity=layer-one", headers=user_headers("bo")), 503,
           "paused")
    assert not levers.resume(services, paused, by=BY).paused
    edited = activities.edit(services, paused, {"name": "Layer 2"}, by=BY)
    assert activities.find(services, "layer-one").name == edited.name == "Layer 2"
    with pytest.raises(errors.BadRequest) as no_queue:
        levers.set_admission_factor(services, edited, 2.0, by=BY)
    assert no_queue.value.extra == {"field": "admission"}
    ended = levers.end(services, edited, by=BY)
    assert ended.ends_ms <= now_ms()
    with pytest.raises(errors.AlreadyEnded):
        levers.end(services, ended, by=BY)
