"""The operator's levers apply in the sale first, in the order they were sent, and the database
follows them without ever reversing one.

A pause then a resume 2 s later with the database hung: each answers within the bound (503
``database`` saying it is in force in the sale), the sale is open after the resume, and once
the database answers the orders worker's catch-up records the resume, not the pause. A lever
run after a later one (its request waited somewhere) changes nothing. ``end`` answers the
moment after which no purchase is decided, and the database records exactly that moment. A
restock recorded late never writes back an older total. SQLite (a write lock held) or
PostgreSQL (a relay that hangs), single server and cluster where Redis matters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from flask import Flask

from seckill.domain.clock import ms_from_iso
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.levers import LeverRecords
from seckill.worker.levers import LeverCatchUp
from seckill.worker.stop import StopFlag
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.database_faults import DatabaseRelay, SqliteWriteLock, is_sqlite
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database

TIMEOUT = 1.0  # SECKILL_DATABASE_TIMEOUT of the gateway under test
BOUND = TIMEOUT + 2.5  # what a lever may take with the database hung: its wait, and Redis's


class HungDatabase:
    """The test's database, hung on demand: SQLite's write lock held by another connection,
    or a relay in front of PostgreSQL that stops passing bytes."""

    def __init__(self, database_url: str) -> None:
        self.relay = None if is_sqlite(database_url) else DatabaseRelay(database_url)
        self.url = database_url if self.relay is None else self.relay.database_url
        self.lock = SqliteWriteLock(database_url) if self.relay is None else None

    def hang(self) -> None:
        if self.lock is not None:
            self.lock.hold()
        else:
            assert self.relay is not None
            self.relay.hang()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
        else:
            assert self.relay is not None
            self.relay.up()

    def close(self) -> None:
        if self.lock is not None:
            self.lock.close()
        if self.relay is not None:
            self.relay.close()


@pytest.fixture
def hung(database_url: str) -> Iterator[HungDatabase]:
    found = HungDatabase(database_url)
    yield found
    found.close()


@pytest.fixture
def gateway(make_app: Callable[..., Flask], hung: HungDatabase) -> Flask:
    return make_app(DATABASE_URL=hung.url, SECKILL_DATABASE_TIMEOUT=str(TIMEOUT))


def _lever(client: Any, aid: str, verb: str, sent_ago: float = 0.0) -> tuple[Any, float]:
    started = time.monotonic()
    answer = client.post(f"/admin/activities/{aid}/{verb}", headers=ADMIN | {
        "X-Request-Start": f"t={time.time() - sent_ago:.3f}"})
    return answer, time.monotonic() - started


def _row(database_url: str, aid: str) -> Any:
    book = OrderBook(make_engine(database_url))
    try:
        return book.load_activity(aid)
    finally:
        book.engine.dispose()


def _catch_up(settings: Any, rds: redis.Redis) -> None:
    """The orders worker's catch-up, for one pass in a thread of its own (as in the worker)."""
    book = OrderBook(make_engine(settings.database_url))
    levers = LeverRecords(rds, KeySpace(settings.key_prefix), Scripts(rds), book)
    stop = StopFlag()
    runner = threading.Thread(target=LeverCatchUp(levers, interval=0.05).run, args=(stop,))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while rds.hlen(KeySpace(settings.key_prefix).levers_pending()) and (
                time.monotonic() < deadline):
            time.sleep(0.05)
    finally:
        stop.event.set()
        runner.join(5)
        book.engine.dispose()


@BOTH_BACKENDS
def test_pause_then_resume_with_the_database_hung_leaves_the_sale_open(
        gateway: Flask, hung: HungDatabase, client: Any, rds: redis.Redis,
        make_activity: Callable[..., dict[str, Any]], prefix: str) -> None:
    aid = make_activity(total=10, shards=2)["id"]
    own = gateway.test_client()
    own.get(f"/admin/activities/{aid}", headers=ADMIN)  # this process knows the activity
    hung.hang()
    try:
        paused, took = _lever(own, aid, "pause")
        body = expect(paused, 503, "unavailable")
        assert (body["detail"], body["applied"], body["pending"]) == (
            "database", "sale", "database"), body
        assert took < BOUND, took
        # In force in the sale at once, on every part.
        assert expect(buy(client, aid, "during-pause"), 503, "paused")
        time.sleep(2)
        resumed, took = _lever(own, aid, "resume")
        assert expect(resumed, 503, "unavailable")["applied"] == "sale"
        assert took < BOUND, took
        expect(buy(client, aid, "after-resume"), 200)
    finally:
        hung.release()
    keys = KeySpace(prefix)
    for tag in part_tags(aid, 2):
        assert rds.hget(keys.meta(tag), "paused") == "0", tag
    _catch_up(gateway.extensions["seckill"].settings, rds)
    assert _row(hung.url, aid).paused is False
    assert not rds.hget(keys.levers_pending(), aid)


