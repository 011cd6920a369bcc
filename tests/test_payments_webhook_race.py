"""The late-payment race through ``POST /payments/webhook``: providers' payments arriving within
±300 ms of their orders' pay_by while the expiry runs back to back, on the real gateway app,
Valkey and database. Redis decides each order once (``lua/pay.lua`` against
``lua/expire.lua``), and every side tells the same story: an order ends either paid (the
provider was told ``paid``, no ``order.refund_due``) or expired (told ``refund_due``, exactly
one ``order.refund_due``), the provider got 200 every time, and the database agrees."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from flask import Flask

from seckill.config import Settings
from seckill.domain.clock import now_ms
from seckill.store.plumbing.keys import KeySpace
from seckill.worker.expiry import Expirer
from tests.support.api import buy, create_activity, expect
from tests.support.orders import built_worker, drain, stored_orders
from tests.support.payments import SECRET, payment, signed
from tests.support.timing import wait_until

pytestmark = pytest.mark.database

COUNT = 80


def refund_counts(engine: sa.Engine, aid: str) -> Counter[str]:
    """``order.refund_due`` events per order of the activity."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT subject FROM seckill_outbox WHERE type = 'order.refund_due' "
            "AND activity_id = :aid"), {"aid": aid}).all()
    return Counter(str(row[0]).removeprefix("order:") for row in rows)


def test_payments_racing_the_expiry_each_order_is_paid_or_refunded_never_both(
        make_app: Callable[..., Flask], env: dict[str, str], rds: redis.Redis, prefix: str,
        database_url: str) -> None:
    app = make_app(SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET)
    setup = app.test_client()
    aid = create_activity(setup, total=COUNT, payment_window=4)["id"]
    held = {}
    for i in range(COUNT):  # pay_by a few ms apart: the payments come one by one
        bought = expect(buy(setup, aid, f"racer{i:03d}"), 200)
        held[bought["order_id"]] = bought["pay_by"]
    services = app.extensions["seckill"]
    with built_worker(Settings.from_env(env)) as worker:
        drain(worker)  # the orders are stored before their deadlines (a refund needs its row)
        expirer = Expirer(services.client, services.keys, services.book)
        stop = threading.Event()

        def expire_back_to_back() -> None:
            while not stop.is_set():
                expirer.expire(aid, 1)

        answers: dict[str, list[tuple[int, dict[str, Any]]]] = {o: [] for o in held}

        def pay_at(order_id: str, at_ms: int) -> None:
            client = app.test_client()
            time.sleep(max(0.0, (at_ms - now_ms()) / 1000))  # a scheduled moment, not a wait
            for _ in range(2):  # the provider's delivery, and its retry (a lost 200)
                body = payment(order_id, f"pi-{order_id[-6:]}", amount=999)
                response = client.post("/payments/webhook", data=body, headers=signed(body))
                answers[order_id].append((response.status_code, response.get_json()))

        rng = random.Random(27)
        # ±300 ms: with ±40 all 80 payments of runs on a slow machine (PostgreSQL) came late,
        # none straddled the deadline, and the test proved nothing about the race.
        payers = [threading.Thread(target=pay_at, args=(o, by + rng.randint(-300, 300)))
                  for o, by in held.items()]
        runner = threading.Thread(target=expire_back_to_back)
        runner.start()
        for thread in payers:
            thread.start()
        for thread in payers:
            thread.join(30)
        keys = KeySpace(prefix)
        wait_until(lambda: rds.zcard(keys.holds(aid)) == 0, 10, what="every hold decided")
        stop.set()
        runner.join(10)
        drain(worker)

    raw: dict[str, str] = rds.hgetall(keys.payments(aid))  # type: ignore[assignment]
    decided = {o: r.split("|", 1)[0] for o, r in raw.items()}
    assert set(decided) == set(held) and set(decided.values()) <= {"paid", "expired"}
    refunds = refund_counts(services.engine, aid)
    rows = {row.order_id: row for row in stored_orders(database_url, aid)}
    for order_id, state in decided.items():
        told = answers[order_id]
        assert [status for status, _ in told] == [200, 200], (order_id, told)
        expected = "paid" if state == "paid" else "refund_due"
        assert [body["status"] for _, body in told] == [expected] * 2, (order_id, told)
        assert refunds[order_id] == (0 if state == "paid" else 1), (order_id, state)
        row = rows[order_id]
        assert (row.payment, row.status) == (
            ("paid", "confirmed") if state == "paid" else ("expired", "cancelled")), row
    paid = sum(1 for state in decided.values() if state == "paid")
    assert sum(refunds.values()) == COUNT - paid
    # Both outcomes happened: the payments really did straddle the deadline.
    assert 0 < paid < COUNT, paid
