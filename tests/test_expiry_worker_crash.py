"""An update that reaches the database before its order.

The orders worker killed -9 between reading purchases and acknowledging them leaves those
entries pending under its dead name, to be reclaimed only after the claim bound; what Redis
decides about the orders meanwhile (a hold expiring, an operator's cancel, a payment) is a new
entry on the same stream, read at once by the next worker. That update reaches SQL before its
order does: it must not be lost, and the order, when it comes, must land in the state Redis
decided (cancelled, expired, paid), with ``reconcile`` clean and nothing pending.

Everything is real: the session's Valkey and its cluster, the test's own SQLite database (or
PostgreSQL with ``SECKILL_TEST_POSTGRES``), the real scripts, the real worker (stepped
in-process, or ``python -m seckill.worker`` killed -9).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.store.audit.reconcile import reconcile
from seckill.store.plumbing.keys import KeySpace
from seckill.worker import streams
from seckill.worker.expiry import Expirer
from seckill.worker.orders import GROUP
from tests.support.api import buy_ok, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import (
    WorkerThread,
    built_worker,
    drain,
    pending,
    stop_worker_process,
    stored_orders,
    stream_key,
    worker_process,
)
from tests.support.processes import stopped
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database


def read_then_die(settings: Settings, stream: str) -> int:
    """A worker reads what waits on ``stream`` and dies before storing it (as killed between
    its read and its XACK): the entries stay pending under its name. Returns how many."""
    with built_worker(settings, consumer="killed") as worker:
        worker.refresh_streams(force=True)  # the group, as the worker makes it on start
        got = streams.read(worker.client, worker.consumer, [stream], ">",
                           worker.options.batch, None)
    return got.entries


def expire_all(app: Flask, rds: redis.Redis, keys: KeySpace, aid: str) -> None:
    """Run the real expiry until every hold of ``aid`` is gone (each pay_by passed)."""
    services = app.extensions["seckill"]
    expirer = Expirer(services.client, services.keys, services.book)

    def none_left() -> bool:
        expirer.expire(aid, 1)
        return rds.zcard(keys.holds(aid)) == 0

    wait_until(none_left, 10, interval=0.05, what="every hold expired")


def settle(settings: Settings, rds: redis.Redis, stream: str) -> None:
    """The next worker (claim bound 300 ms) runs until nothing is pending: what the dead one
    held is reclaimed once idle that long."""
    with built_worker(settings, block_ms=100, claim_idle_ms=300, consumer="next") as worker:
        wait_until(lambda: drain(worker) == 0 and pending(rds, stream) == 0, 30,
                   interval=0.1, what="nothing pending")


def check_clean(app: Flask, rds: redis.Redis, stream: str, prefix: str, aid: str) -> None:
    """Nothing pending, nothing dead-lettered, and ``reconcile`` finds no difference."""
    assert pending(rds, stream) == 0
    assert rds.xlen(f"{prefix}:{{{aid}}}:dead") == 0
    assert reconcile(app.extensions["seckill"].restorer, aid)["differences"] == {}


@BOTH_BACKENDS
def test_holds_expired_while_their_purchases_wait_in_a_dead_consumer_are_stored_expired(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """Three holds (1 s window) read by a worker that dies; they expire; the next worker
    reads the three expiries at once (new entries) and the purchases only when it reclaims
    them: each order ends cancelled with its payment expired, as in Redis."""
    aid = make_activity(total=5, payment_window=1)["id"]
    keys, stream = KeySpace(prefix), stream_key(prefix, aid)
    bought = {uid: buy_ok(client, aid, uid) for uid in ("ann", "bob", "cy")}
    assert read_then_die(settings, stream) == 3
    expire_all(app, rds, keys, aid)

    settle(settings, rds, stream)

    rows = {o.order_id: (o.status, o.payment) for o in stored_orders(database_url, aid)}
    assert rows == dict.fromkeys(bought.values(), ("cancelled", "expired"))
    check_clean(app, rds, stream, prefix, aid)


@BOTH_BACKENDS
def test_an_operators_cancel_before_the_order_is_stored_and_a_new_purchase_after_it(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """ann's order is read by a worker that dies; the operator cancels it; ann buys again
    (a cancel gives the right back). The next worker stores the new order first and the old
    one when it reclaims it: the old one cancelled (never dead-lettered for ann's live
    order), the new one confirmed."""
    aid = make_activity(total=5)["id"]
    stream = stream_key(prefix, aid)
    first = buy_ok(client, aid, "ann")
    assert read_then_die(settings, stream) == 1
    cancelled = client.post(f"/admin/orders/{first}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.get_json()
    second = buy_ok(client, aid, "ann")

    settle(settings, rds, stream)

    rows = {o.order_id: o.status for o in stored_orders(database_url, aid)}
    assert rows == {first: "cancelled", second: "confirmed"}
    assert order_status(client, aid, "ann") == {"status": "confirmed", "order_id": second}
    check_clean(app, rds, stream, prefix, aid)


@BOTH_BACKENDS
def test_a_payment_before_the_order_is_stored_is_kept(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """ann's held order is read by a worker that dies; she pays; the next worker reads the
    payment first: the order is stored paid, with its reference."""
    aid = make_activity(total=5, payment_window=60)["id"]
    stream = stream_key(prefix, aid)
    order = buy_ok(client, aid, "ann")
    assert read_then_die(settings, stream) == 1
    paid = client.post(f"/admin/orders/{order}/pay", json={"payment_ref": "pi_early"},
                       headers=ADMIN)
    assert paid.status_code == 200, paid.get_json()

    settle(settings, rds, stream)

    rows = {o.order_id: (o.status, o.payment, o.payment_ref)
            for o in stored_orders(database_url, aid)}
    assert rows == {order: ("confirmed", "paid", "pi_early")}
    check_clean(app, rds, stream, prefix, aid)


@BOTH_BACKENDS
def test_a_warm_stop_hands_its_held_updates_to_the_next_worker_at_once(
    app: Flask, client: FlaskClient, make_activity: Any, settings: Settings,
    database_url: str, rds: redis.Redis, prefix: str,
) -> None:
    """The drill's stop-and-start: a worker holds a cancel whose purchase a killed worker
    left pending, and is stopped warmly. Left as it was, the cancel would wait out the claim
    bound (30 s) under the stopped worker's name; handed back (its idle time set past the
    bound), the next worker takes it at its first reclaim, even with a 60 s bound."""
    aid = make_activity(total=5)["id"]
    stream = stream_key(prefix, aid)
    order = buy_ok(client, aid, "ann")
    assert read_then_die(settings, stream) == 1
    assert client.post(f"/admin/orders/{order}/cancel", headers=ADMIN).status_code == 200
    with built_worker(settings, block_ms=100, claim_idle_ms=60_000,
                      consumer="stopped") as worker, WorkerThread(worker) as running:
        wait_until(lambda: len(worker.deferred) == 1, 10, what="the cancel held")
        running.stop()
    with built_worker(settings, block_ms=100, claim_idle_ms=60_000, consumer="next") as worker:
        worker.refresh_streams(force=True)
        assert worker.reclaim(None) == 1, "the held cancel is claimable at once"
        assert len(worker.deferred) == 1
    settle(settings, rds, stream)
    assert [(o.order_id, o.status) for o in stored_orders(database_url, aid)] == [
        (order, "cancelled")]
    check_clean(app, rds, stream, prefix, aid)


def blocked_reads(rds: redis.Redis) -> int:
    """How many clients of the server wait in a blocking XREADGROUP (the worker's read)."""
    clients: Any = rds.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xreadgroup" and "b" in c.get("flags", ""))


@pytest.mark.parametrize("redis_backend", ["single"], indirect=True)
def test_the_real_worker_killed_9_with_a_purchase_in_hand_then_the_holds_expire(
    app: Flask, client: FlaskClient, make_activity: Any, env: dict[str, str],
    database_url: str, rds: redis.Redis, prefix: str, tmp_path: Path,
) -> None:
    """The drill's case. ``python -m seckill.worker`` is frozen (SIGSTOP) inside its blocking
    read, three buyers buy (1 s window): the read is answered with ann's purchase, which the
    frozen worker never stores; it is killed -9. The holds expire while no worker runs; a new
    worker reads bob's and cy's purchases and the three expiries at once, and ann's purchase
    only when it reclaims it. Every order ends cancelled (payment expired), as in Redis."""
    aid = make_activity(total=10, payment_window=1)["id"]
    keys, stream = KeySpace(prefix), stream_key(prefix, aid)
    options = {"SECKILL_WORKER_BLOCK_MS": "2000", "SECKILL_WORKER_CLAIM_IDLE_MS": "1500"}
    log_path = tmp_path / "worker.log"
    first = worker_process(env, log_path, **options)
    try:
        wait_until(lambda: rds.exists(stream) and rds.xinfo_consumers(stream, GROUP), 30,
                   what="the first worker reading the stream")
        for _ in range(200):  # freeze it where it waits in XREADGROUP (bounded retries)
            stopped(first)
            if blocked_reads(rds) == 1:
                break
            first.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        else:
            raise AssertionError("the worker was never frozen inside its read")
        bought = {uid: buy_ok(client, aid, uid) for uid in ("ann", "bob", "cy")}
        wait_until(lambda: pending(rds, stream) == 1, 10, what="ann's purchase in hand")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop_worker_process(first)
    assert first.returncode == -signal.SIGKILL
    expire_all(app, rds, keys, aid)  # the holds expire while no worker runs

    second = worker_process(env, log_path, **options)
    try:
        wait_until(lambda: len(stored_orders(database_url, aid)) == 3
                   and pending(rds, stream) == 0, 60, interval=0.1,
                   what="every order stored by the second worker")
    finally:
        code = stop_worker_process(second)
    assert code == 0, log_path.read_text()[-3000:]

    rows = {o.order_id: (o.status, o.payment) for o in stored_orders(database_url, aid)}
    assert rows == dict.fromkeys(bought.values(), ("cancelled", "expired"))
    check_clean(app, rds, stream, prefix, aid)


@BOTH_BACKENDS
def test_an_update_whose_order_never_comes_is_dead_lettered_and_blocks_nothing(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    """A well-formed cancel of an order no purchase entry carries: held pending (not lost,
    not acknowledged), the purchases after it stored meanwhile (also when the worker re-reads
    its own pending entries after a Redis failure: the held one is no progress), and
    dead-lettered once reclaimed ``max_deliveries`` times without its order."""
    aid = make_activity(total=5)["id"]
    stream, dead = stream_key(prefix, aid), f"{prefix}:{{{aid}}}:dead"
    ghost = f"{aid}-{int(time.time() * 1000):013d}-999999"
    with built_worker(settings, block_ms=100, consumer="next") as worker:  # claims at 30 s
        worker.refresh_streams(force=True)
        rds.xadd(stream, {"type": "cancel", "order_id": ghost, "activity": aid, "user": "zed",
                          "quantity": 1, "ts": int(time.time() * 1000)})
        assert worker.step() == 1
        assert pending(rds, stream) == 1 and rds.xlen(dead) == 0, "held, not acknowledged"
        order = buy_ok(client, aid, "ann")
        worker._own_pending = True  # as after a Redis failure: re-read our pending entries
        assert worker.step() == 0 and not worker._own_pending
        assert worker.step() == 1
        assert [o.order_id for o in stored_orders(database_url, aid)] == [order]
        assert pending(rds, stream) == 1
    with built_worker(settings, block_ms=100, claim_idle_ms=200, max_deliveries=3,
                      consumer="later") as worker:
        wait_until(lambda: drain(worker) == 0 and pending(rds, stream) == 0, 30,
                   interval=0.1, what="the cancel of no order dead-lettered")
    letters: Any = rds.xrange(dead)
    assert len(letters) == 1 and "never stored" in letters[0][1]["reason"]
    assert ghost in letters[0][1]["payload"]