@BOTH_BACKENDS
def test_a_lever_sent_before_the_one_in_force_changes_nothing(
        client: Any, rds: redis.Redis, make_activity: Callable[..., dict[str, Any]],
        database_url: str) -> None:
    aid = make_activity(total=10)["id"]
    expect(_lever(client, aid, "pause", sent_ago=0.0)[0], 200)
    # A resume the operator sent 3 s before that pause, run only now: the pause stands.
    late = expect(_lever(client, aid, "resume", sent_ago=3.0)[0], 200)
    assert late["paused"] is True, late
    expect(buy(client, aid, "buyer"), 503, "paused")
    assert _row(database_url, aid).paused is True
    # The operator's next command, sent now, does apply.
    expect(_lever(client, aid, "resume")[0], 200)
    expect(buy(client, aid, "buyer"), 200)
    assert _row(database_url, aid).paused is False


def test_a_database_write_that_arrives_late_never_reverses_a_later_lever(
        client: Any, make_activity: Callable[..., dict[str, Any]], database_url: str) -> None:
    aid = make_activity(total=10)["id"]
    expect(_lever(client, aid, "pause")[0], 200)
    expect(_lever(client, aid, "resume")[0], 200)
    book = OrderBook(make_engine(database_url))
    try:
        # The pause's write, delayed until after the resume's: refused, nothing reversed.
        assert not book.record_lever(aid, "paused", True, (int(time.time()) - 60) * 1_000_000)
        assert book.load_activity(aid).paused is False  # type: ignore[union-attr]
        restocked = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 5},
                                       headers=ADMIN), 200)
        assert restocked["total"] == 15
        assert not book.record_lever(aid, "total", 12, 1)  # an older restock's total
        assert book.load_activity(aid).total == 15  # type: ignore[union-attr]
    finally:
        book.engine.dispose()


@BOTH_BACKENDS
def test_end_answers_the_moment_after_which_nothing_is_decided(
        gateway: Flask, hung: HungDatabase, client: Any, rds: redis.Redis,
        make_activity: Callable[..., dict[str, Any]], prefix: str) -> None:
    aid = make_activity(total=50, shards=3)["id"]
    own = gateway.test_client()
    stop = threading.Event()
    decided: list[int] = []

    def crowd(n: int) -> None:
        buyer = gateway.test_client()
        i = 0
        while not stop.is_set() and i < 200:
            answer = buy(buyer, aid, f"c{n}-{i}")
            if answer.status_code == 200:
                decided.append(int(answer.get_json()["order_id"].split("-")[1]))
            i += 1

    threads = [threading.Thread(target=crowd, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    hung.hang()
    try:
        ended, took = _lever(own, aid, "end")
        assert took < BOUND, took
        body = expect(ended, 503, "unavailable")
        assert body["applied"] == "sale", body
    finally:
        stop.set()
        for thread in threads:
            thread.join(20)
        hung.release()
    ends_ms = max(int(str(rds.hget(KeySpace(prefix).meta(tag), "ends_ms")))
                  for tag in part_tags(aid, 3))
    assert ms_from_iso(body["ends_at"], "ends_at") == ends_ms, body
    # Every order was decided (its id carries Redis's time) before the recorded end.
    assert decided and all(at < ends_ms for at in decided), (ends_ms, max(decided))
    expect(buy(client, aid, "too-late"), 410, "ended")
    _catch_up(gateway.extensions["seckill"].settings, rds)
    assert _row(hung.url, aid).ends_ms == ends_ms


def test_end_with_the_database_up_answers_its_ends_at(
        client: Any, make_activity: Callable[..., dict[str, Any]], database_url: str,
        rds: redis.Redis, prefix: str) -> None:
    aid = make_activity(total=5)["id"]
    expect(buy(client, aid, "early"), 200)
    ended = expect(_lever(client, aid, "end")[0], 200)
    stored = int(str(rds.hget(KeySpace(prefix).meta(aid), "ends_ms")))
    row = _row(database_url, aid)
    assert row.ends_ms == stored
    assert ended["state"] == "ended", ended
    assert ms_from_iso(ended["ends_at"], "ends_at") == stored
    expect(buy(client, aid, "late"), 410, "ended")
    assert expect(client.get(f"/seckill/{aid}/order", headers=user_headers("early")),
                  200)["status"] in ("pending", "confirmed")


def test_a_lever_waits_for_a_hung_database_at_most_its_timeout(
        make_app: Callable[..., Flask], hung: HungDatabase, client: Any, rds: redis.Redis,
        make_activity: Callable[..., dict[str, Any]], prefix: str) -> None:
    """A process whose pooled connection then hangs: checking it, opening another and
    running the write would each wait out their own timeout; the operator hears within the
    one bound, and the lever is in force all the same."""
    aid = make_activity(total=10)["id"]
    timeout = 2.0
    fresh = make_app(DATABASE_URL=hung.url, SECKILL_DATABASE_TIMEOUT=str(timeout)).test_client()
    expect(fresh.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)  # a pooled one
    hung.hang()
    try:
        paused, took = _lever(fresh, aid, "pause")
        assert expect(paused, 503, "unavailable")["applied"] == "sale"
        assert took < timeout + 1.0, took
        expect(buy(client, aid, "during"), 503, "paused")
    finally:
        hung.release()
    assert rds.hget(KeySpace(prefix).meta(aid), "paused") == "1"
