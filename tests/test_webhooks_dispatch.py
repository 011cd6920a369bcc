"""The webhooks' dispatcher against a real receiver (tests/support/webhook_receiver.py) on
the test's own database (SQLite, or a PostgreSQL schema): signed per Standard Webhooks, the
same webhook-id on every attempt, faulty receivers retried without blocking anyone, one
subject's events in order, failed after 24 hours of a moved clock, two dispatchers at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from seckill.sql import engine as db
from seckill.sql.schema import ensure_schema, outbox, webhook_deliveries, webhook_endpoints
from seckill.webhooks.options import DispatchOptions
from seckill.webhooks.run import run_dispatcher
from tests.support.timing import wait_until
from tests.support.webhook_receiver import (
    Clock,
    WebhookReceiver,
    add_endpoint,
    add_order_events,
    new_secret,
)

pytestmark = pytest.mark.database

FAST = {"attempt_timeout": 1.0, "connect_timeout": 1.0, "idle": 0.02}
Start = Callable[..., threading.Event]


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    made = db.make_engine(database_url)
    ensure_schema(made)
    yield made
    made.dispose()


@pytest.fixture
def dispatchers(database_url: str) -> Iterator[Start]:
    """Start a dispatcher in a thread (``run_dispatcher``, as ``seckill webhooks run``);
    each is stopped, and must have returned, at the end of the test."""
    started: list[tuple[threading.Event, threading.Thread]] = []

    def start(clock: Clock, **options: Any) -> threading.Event:
        stop = threading.Event()
        thread = threading.Thread(
            target=run_dispatcher, args=(database_url,),
            kwargs={"stop": stop, "clock": clock,
                    "options": DispatchOptions(**{**FAST, **options})},
            daemon=True)
        thread.start()
        started.append((stop, thread))
        return stop

    yield start
    for stop, _ in started:
        stop.set()
    for _, thread in started:
        thread.join(timeout=15)
        assert not thread.is_alive(), "a dispatcher did not stop"


def rows(engine: sa.Engine, endpoint_id: str) -> dict[str, dict[str, Any]]:
    """The endpoint's deliveries by webhook-id."""
    d = webhook_deliveries
    query = (sa.select(d, outbox.c.event_id).join(outbox, outbox.c.seq == d.c.seq)
             .where(d.c.endpoint_id == endpoint_id))
    with engine.connect() as conn:
        return {r["event_id"]: dict(r) for r in conn.execute(query).mappings()}


def counters(engine: sa.Engine, endpoint_id: str) -> tuple[int, int, int]:
    e = webhook_endpoints
    with engine.connect() as conn:
        row = conn.execute(sa.select(e.c.delivered, e.c.retried, e.c.failed)
                           .where(e.c.id == endpoint_id)).one()
    return int(row[0]), int(row[1]), int(row[2])


def wait_attempts(engine: sa.Engine, endpoint_id: str, event_id: str, n: int) -> None:
    wait_until(lambda: rows(engine, endpoint_id).get(event_id, {}).get("attempts") == n, 10,
               what=f"attempt {n} of {event_id}")


def wait_quiet(engine: sa.Engine, endpoint_id: str, clock: Clock) -> None:
    """Until no delivery is leased and every one tried waits for its next attempt (the
    others wait for an earlier event of their subject)."""
    wait_until(lambda: all(r["lease_owner"] is None and r["next_ms"] > clock()
                           for r in rows(engine, endpoint_id).values()
                           if r["status"] == "pending" and r["attempts"] > 0)
               and not any(r["lease_owner"] for r in rows(engine, endpoint_id).values()),
               10, what="a quiet dispatcher")


def statuses(engine: sa.Engine, endpoint_id: str) -> dict[str, str]:
    return {k: r["status"] for k, r in rows(engine, endpoint_id).items()}


def all_delivered(engine: sa.Engine, endpoint_id: str, n: int) -> bool:
    found = statuses(engine, endpoint_id)
    return len(found) == n and set(found.values()) == {"delivered"}


