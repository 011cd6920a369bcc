"""The orders worker: from each activity's Redis stream into the database, exactly once.

Everything is real: the session's Valkey and its 3+3 cluster (every test on both; own key
prefix per test), the test's own SQLite file or PostgreSQL schema, the worker driven in-process
(``build_worker(...).step()``) or run as ``python -m seckill.worker`` and killed with SIGKILL.
What only a cluster has (every master, a failover): tests/test_worker_cluster.py.
"""

from __future__ import annotations

import logging
import re
import signal
import socket
import time
from typing import Any, cast

import pytest
import redis
import sqlalchemy as sa
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.domain.orders import OrderRow
from seckill.store.plumbing.keys import KeySpace
from seckill.worker.orders import GROUP
from tests.support.api import activity_stats, buy_ok, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import (
    DatabaseOutage,
    OrderCounter,
    WorkerThread,
    built_worker,
    consumer_names,
    drain,
    pending,
    queue_purchases,
    stop_worker_process,
    stored_orders,
    stream_key,
    stream_order_ids,
    worker_process,
)
from tests.support.processes import freeze_where
from tests.support.timing import wait_until
from tests.support.tokens import METRICS

pytestmark = [BOTH_BACKENDS, pytest.mark.database]


def _dead_lettered_metric(client: FlaskClient) -> float:
    text = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    found = re.search(r"^seckill_orders_dead_lettered_total (\S+)$", text, re.MULTILINE)
    assert found, "seckill_orders_dead_lettered_total is missing from /metrics"
    return float(found.group(1))


# --- basics ---------------------------------------------------------------------------------


def test_orders_land_once_and_status_goes_pending_to_confirmed(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=5)["id"]
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(3)}
    for uid, order_id in bought.items():
        assert order_status(client, aid, uid) == {"status": "pending", "order_id": order_id}
    assert activity_stats(client, aid)["orders"] == {"pending": 3, "confirmed": 0, "cancelled": 0}
    assert stored_orders(database_url, aid) == []

    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 3

    rows = stored_orders(database_url, aid)
    assert sorted((o.user_id, o.order_id, o.quantity, o.status) for o in rows) == sorted(
        (uid, oid, 1, "confirmed") for uid, oid in bought.items()
    )
    for uid, order_id in bought.items():
        assert order_status(client, aid, uid) == {"status": "confirmed", "order_id": order_id}
    assert activity_stats(client, aid)["orders"] == {"pending": 0, "confirmed": 3, "cancelled": 0}
    assert pending(rds, stream_key(prefix, aid)) == 0


def test_redelivery_never_creates_a_second_order(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=5)["id"]
    bought = {buy_ok(client, aid, f"user{i}") for i in range(3)}
    stream = stream_key(prefix, aid)
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 3
        # Rewind the group: every entry is delivered a second time, as after a crash between
        # the commit and the XACK.
        rds.execute_command("XGROUP", "SETID", stream, GROUP, "0")
        assert drain(worker) == 3
        rows = stored_orders(database_url, aid)
        assert sorted(o.order_id for o in rows) == sorted(bought)

        # The same batch stored twice, straight into the order book: still one row each.
        again = [OrderRow(o.order_id, aid, o.user_id, o.quantity, 1) for o in rows]
        assert worker.book.store_batch(again) == set()
        assert worker.book.store_batch(again) == set()
    assert sorted(o.order_id for o in stored_orders(database_url, aid)) == sorted(bought)
    assert pending(rds, stream) == 0


def test_trim_by_id_keeps_everything_not_yet_acknowledged(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=10)["id"]
    stream = stream_key(prefix, aid)
    first = [buy_ok(client, aid, f"early{i}") for i in range(3)]
    with built_worker(settings, block_ms=100, claim_idle_ms=1) as worker:
        assert drain(worker) == 3
        assert rds.xlen(stream) == 3  # stored and acknowledged, not yet trimmed

        later = [buy_ok(client, aid, f"late{i}") for i in range(3)]
        # Another consumer takes one entry and never acknowledges it (it died, say).
        taken: Any = rds.xreadgroup(GROUP, "ghost", {stream: ">"}, count=1)
        assert [f["order_id"] for _, f in taken[0][1]] == later[:1]

        worker.trim()
        # The acknowledged entries are gone; the one pending elsewhere and the two never
        # delivered stay, whatever their number.
        assert stream_order_ids(rds, stream) == later
        worker.trim()
        assert rds.xlen(stream) == 3

        assert drain(worker) == 3  # two read, one reclaimed from the ghost
        assert pending(rds, stream) == 0
        worker.trim()
        assert rds.xlen(stream) == 0
    assert sorted(o.order_id for o in stored_orders(database_url, aid)) == sorted(first + later)


