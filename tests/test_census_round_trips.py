"""A census reads every activity in a few round trips and one query of the stored orders, not
a few per activity: counted at a relay in front of the real Valkey (each request that follows a
reply starts a round trip) and at the real database engine, for every kind of activity the census
reads differently (sharded, queued, with variants, with a payment window)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.api import activity_stats, buy, create_activity, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.relay import ChunkHook, Relay
from tests.support.timing import iso
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database

SIZES = [{"id": "s", "name": "S", "total": 3}, {"id": "m", "name": "M", "total": 2}]


class CountingRelay(Relay):
    """Relays, counting the round trips: on each connection, the requests that follow a reply
    (or open it). A pipeline is one, in however many chunks it arrives."""

    def __init__(self, upstream_port: int) -> None:
        self.round_trips = 0
        self._counted = threading.Lock()
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        replied = [True]

        def request(chunk: bytes) -> bool:
            with self._counted:
                if replied[0]:
                    self.round_trips += 1
                replied[0] = False
            return True

        def reply(chunk: bytes) -> bool:
            with self._counted:
                replied[0] = True
            return True

        return request, reply


@pytest.fixture
def relay(valkey: Any) -> Iterator[CountingRelay]:
    with CountingRelay(valkey.port) as counting:
        yield counting


def _one_of_each(client: Any) -> list[str]:
    return [create_activity(client, total=5)["id"],
            create_activity(client, total=5, payment_window=600)["id"],
            create_activity(client, total=6, shards=3)["id"],
            create_activity(client, total=4, admission="queue",
                            queue_opens_at=iso(-120))["id"],
            _with_variants(client)]


def _with_variants(client: Any) -> str:
    body = {"id": f"v{uuid.uuid4().hex[:10]}", "name": "Sneaker", "variants": SIZES,
            "starts_at": iso(-60), "ends_at": iso(3600)}
    return str(expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)["id"])


def test_a_census_costs_the_same_round_trips_for_5_activities_and_for_45(make_app, relay):
    app = make_app(REDIS_URL=relay.url)
    client = app.test_client()
    found = app.extensions["seckill"]
    taker = found.census
    taker.ttl = 0.0  # every take reads anew
    statements = []
    sa.event.listen(found.engine, "before_cursor_execute",
                    lambda *args: statements.append(args[2]))

    def cost(expected: int) -> tuple[int, int]:
        taker.take()  # what a process remembers of each activity (its parts) is read once
        round_trips, queries = relay.round_trips, len(statements)
        census = taker.take()
        assert census.error is None and len(census.counts) == expected
        return relay.round_trips - round_trips, len(statements) - queries

    aids = _one_of_each(client)
    for aid in aids[:3]:
        assert buy(client, aid, "u1").status_code == 200
    few = cost(5)
    for _ in range(8):
        aids += _one_of_each(client)
    many = cost(45)
    # Read one at a time, 40 more activities took 200 more round trips. Read together, a
    # few more at most: a long pipeline is written in pieces of a few kB, and the server may
    # answer one before the next arrives.
    assert many[0] - few[0] < 10, (few, many)
    assert many[1] <= few[1] + 1, (few, many)  # the activities' page may take one query more
    assert few[0] <= 12, few


@BOTH_BACKENDS
def test_the_census_says_what_each_activitys_own_stats_say(client, app):
    aids = _one_of_each(client) + _one_of_each(client)
    for aid in aids[:3] + aids[5:8]:
        assert buy(client, aid, "u1").status_code == 200
        assert buy(client, aid, "u2").status_code == 200
    census = app.extensions["seckill"].census.take()
    assert census.error is None
    counts = {count.activity.id: count for count in census.counts}
    for aid in aids:
        stats = activity_stats(client, aid)
        count = counts[aid]
        assert (count.remaining, count.sold, count.buyers) == (
            stats["remaining"], stats["sold"], stats["buyers"]), aid
        assert count.orders == stats["orders"], aid
        assert count.holds == (stats.get("payments") or {}).get("due", 0), aid