def test_every_event_is_signed_and_sent_as_written(engine: sa.Engine, dispatchers: Start) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        ids = add_order_events(engine, [("order.created", "o1"), ("order.paid", "o1"),
                                        ("order.created", "o2")], clock())
        dispatchers(clock)
        wait_until(lambda: all_delivered(engine, endpoint, 3), 10, what="3 deliveries")
        got = rx.received()
    with engine.connect() as conn:
        bodies = dict(conn.execute(sa.select(outbox.c.event_id, outbox.c.body)).all())
    assert sorted(r.webhook_id for r in got) == sorted(ids)  # each once, nothing else
    assert all(r.ok and r.content_type == "application/json" for r in got)
    assert {r.webhook_id: r.body for r in got} == {k: v.encode() for k, v in bodies.items()}
    order = [r.webhook_id for r in got]
    assert order.index(ids[0]) < order.index(ids[1])
    assert counters(engine, endpoint) == (3, 0, 0)


def test_a_retry_keeps_its_webhook_id(engine: sa.Engine, dispatchers: Start) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        [event_id] = add_order_events(engine, [("order.created", "o1")], clock())
        rx.fail("500", times=2)
        dispatchers(clock)
        for attempts in (1, 2):
            wait_attempts(engine, endpoint, event_id, attempts)
            row = rows(engine, endpoint)[event_id]
            assert (row["status"], row["last_code"]) == ("pending", 500)
            assert row["next_ms"] > clock()  # backed off
            clock.advance(3600)
        wait_until(lambda: all_delivered(engine, endpoint, 1), 10)
        got = rx.received()
    assert [r.webhook_id for r in got] == [event_id] * 3
    assert [r.answer for r in got] == ["500", "500", "ok"]
    assert len({r.body for r in got}) == 1
    assert counters(engine, endpoint) == (1, 2, 0)


@pytest.mark.parametrize("mode", ["500", "hang", "close", "slow", "redirect", "garbage"])
def test_a_faulty_receiver_is_retried_and_blocks_nobody(
    engine: sa.Engine, dispatchers: Start, mode: str
) -> None:
    clock = Clock()
    bad_secret, good_secret = new_secret(), new_secret()
    # hang/slow: longer than the 1 s attempt deadline of these tests (a minute / 15 s live).
    with (WebhookReceiver(bad_secret, hang_s=4, slow_s=2) as bad,
          WebhookReceiver(good_secret) as good):
        bad.fail(mode)
        bad_endpoint = add_endpoint(engine, bad.url, bad_secret)
        good_endpoint = add_endpoint(engine, good.url, good_secret)
        ids = add_order_events(engine, [("order.created", f"o{i}") for i in range(40)], clock())
        dispatchers(clock)
        # The good endpoint gets everything while the bad one fails (16 sends at a time each).
        wait_until(lambda: all_delivered(engine, good_endpoint, 40), 10, what="good endpoint")
        wait_until(lambda: all(r["attempts"] >= 1 for r in rows(engine, bad_endpoint).values())
                   and len(rows(engine, bad_endpoint)) == 40, 15, what="bad endpoint tried")
        found = rows(engine, bad_endpoint)
        assert {r["status"] for r in found.values()} == {"pending"}
        assert all(r["last_error"] or r["last_code"] for r in found.values())
        assert all(r["next_ms"] > clock() for r in found.values())
        assert bad.delivered() == []
        bad.heal()
        clock.advance(3600)
        wait_until(lambda: all_delivered(engine, bad_endpoint, 40), 15, what="healed")
    assert sorted(set(bad.delivered_ids())) == sorted(ids)
    assert sorted(good.delivered_ids()) == sorted(ids)
    delivered, retried, failed = counters(engine, bad_endpoint)
    assert (delivered, failed) == (40, 0) and retried >= 40


