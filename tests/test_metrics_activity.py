"""The per-activity series of ``/metrics`` (on one server and on a cluster): they say what the
operator's stats say, outcomes are counted per known activity only, and Redis's absence shows."""

from __future__ import annotations

import time

import pytest

from tests.support.api import activity_stats, buy, create_activity, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.metrics import of, scrape
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database


@BOTH_BACKENDS
def test_the_activity_series_say_what_the_stats_say(client, make_app):
    aid = create_activity(client, total=5, payment_window=600)["id"]
    soon = create_activity(client, total=3, starts_at=iso(600), ends_at=iso(1200))["id"]
    for uid in ("a", "b"):
        assert buy(client, aid, uid).status_code == 200
    expect(client.post(f"/admin/activities/{soon}/pause", headers=ADMIN), 200)
    time.sleep(1.1)  # the census is kept a second; the orders wait for a worker
    samples = scrape(make_app().test_client())  # another process sees the same numbers
    stats = activity_stats(client, aid)
    assert of(samples, "seckill_activity_remaining", activity=aid) == stats["remaining"] == 3
    assert of(samples, "seckill_activity_sold", activity=aid) == stats["sold"] == 2
    assert of(samples, "seckill_activity_buyers", activity=aid) == 2
    for status, n in stats["orders"].items():
        assert of(samples, "seckill_activity_orders", activity=aid, status=status) == n
    assert of(samples, "seckill_activity_holds", activity=aid) == stats["payments"]["due"] == 2
    assert of(samples, "seckill_activity_state", activity=aid, state="open") == 1
    assert of(samples, "seckill_activity_state", activity=soon, state="paused") == 1
    assert of(samples, "seckill_activity_paused", activity=soon) == 1
    assert of(samples, "seckill_activity_paused", activity=aid) == 0
    # No worker runs here: the two orders are decided and not stored, for a second now.
    assert (of(samples, "seckill_orders_oldest_pending_seconds", activity=aid) or 0) >= 1.0
    assert of(samples, "seckill_orders_oldest_pending_seconds", activity=soon) == 0
    assert of(samples, "seckill_dead_letters", activity=aid) == 0
    assert of(samples, "seckill_redis_up") == 1


def test_outcomes_are_counted_per_known_activity_and_never_for_made_up_ids(client):
    aid = create_activity(client, total=1)["id"]
    assert buy(client, aid, "winner").status_code == 200
    for n in range(3):
        expect(buy(client, aid, f"late{n}"), 410, "sold_out")
    for n in range(20):
        expect(client.get(f"/seckill/url?activity=made-up-{n}", headers=user_headers("x")),
               404, "unknown_activity")
    samples = scrape(client)
    assert of(samples, "seckill_activity_outcomes_total", activity=aid, outcome="ok") == 2
    assert of(samples, "seckill_activity_outcomes_total", activity=aid,
              outcome="sold_out") == 3
    assert not [key for key in samples if key[0] == "seckill_activity_outcomes_total"
                and dict(key[1])["activity"].startswith("made-up")]


def test_redis_gone_shows_as_redis_up_0_and_the_scrape_still_answers(make_app,
                                                                      private_valkey):
    app = make_app(REDIS_URL=private_valkey.url)
    client = app.test_client()
    create_activity(client)
    private_valkey.stop()
    samples = scrape(client)
    assert of(samples, "seckill_redis_up") == 0
    assert not [key for key in samples if key[0] == "seckill_activity_sold"]
