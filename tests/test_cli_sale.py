"""``seckill activity list|pause|resume|end`` and the product options of ``create``, run as
real processes against the stores a gateway is serving."""

from __future__ import annotations

import json

from tests.support.api import buy, expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.cli import assert_one_line_error, seckill


def test_an_operator_runs_a_sale_from_the_command_line(client, env):
    made = seckill("activity", "create", "--id", "clisale", "--name", "Phone", "--total", "3",
                   "--duration", "3600", "--description", "Two cameras", "--image-url",
                   "/img/phone.png", "--price", "499.99", "--currency", "USD", env=env)
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert (view["description"], view["image_url"], view["price"]) == (
        "Two cameras", "/img/phone.png", {"amount": 49999, "currency": "USD"})
    soon = seckill("activity", "create", "--id", "clisoon", "--name", "Later", "--total", "1",
                   "--starts-in", "600", "--duration", "3600", env=env)
    assert soon.returncode == 0, soon.stderr
    assert buy(client, "clisale", "alice").status_code == 200

    listed = seckill("activity", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["id"], r["state"], r["sold"]) for r in rows] == [
        ("clisale", "open", 1), ("clisoon", "upcoming", 0)]
    table = seckill("activity", "list", env=env).stdout.splitlines()
    assert table[0].split() == ["id", "state", "paused", "remaining", "total", "sold",
                                "starts_at", "ends_at"]
    assert table[1].split()[:6] == ["clisale", "open", "no", "2", "3", "1"]

    paused = seckill("activity", "pause", "clisale", env=env)
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout)["paused"] is True
    only = seckill("activity", "list", "--state", "paused", "--json", env=env).stdout
    assert [json.loads(line)["id"] for line in only.splitlines()] == ["clisale"]
    client.application.extensions["seckill"].cache.forget("clisale")  # heard at once anyway
    expect(buy(client, "clisale", "bob"), 503, "paused")
    assert json.loads(seckill("activity", "resume", "clisale", env=env).stdout)["paused"] is False
    assert buy(client, "clisale", "bob").status_code == 200

    ended = seckill("activity", "end", "clisale", env=env)
    assert ended.returncode == 0, ended.stderr
    assert json.loads(ended.stdout)["state"] == "ended"
    assert_one_line_error(seckill("activity", "end", "clisale", env=env), 1, "already_ended")
    assert_one_line_error(seckill("activity", "pause", "nosuch", env=env), 1, "no activity")
    assert_one_line_error(seckill("activity", "create", "--id", "x", "--name", "X", "--total",
                                  "1", "--duration", "60", "--price", "1.005", env=env),
                          2, "price")
    assert_one_line_error(seckill("activity", "create", "--id", "x", "--name", "X", "--total",
                                  "1", "--duration", "60", "--image-url", "http://x/y",
                                  env=env), 2, "image_url")