def test_nogroup_never_surfaces_when_the_stream_or_group_vanishes(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    aid = make_activity(total=10)["id"]
    stream = stream_key(prefix, aid)
    counter = OrderCounter(database_url)
    try:
        with built_worker(settings, block_ms=100, refresh_seconds=0.1) as worker, \
                WorkerThread(worker) as running:
            buy_ok(client, aid, "before")
            wait_until(lambda: counter(aid) == 1, 10, what="the first order stored")

            rds.delete(stream)  # the stream and its group, under the running worker
            buy_ok(client, aid, "after-delete")
            wait_until(lambda: counter(aid) == 2, 10, what="the order after DEL stored")

            rds.xgroup_destroy(stream, GROUP)  # the group alone
            buy_ok(client, aid, "after-destroy")
            wait_until(lambda: counter(aid) == 3, 10, what="the order after DESTROY stored")
            wait_until(lambda: pending(rds, stream) == 0, 10, what="nothing pending")
            assert running.alive()
            running.stop()
    finally:
        counter.close()
    rows = stored_orders(database_url, aid)
    assert sorted(o.user_id for o in rows) == ["after-delete", "after-destroy", "before"]
    assert not [r for r in caplog.records if r.name.startswith("seckill.worker.")
                and r.levelno >= logging.ERROR], "NOGROUP must be handled, not logged as an error"


# --- kill -9 in the middle of a batch -------------------------------------------------------


def test_kill_9_mid_batch_then_a_new_worker_stores_every_order_once(
    client: FlaskClient, make_activity: Any, env: dict[str, str], database_url: str,
    rds: redis.Redis, prefix: str, tmp_path: Any,
) -> None:
    """3 000 orders queued; ``python -m seckill.worker`` reads them 25 at a time and is
    SIGKILLed while the database has some but not all and entries are delivered but not
    acknowledged; a second worker (claim idle 300 ms) reclaims the dead one's pending
    entries: every order in the database exactly once, nothing pending, no dead letters."""
    total = 3_000
    aid = make_activity(total=total)["id"]
    stream = stream_key(prefix, aid)
    bought = queue_purchases(rds, KeySpace(prefix), aid, [f"buyer{i:05d}" for i in range(total)])
    assert rds.xlen(stream) == total

    counter = OrderCounter(database_url)
    options = {"SECKILL_WORKER_BATCH": "25", "SECKILL_WORKER_CLAIM_IDLE_MS": "300",
               "SECKILL_WORKER_BLOCK_MS": "100"}
    log_path = tmp_path / "worker.log"
    try:
        first = worker_process(env, log_path, **options)
        try:
            def mid_batch() -> bool:
                if first.poll() is not None:
                    raise AssertionError(f"worker exited: {log_path.read_text()[-3000:]}")
                return 0 < counter(aid) < total and pending(rds, stream) > 0

            # Freeze the worker where the state is mid-batch (some stored, some delivered and
            # not acknowledged), then kill it: the kill lands there, however fast the database.
            # (Frozen inside its commit, SQLite is locked: not this moment.)
            freeze_where(first, mid_batch, "mid-batch (the first batches stored)",
                         not_there=(sa.exc.OperationalError,))
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            stop_worker_process(first)
        assert first.returncode == -signal.SIGKILL
        at_kill = counter(aid)
        left_pending = pending(rds, stream)
        assert 0 < at_kill < total, at_kill
        assert left_pending > 0, "the kill did not land between a read and its XACK"

        second = worker_process(env, log_path, **options)
        dead, live = f"{socket.gethostname()}-{first.pid}", f"{socket.gethostname()}-{second.pid}"
        try:
            wait_until(lambda: counter(aid) == total and pending(rds, stream) == 0, 60,
                       interval=0.05, what="every order stored by the second worker")
            # The killed worker's name goes once its entries are reclaimed; the live one stays.
            wait_until(lambda: consumer_names(rds, stream) == {live}, 10,
                       what=f"the killed consumer {dead} removed, {live} kept")
        finally:
            code = stop_worker_process(second)  # SIGTERM: warm stop
        assert code == 0, log_path.read_text()[-3000:]
        assert consumer_names(rds, stream) == set(), "a warm stop leaves the group"
    finally:
        counter.close()

    rows = stored_orders(database_url, aid)
    assert len(rows) == total
    assert {o.order_id: o.user_id for o in rows} == {oid: uid for uid, oid in bought.items()}
    assert {o.status for o in rows} == {"confirmed"}
    assert rds.xlen(f"{prefix}:{{{aid}}}:dead") == 0
    assert "reclaimed" in log_path.read_text()


# --- the database goes away for a while -----------------------------------------------------


def test_database_unavailable_purchases_continue_and_everything_lands_after(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker runs (in a thread, as ``seckill worker`` runs it); the database goes away
    for ~3 s (SQLite: another connection holds ``BEGIN EXCLUSIVE``; PostgreSQL: the worker's
    own role gets NOLOGIN and its sessions are terminated, see ``DatabaseOutage``). Purchases
    keep answering 200 meanwhile, nothing is stored, the worker logs and retries and does not
    die (also not while it looks for new activities); afterwards every order lands once."""
    aid = make_activity(total=100)["id"]
    stream = stream_key(prefix, aid)
    outage = DatabaseOutage(database_url, prefix)
    bought: dict[str, str] = {}
    caplog.set_level(logging.INFO, logger="seckill.worker")
    try:
        with built_worker(settings, block_ms=100, refresh_seconds=0.2, backoff_max=1.0) as worker:
            worker.book.engine.dispose()
            worker.book = type(worker.book)(outage.worker_engine()).ready()
            with WorkerThread(worker) as running:
                bought.update({f"early{i}": buy_ok(client, aid, f"early{i}") for i in range(5)})
                wait_until(lambda: outage.count(aid) == 5, 10, what="the first orders stored")

                outage.begin()
                down_since = time.monotonic()
                time.sleep(0.5)  # the idle worker looks for new activities meanwhile
                during = 0
                while time.monotonic() - down_since < 3.0 and during < 60:
                    bought[f"during{during}"] = buy_ok(client, aid, f"during{during}")
                    during += 1
                    time.sleep(0.05)
                assert during >= 5
                assert outage.count(aid) == 5, "nothing can be stored while the database is away"
                assert running.alive(), running.error
                outage.end()
                down_for = time.monotonic() - down_since

                wait_until(
                    lambda: outage.count(aid) == 5 + during and pending(rds, stream) == 0, 20,
                    what="every order stored after the database came back",
                )
                assert running.alive(), running.error
                running.stop()
            worker.book.engine.dispose()
    finally:
        outage.close()

    assert down_for >= 3.0
    rows = stored_orders(database_url, aid)
    assert {o.order_id: o.user_id for o in rows} == {oid: uid for uid, oid in bought.items()}
    retries = [r for r in caplog.records
               if r.name.startswith("seckill.worker.") and "database unavailable" in r.getMessage()]
    assert len(retries) >= 2, "the worker must say, and retry, while the database is away"
    for uid, order_id in bought.items():
        assert order_status(client, aid, uid) == {"status": "confirmed", "order_id": order_id}


# --- poison ---------------------------------------------------------------------------------


def test_poison_entries_go_to_dead_letters_and_block_nothing(
    client: FlaskClient, make_activity: Any, settings: Settings, database_url: str,
    rds: redis.Redis, prefix: str,
) -> None:
    """Entries that can never be orders, written straight onto the stream between real
    purchases: each goes to ``<prefix>:{<aid>}:dead`` with its reason and is acknowledged,
    ``seckill_orders_dead_lettered_total`` counts them, the real orders are stored. Values no
    column can hold (a 31-digit ts, a 13-digit quantity, a 150-character order id) used to
    crash the worker on SQLite (OverflowError) or stall it on PostgreSQL."""
    aid = make_activity(total=10)["id"]
    stream, dead = stream_key(prefix, aid), f"{prefix}:{{{aid}}}:dead"
    ms = int(time.time() * 1000)

    def entry(**fields: Any) -> Any:
        base = {"type": "purchase", "order_id": f"{aid}-{ms:013d}-900001", "activity": aid,
                "user": "mallory", "quantity": 1, "ts": ms}
        base.update(fields)
        return base

    poisons = [
        (entry(order_id="garbage"), "does not belong"),
        (entry(order_id=f"other-{ms:013d}-000001"), "does not belong"),
        (entry(user="not a user!"), "not a valid user id"),
        (entry(quantity=0), "quantity"),
        (entry(quantity="many"), "quantity"),
        (entry(ts="soon"), "ts"),
        (entry(type="refund"), "unknown entry type"),
        # Integers no column can hold: they must be refused here, not crash the worker.
        (entry(ts=10**30), "ts"),
        (entry(quantity=10**12), "quantity"),
        (entry(order_id=f"{aid}-{ms:013d}-{'9' * 120}"), "order id"),
    ]
    before = _dead_lettered_metric(client)
    good = {"good0": buy_ok(client, aid, "good0")}
    for fields, _ in poisons[:5]:
        rds.xadd(stream, fields)
    good["good1"] = buy_ok(client, aid, "good1")
    for fields, _ in poisons[5:]:
        rds.xadd(stream, fields)
    good["good2"] = buy_ok(client, aid, "good2")
    # Well-formed, but the buyer already holds another live order: the database refuses it.
    rds.xadd(stream, entry(user="good0", order_id=f"{aid}-{ms:013d}-900002"))
    expected = [*(reason for _, reason in poisons), "already holds another live order"]

    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 3 + len(expected)

    rows = stored_orders(database_url, aid)
    assert {o.order_id: o.user_id for o in rows} == {oid: uid for uid, oid in good.items()}
    letters = cast(list[tuple[str, dict[str, str]]], rds.xrange(dead))
    assert len(letters) == len(expected)
    for (_, letter), reason in zip(letters, expected, strict=True):
        assert reason in letter["reason"], (reason, letter)
        assert letter["stream"] == stream
        assert letter["entry_id"] and letter["payload"]
    assert pending(rds, stream) == 0, "dead letters must be acknowledged"
    # The /metrics body is kept for the metrics interval: the count shows once it is remade.
    wait_until(lambda: _dead_lettered_metric(client) - before == len(expected), 5,
               what="the dead letters counted")
    for uid, order_id in good.items():
        assert order_status(client, aid, uid) == {"status": "confirmed", "order_id": order_id}