def test_one_subject_waits_for_its_earlier_event_others_do_not(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        ids = add_order_events(engine, [
            ("order.created", "o1"), ("order.created", "o2"), ("order.paid", "o1"),
            ("order.cancelled", "o1"), ("order.paid", "o2")], clock())
        rx.fail_ids({ids[0]}, "500")
        dispatchers(clock)
        wait_until(lambda: rx.delivered_ids() == [ids[1], ids[4]], 10, what="o2's events")
        for attempts in (1, 2, 3):
            wait_attempts(engine, endpoint, ids[0], attempts)
            clock.advance(3600)
        assert {r.webhook_id for r in rx.received()} == {ids[0], ids[1], ids[4]}
        rx.heal_ids()
        wait_until(lambda: all_delivered(engine, endpoint, 5), 10)
        assert [i for i in rx.delivered_ids() if i in (ids[0], ids[2], ids[3])] == [
            ids[0], ids[2], ids[3]]


def test_failed_after_24_hours_then_the_next_event_goes(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        ids = add_order_events(engine, [("order.created", "o1"), ("order.paid", "o1")], clock())
        rx.fail_ids({ids[0]}, "500")
        dispatchers(clock)
        wait_attempts(engine, endpoint, ids[0], 1)
        clock.advance(23 * 3600)  # within the 24 hours: retried again
        wait_attempts(engine, endpoint, ids[0], 2)
        assert rows(engine, endpoint)[ids[0]]["status"] == "pending"
        clock.advance(2 * 3600)  # 25 h after the first attempt
        wait_until(lambda: statuses(engine, endpoint) == {ids[0]: "failed",
                                                          ids[1]: "delivered"}, 10)
        assert rows(engine, endpoint)[ids[0]]["done_ms"] == clock()
    assert rx.delivered_ids() == [ids[1]]
    assert counters(engine, endpoint) == (1, 2, 1)  # tried at 0 h and 23 h, failed at 25 h


def test_a_receiver_down_for_an_hour_gets_its_backlog_in_order(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    kinds = ("order.created", "order.paid", "order.cancelled")
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        rx.fail("close")
        ids = add_order_events(engine, [(k, f"o{i}") for k in kinds for i in range(10)],
                               clock())
        dispatchers(clock)
        wait_until(lambda: len(rows(engine, endpoint)) == 30
                   and all(rows(engine, endpoint)[i]["attempts"] for i in ids[:10]), 10)
        for _ in range(12):  # an hour, five minutes at a time
            wait_quiet(engine, endpoint, clock)  # no attempt in flight across a jump
            clock.advance(300)
        wait_quiet(engine, endpoint, clock)
        assert min(r["attempts"] for k, r in rows(engine, endpoint).items()
                   if k in ids[:10]) >= 5
        # Only each order's first event was tried while it was down.
        assert {r.webhook_id for r in rx.received()} <= set(ids[:10])
        rx.heal()
        clock.advance(3600)  # the longest backoff
        wait_until(lambda: all_delivered(engine, endpoint, 30), 15)
        delivered = rx.delivered_ids()
    assert sorted(delivered) == sorted(ids)
    for i in range(10):
        assert [x for x in delivered if x in ids[i::10]] == ids[i::10]


def test_two_dispatchers_never_send_one_event_twice_at_once(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret, slow_s=0.01) as rx:
        rx.fail("slow")  # a 200 after 10 ms: sends overlap
        endpoint = add_endpoint(engine, rx.url, secret)
        plan = [(k, f"o{i}") for k in ("order.created", "order.paid") for i in range(150)]
        ids = add_order_events(engine, plan, clock())
        dispatchers(clock, batch=50)
        dispatchers(clock, batch=50)
        wait_until(lambda: all_delivered(engine, endpoint, 300), 30)
        got = rx.received()
    assert rx.overlaps == []
    assert sorted(r.webhook_id for r in got) == sorted(ids)  # the clock stood: no lease lapsed
    order = [r.webhook_id for r in got]
    assert all(order.index(ids[i]) < order.index(ids[150 + i]) for i in range(150))


def test_delivered_events_are_pruned_after_the_retention(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        endpoint = add_endpoint(engine, rx.url, secret)
        add_order_events(engine, [("order.created", "o1"), ("order.paid", "o1")], clock())
        dispatchers(clock, retention_s=86_400, prune_every_s=60)
        wait_until(lambda: all_delivered(engine, endpoint, 2), 10)
        clock.advance(86_400 + 120)
        wait_until(lambda: rows(engine, endpoint) == {}, 10, what="deliveries pruned")
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar() == 0
    assert counters(engine, endpoint) == (2, 0, 0)  # the counters outlive the rows


def test_an_endpoint_added_while_running_gets_the_events_written_after_it(
    engine: sa.Engine, dispatchers: Start
) -> None:
    clock, secret = Clock(), new_secret()
    with WebhookReceiver(secret) as rx:
        dispatchers(clock)
        add_order_events(engine, [("order.created", "o0")], clock())  # before: not for it
        wait_until(lambda: _unfanned(engine) == 0, 10, what="fanned out to nobody")
        endpoint = add_endpoint(engine, rx.url, secret)
        ids = add_order_events(engine, [("order.created", "o1"), ("order.paid", "o1")], clock())
        wait_until(lambda: all_delivered(engine, endpoint, 2), 10, what="the new endpoint's")
        assert rx.delivered_ids() == ids


def _unfanned(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)
                                .where(outbox.c.fanned.is_(None))).scalar_one())
