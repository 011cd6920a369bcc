"""The one runner of every decision on Redis (seckill.store.plumbing.writes): a script Redis
lost the activity of runs again once the activity is rebuilt, an activity nobody knows is
404, a reply not read is 503 and never retried, a follow-up's error runs its fallback."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask import Flask

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL
from seckill.ops.stack.ports import free_listen_port
from seckill.store.plumbing.connection import Wire
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.writes import DurableRunner, FollowUp, wrote


def _runner(app: Flask) -> DurableRunner:
    runner: DurableRunner = app.extensions["seckill"].purchases.runner
    return runner


def _restock(app: Flask, make_activity: Any) -> tuple[str, Any, list[str]]:
    """A new activity of 3 units: its id, restock.lua and its KEYS."""
    services = app.extensions["seckill"]
    aid = make_activity(total=3)["id"]
    return aid, services.scripts.restock, [services.keys.meta(aid)]


def test_a_script_redis_lost_the_activity_of_runs_again_once_it_is_rebuilt(
    app: Flask, make_activity: Any, rds: redis.Redis
) -> None:
    aid, restock, keys = _restock(app, make_activity)
    (meta,) = keys
    rds.delete(meta)  # Redis lost it; the database still has it
    runner = _runner(app)
    assert runner.run(restock, keys, [2, MAX_TOTAL])[0] == "uninitialized"
    assert not rds.exists(meta), "the bare run changed nothing"
    reply = runner.run_restoring(aid, restock, keys, [2, MAX_TOTAL])
    assert [reply[0], int(reply[1]), int(reply[2])] == ["ok", 5, 5]
    assert rds.hmget(meta, "total", "remaining") == ["5", "5"]


def test_restoring_an_activity_nobody_knows_is_unknown(app: Flask) -> None:
    services = app.extensions["seckill"]
    meta = services.keys.meta("nosuch")
    with pytest.raises(errors.UnknownActivity):
        _runner(app).run_restoring("nosuch", services.scripts.restock, [meta], [1, MAX_TOTAL])


def test_a_reply_not_read_is_unavailable(app: Flask) -> None:
    services = app.extensions["seckill"]
    pool = redis.ConnectionPool(host="127.0.0.1", port=free_listen_port(), socket_timeout=1)
    wire = Wire(pool, limit=1, wait=1.0)
    calls: list[str] = []

    def ensure(aid: str) -> bool:
        calls.append(aid)
        return True

    runner = DurableRunner(services.client, wire, Durability("none"), ensure)
    try:
        with pytest.raises(errors.Unavailable) as refused:
            runner.run_restoring("a", services.scripts.restock, [services.keys.meta("a")],
                                 [1, MAX_TOTAL])
    finally:
        wire.close()
    assert refused.value.extra["detail"] == "NotSent"  # nothing reached Redis
    assert calls == [], "nothing rebuilt, nothing retried"


def test_a_follow_up_that_answers_an_error_runs_its_fallback(
    app: Flask, make_activity: Any, rds: redis.Redis
) -> None:
    _, restock, keys = _restock(app, make_activity)
    fallbacks: list[int] = []
    unknown = FollowUp(("EVALSHA", "0" * 40, 0), lambda: fallbacks.append(1))
    reply = _runner(app).run(restock, keys, [1, MAX_TOTAL], unknown)
    assert [reply[0], int(reply[1])] == ["ok", 4], "the script's reply, not the follow-up's"
    assert fallbacks == [1]
    known = FollowUp(("PING",), lambda: fallbacks.append(2))
    _runner(app).run(restock, keys, [1, MAX_TOTAL], known)
    assert fallbacks == [1], "a follow-up that answers runs no fallback"
    assert rds.hget(keys[0], "total") == "5"


def test_only_a_reply_that_changed_something_waits_for_the_disk() -> None:
    assert wrote(["ok", "o-1", 3]) and wrote(["paid", "ref", 1])
    assert not wrote(["paid", "ref", 1, "again"]), "a repeated payment changed nothing"
    assert not wrote(["sold_out"]) and not wrote(["uninitialized"]) and not wrote([])
