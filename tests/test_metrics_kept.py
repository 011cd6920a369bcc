"""No scrape waits behind a reading of the store under way: it gets the last text at once
(and the console the last census); only the first scrape, with nothing kept yet, waits. The
reading is held at a relay in front of the real Valkey, which keeps its replies back until
the test lets them go."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from seckill.metrics import Kept
from seckill.web.census import CensusCollector
from tests.support.api import buy, create_activity
from tests.support.relay import ChunkHook, Relay
from tests.support.tokens import METRICS


class HoldingRelay(Relay):
    """Relays; while ``hold`` is set, every reply (or, with ``only``, each reply to a request
    that contains it) waits at the relay (``held`` then says one does) until ``release`` is
    set."""

    def __init__(self, upstream_port: int) -> None:
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()
        self.only: bytes | None = None
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        asked = [False]

        def request(chunk: bytes) -> bool:
            asked[0] = self.only is None or self.only in chunk.upper()
            return True

        def reply(chunk: bytes) -> bool:
            if self.hold.is_set() and asked[0]:
                self.held.set()
                self.release.wait(30)
            return True

        return request, reply


@pytest.fixture
def relay(valkey: Any) -> Iterator[HoldingRelay]:
    with HoldingRelay(valkey.port) as holding:
        yield holding
        holding.release.set()


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    return thread, got


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    return call(), time.monotonic() - started


def _sold(text: bytes, aid: str) -> str:
    line = next(line for line in text.decode().splitlines()
                if line.startswith(f'seckill_activity_sold{{activity="{aid}"}}'))
    return line.split()[-1]


def test_a_scrape_during_a_reading_gets_the_last_text_at_once(make_app, relay):
    app = make_app(REDIS_URL=relay.url)
    client = app.test_client()
    aid = create_activity(client, total=5)["id"]
    first = client.get("/metrics", headers=METRICS).get_data()
    taker = app.extensions["seckill"].census
    last_census = taker.take()
    assert _sold(first, aid) == "0.0"
    assert buy(client, aid, "u1").status_code == 200
    time.sleep(1.1)  # what a scrape reads is kept for a second

    # Held in the census (its reads of the orders streams), after the shared text is asked.
    relay.only = b"XINFO"
    relay.hold.set()
    reading, read = _in_thread(lambda: app.test_client().get("/metrics", headers=METRICS))
    assert relay.held.wait(10)  # that scrape's reading waits at the relay for its replies
    scrape, took = _timed(lambda: client.get("/metrics", headers=METRICS))
    assert scrape.status_code == 200 and took < 0.5, took
    assert _sold(scrape.get_data(), aid) == "0.0"  # the last text
    census, took = _timed(taker.take)  # the console: the last census, at once
    assert census is last_census and took < 0.5, took
    assert reading.is_alive()

    relay.release.set()
    reading.join(30)
    assert _sold(read[0].get_data(), aid) == "1.0"
    assert _sold(client.get("/metrics", headers=METRICS).get_data(), aid) == "1.0"


def test_only_the_first_scrape_waits_for_the_first_reading(make_app, relay):
    app = make_app(REDIS_URL=relay.url)
    aid = create_activity(app.test_client(), total=5)["id"]
    kept = Kept(CensusCollector(app.extensions["seckill"].census), ttl=60.0)
    relay.hold.set()
    first, first_text = _in_thread(kept.text)
    assert relay.held.wait(10)
    second, second_text = _in_thread(kept.text)
    second.join(0.5)
    assert second.is_alive()  # nothing kept yet: it waits for the reading under way
    relay.release.set()
    first.join(30)
    second.join(30)
    assert second_text == first_text  # the one reading's text
    assert _sold(first_text[0], aid) == "0.0"
