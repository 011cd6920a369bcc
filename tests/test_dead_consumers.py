"""Consumers that are gone leave the group: a dead worker's name is removed
once a live worker has reclaimed its entries; a consumer that still holds pending entries is
never removed (its entries would be lost with it), nor is a live one.

Everything is real: the session's Valkey and its cluster (each test on both; own key prefix
per test), the test's own database, workers run as ``seckill worker`` runs them (``run`` in a
thread) or stepped in-process. The killed-with-SIGKILL case is in test_orders_worker.py
(``test_kill_9_mid_batch_...``).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.worker.orders import GROUP
from tests.support.api import buy_ok
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import WorkerThread, built_worker, drain, stored_orders, stream_key
from tests.support.timing import wait_until

pytestmark = [BOTH_BACKENDS, pytest.mark.database]


def consumers(rds: redis.Redis, stream: str) -> dict[str, int]:
    """The group's consumers and how many entries each holds pending."""
    found: Any = rds.xinfo_consumers(stream, GROUP)
    return {str(c["name"]): int(c["pending"]) for c in found}


def test_a_dead_consumer_goes_once_its_entries_are_reclaimed_a_live_one_stays(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    """``ghost`` read two entries and died; ``empty`` is a name left behind holding nothing.
    A live worker that does not reclaim yet (claim bound 60 s) removes ``empty`` but keeps
    ``ghost``, silent as it is: it holds pending entries. A second worker (claim bound
    300 ms, silence bound 1 s) reclaims them, stores them, and then removes ``ghost``; the
    live worker, which reads every 100 ms, is kept all along, and leaves the group itself on
    a warm stop."""
    aid = make_activity(total=10)["id"]
    stream = stream_key(prefix, aid)
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(3)}
    with built_worker(settings, block_ms=100) as setup:
        setup.refresh_streams(force=True)  # the group, as the first worker to start makes it
    taken: Any = rds.xreadgroup(GROUP, "ghost", {stream: ">"}, count=2)
    assert len(taken[0][1]) == 2
    rds.xgroup_createconsumer(stream, GROUP, "empty")
    assert consumers(rds, stream) == {"ghost": 2, "empty": 0}

    with built_worker(settings, block_ms=100, claim_idle_ms=60_000, consumer_idle_ms=300,
                      consumer="live") as live_worker, WorkerThread(live_worker) as live:
        wait_until(lambda: "empty" not in consumers(rds, stream), 10,
                   what="the name that held nothing removed")
        assert consumers(rds, stream) == {"ghost": 2, "live": 0}, "ghost holds entries: kept"
        assert len(stored_orders(database_url, aid)) == 1  # the one entry ghost did not take

        with built_worker(settings, block_ms=100, claim_idle_ms=300, consumer_idle_ms=1000,
                          consumer="reclaimer") as reclaimer:
            wait_until(lambda: drain(reclaimer) == 0 and "ghost" not in consumers(rds, stream),
                       10, what="ghost's entries reclaimed, then ghost removed")
            assert consumers(rds, stream) == {"live": 0, "reclaimer": 0}
            assert reclaimer.forget_dead(stream) == [], "a live worker is never removed"
        assert live.alive(), live.error
        live.stop()
    assert consumers(rds, stream) == {"reclaimer": 0}, "a warm stop leaves the group"

    rows = stored_orders(database_url, aid)
    assert {o.order_id: o.user_id for o in rows} == {oid: uid for uid, oid in bought.items()}
    assert {o.status for o in rows} == {"confirmed"}


def test_a_consumer_holding_entries_is_never_removed_however_silent(
    client: FlaskClient, make_activity: Any, settings: Settings, rds: redis.Redis, prefix: str,
) -> None:
    """The removal checks the pending count in the same atomic step as it deletes: a consumer
    holding an entry is kept even with a bound of 0 ms, and removed only once it holds
    nothing; a worker never removes itself while it holds entries, even on a warm stop."""
    aid = make_activity(total=5)["id"]
    stream = stream_key(prefix, aid)
    buy_ok(client, aid, "alice")
    with built_worker(settings, block_ms=100, claim_idle_ms=60_000, consumer_idle_ms=0,
                      consumer="keeper") as worker:
        worker.refresh_streams(force=True)
        taken: Any = rds.xreadgroup(GROUP, "holder", {stream: ">"}, count=1)
        assert worker.forget_dead(stream) == []
        assert consumers(rds, stream) == {"holder": 1}
        assert worker.roster.leave(stream, "holder") is False
        rds.xack(stream, GROUP, taken[0][1][0][0])
        assert worker.forget_dead(stream) == ["holder"]
        assert consumers(rds, stream) == {}
