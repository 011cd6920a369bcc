"""The outbox under a killed worker: ``python -m seckill.worker`` SIGKILLed in the
middle of a batch, a second worker reclaiming its entries: the events match the stored rows
exactly (one order.created per row, one order.cancelled / order.expired per cancelled row, one
activity.sold_out), none lost with its change, none written twice by a redelivery.

The session's Valkey, the test's own SQLite file or PostgreSQL schema; two activities read by
the same workers: one sold out by its purchases alone, one with cancels and expiries queued
behind its purchases (raw stream entries, as the cancel and expiry scripts write them).
"""

from __future__ import annotations

import collections
import signal
from typing import Any

import orjson
import pytest
import redis
import sqlalchemy as sa

from seckill.sql import engine as db
from seckill.sql.outbox import event_rows
from seckill.sql.schema import orders
from seckill.store.plumbing.keys import KeySpace
from tests.support.orders import (
    OrderCounter,
    pending,
    queue_purchases,
    stop_worker_process,
    worker_process,
)
from tests.support.processes import freeze_where
from tests.support.timing import wait_until

pytestmark = pytest.mark.database


def test_kill_9_mid_batch_leaves_events_matching_the_rows(
    make_activity: Any, env: dict[str, str], database_url: str, rds: redis.Redis,
    prefix: str, tmp_path: Any,
) -> None:
    sold, mixed = 1_200, 900
    full = make_activity(total=sold)["id"]
    other = make_activity(total=mixed + 100)["id"]
    streams = [f"{prefix}:{{{a}}}:orders" for a in (full, other)]
    keys = KeySpace(prefix)
    queue_purchases(rds, keys, full, [f"f{i:05d}" for i in range(sold)])
    bought = queue_purchases(rds, keys, other, [f"m{i:05d}" for i in range(mixed)])
    for n, oid in enumerate(sorted(bought.values())):
        if n % 3 != 2:  # two thirds cancelled: half of them by the operator, half expired
            entry = {"type": "cancel", "order_id": oid, "activity": other, "ts": str(1000 + n)}
            if n % 3 == 1:
                entry["reason"] = "expired"
            rds.xadd(streams[1], entry)  # type: ignore[arg-type]

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
                return (0 < counter(full) + counter(other) < sold + mixed
                        and sum(pending(rds, s) for s in streams) > 0)

            # Frozen mid-batch (stored, not acknowledged), then killed; frozen inside its
            # commit, SQLite is locked: not this moment.
            freeze_where(first, mid_batch, "mid-batch (the first batches stored)",
                         not_there=(sa.exc.OperationalError,))
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            stop_worker_process(first)
        assert first.returncode == -signal.SIGKILL
        assert sum(pending(rds, s) for s in streams) > 0, "the kill landed between batches"

        second = worker_process(env, log_path, **options)
        try:
            wait_until(lambda: counter(full) == sold and counter(other) == mixed
                       and sum(pending(rds, s) for s in streams) == 0, 90, interval=0.05,
                       what="every entry stored and acknowledged by the second worker")
            wait_until(lambda: _cancelled(database_url, other) == 2 * mixed // 3, 30,
                       what="every cancel applied")
        finally:
            code = stop_worker_process(second)
        assert code == 0, log_path.read_text()[-3000:]
    finally:
        counter.close()

    engine = db.make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = {r.order_id: r for r in conn.execute(sa.select(orders))}
            events = [(e.type, orjson.loads(e.body)["data"]) for e in event_rows(conn)]
    finally:
        engine.dispose()
    per_type = collections.Counter(t for t, _ in events)
    created = collections.Counter(d["order_id"] for t, d in events if t == "order.created")
    assert created == collections.Counter(list(rows)), "one order.created per stored row"
    for kind, expired in (("order.cancelled", False), ("order.expired", True)):
        ids = collections.Counter(d["order_id"] for t, d in events if t == kind)
        wanted = {o for o, r in rows.items()
                  if r.status == "cancelled" and (r.payment == "expired") == expired}
        assert ids == collections.Counter(wanted), kind
    assert per_type["order.cancelled"] == per_type["order.expired"] == mixed // 3
    assert [d for t, d in events if t == "activity.sold_out"] == [
        {"activity": full, "total": sold, "sold": sold}]
    assert len(events) == sold + mixed + 2 * (mixed // 3) + 1


def _cancelled(database_url: str, aid: str) -> int:
    engine = db.make_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).where(
                orders.c.activity_id == aid, orders.c.status == "cancelled")).scalar_one())
    finally:
        engine.dispose()
