"""``seckill activity create --kind packets`` (with its progress bar) and
``seckill activity restock``, run as real processes against the session's Valkey."""

from __future__ import annotations

import json

import redis

from tests.support.api import buy
from tests.support.cli import assert_one_line_error, seckill
from tests.support.timing import wait_until


def test_create_packets_shows_progress_and_the_packets_are_grabbed(env, client, rds,
                                                                   prefix) -> None:
    created = seckill("activity", "create", "--kind", "packets", "--id", "cli-hongbao",
                      "--name", "Lucky", "--amount", "2000000", "--count", "30000",
                      "--duration", "600", env=env)
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert (body["kind"], body["amount"], body["count"], body["remaining"]) == (
        "packets", 2_000_000, 30_000, 30_000)
    assert "seed" not in body
    # Not a terminal: one line per 10 %, from 0 to all of them (then the audit line).
    progress = [line for line in created.stderr.strip().splitlines() if " audit: " not in line]
    assert progress[0].startswith("30000 packets [") and " 0/30000 " in progress[0]
    assert " 30000/30000 100% " in progress[-1], progress
    assert 3 <= len(progress) <= 11, progress
    key = f"{prefix}:{{cli-hongbao}}:packets"
    assert rds.llen(key) == 30_000
    assert sum(int(p) for p in rds.lrange(key, 0, -1)) == 2_000_000

    grabbed = buy(client, "cli-hongbao", "alice")
    assert grabbed.status_code == 200, grabbed.get_json()
    assert grabbed.get_json()["amount"] >= 1

    refused = seckill("activity", "restock", "cli-hongbao", "5", env=env)
    assert_one_line_error(refused, 2, "packets cannot be restocked")


def test_create_packets_refuses_bad_options(env, rds, prefix) -> None:
    """The admin API's validation (tested in full over HTTP), said in one line."""
    cases = [
        (["--kind", "packets", "--amount", "5", "--count", "6"], "at least count"),
        (["--kind", "packets", "--amount", "500", "--count", "6", "--total", "6"],
         "total does not apply"),
        (["--total", "3", "--amount", "5"], "--amount is for --kind packets"),
    ]
    for extra, message in cases:
        result = seckill("activity", "create", "--id", "cli-bad", "--name", "Bad",
                         "--duration", "60", *extra, env=env)
        assert_one_line_error(result, 2, message)
    assert not list(rds.scan_iter(match=f"{prefix}:*", count=1000))


def test_restock_from_the_command_line(env, client, rds: redis.Redis, prefix) -> None:
    created = seckill("activity", "create", "--id", "cli-stock", "--name", "Phone",
                      "--total", "1", "--duration", "600", env=env)
    assert created.returncode == 0, created.stderr
    assert buy(client, "cli-stock", "alice").status_code == 200
    assert buy(client, "cli-stock", "bob").status_code == 410

    added = seckill("activity", "restock", "cli-stock", "3", env=env)
    assert added.returncode == 0, added.stderr
    assert {k: v for k, v in json.loads(added.stdout).items()
            if k in ("total", "remaining", "state")} == {
        "total": 4, "remaining": 3, "state": "open"}
    # This process's sold-out flag is dropped when the CLI's pub/sub message arrives.
    wait_until(lambda: buy(client, "cli-stock", "bob").status_code == 200, 5,
               what="bob buys a restocked unit")

    removed = seckill("activity", "restock", "cli-stock", "-2", env=env)
    assert removed.returncode == 0, removed.stderr
    assert (json.loads(removed.stdout)["total"], json.loads(removed.stdout)["remaining"]) == (
        2, 0)
    assert rds.hmget(f"{prefix}:{{cli-stock}}:meta", "total", "remaining", "sold") == [
        "2", "0", "2"]

    too_many = seckill("activity", "restock", "cli-stock", "-1", env=env)
    assert_one_line_error(too_many, 1, "insufficient_stock")
    assert_one_line_error(seckill("activity", "restock", "nope", "1", env=env), 1,
                          "no activity 'nope'")
    unlimited = seckill("activity", "create", "--id", "cli-free", "--name", "Free",
                        "--total", "unlimited", "--duration", "600", env=env)
    assert unlimited.returncode == 0, unlimited.stderr
    assert_one_line_error(seckill("activity", "restock", "cli-free", "1", env=env), 2,
                          "cannot be restocked")
