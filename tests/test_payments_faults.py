"""The payment window under stress and crashes, on real servers: payments racing the expiry
at the deadline (exactly one wins, and both sides say the same), the real ``seckill worker``
killed -9 mid-expiry of 1,000 holds, Valkey killed -9 and restarted from its AOF mid-expiry,
and the database away while holds expire."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from flask import Flask

from seckill.config import Settings
from seckill.domain.clock import now_ms
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.web.app import create_app
from seckill.worker.expiry import Expirer
from seckill.worker.stop import StopFlag
from tests.support.api import create_activity
from tests.support.backends import BOTH_BACKENDS
from tests.support.orders import (
    dedicated_valkey,
    stop_worker_process,
    stored_orders,
    worker_process,
)
from tests.support.processes import freeze_where
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database


def hold_many(rds: redis.Redis, keys: KeySpace, aid: str, count: int,
              stem: str = "h") -> dict[str, int]:
    """``count`` purchases by the real purchase script, pipelined, on an activity with a
    payment window: order id -> pay_by."""
    script = Scripts(rds).purchase
    sha = rds.script_load(script.script)
    held: dict[str, int] = {}
    for start in range(0, count, 250):
        pipe = rds.pipeline(transaction=False)
        for i in range(start, min(count, start + 250)):
            on = [*keys.activity_keys(aid), *keys.payment_keys(aid)]
            pipe.execute_command("EVALSHA", sha, len(on), *on, f"{stem}{i:05d}", 1, aid)
        for reply in pipe.execute():
            assert reply[0] == "ok", reply
            held[str(reply[1])] = int(reply[3])
    return held


def expired_entries(rds: redis.Redis, stream: str) -> Counter[str]:
    entries = cast(list[tuple[str, dict[str, str]]], rds.xrange(stream))
    return Counter(f["order_id"] for _, f in entries
                   if f.get("type") == "cancel" and f.get("reason") == "expired")


def check_every_hold_expired_once(rds: redis.Redis, keys: KeySpace, aid: str,
                                  held: dict[str, int]) -> None:
    """All units back, each order expired exactly once (one stream entry, one record)."""
    assert expired_entries(rds, keys.orders(aid)) == Counter(list(held))
    meta = rds.hgetall(keys.meta(aid))
    assert (int(meta["remaining"]), int(meta["sold"]), int(meta["expired"])) == (
        len(held), 0, len(held))
    assert rds.zcard(keys.holds(aid)) == 0 and rds.hlen(keys.buyers(aid)) == 0
    records: dict[str, str] = rds.hgetall(keys.payments(aid))  # type: ignore[assignment]
    assert {o: r.split("|", 1)[0] for o, r in records.items()} == dict.fromkeys(held, "expired")


def freeze_mid(process: subprocess.Popen[bytes], mid: Callable[[], bool]) -> None:
    """SIGSTOP ``process`` at a moment ``mid()`` holds, and leave it frozen there (then the
    kill lands exactly there, however fast the work)."""
    freeze_where(process, mid, "mid-expiry", interval=0.001)


@BOTH_BACKENDS
def test_payments_racing_the_expiry_at_the_deadline_exactly_one_wins(
        app: Flask, make_activity: Any, rds: redis.Redis, prefix: str) -> None:
    """200 held orders (in groups of 10, 100 ms apart), each paid within ±40 ms of its pay_by
    while the expiry runs
    back-to-back: every order ends paid or expired, never both, never neither; each payment
    answer matches its order's final state, and the expiry's count matches the rest."""
    count = 200
    aid = make_activity(total=count, payment_window=3)["id"]
    keys = KeySpace(prefix)
    held: dict[str, int] = {}
    for i in range(count // 10):  # deadlines 10 ms apart, so the payments come one by one
        held.update(hold_many(rds, keys, aid, 10, stem=f"r{i}-"))
        time.sleep(0.1)
    services = app.extensions["seckill"]
    expirer = Expirer(services.client, services.keys, services.book)
    stop = threading.Event()
    expired_total = 0

    def expire_back_to_back() -> None:
        nonlocal expired_total
        while not stop.is_set():
            expired_total += expirer.expire(aid, 1)[0]

    answers: dict[str, tuple[int, dict[str, Any]]] = {}

    def pay_at(order_id: str, at_ms: int) -> None:
        client = app.test_client()
        time.sleep(max(0.0, (at_ms - now_ms()) / 1000))
        response = client.post(f"/admin/orders/{order_id}/pay",
                               json={"payment_ref": f"ref-{order_id[-6:]}"}, headers=ADMIN)
        answers[order_id] = (response.status_code, response.get_json())

    rng = random.Random(7)
    payers = [threading.Thread(target=pay_at, args=(o, by + rng.randint(-40, 40)))
              for o, by in held.items()]
    runner = threading.Thread(target=expire_back_to_back)
    runner.start()
    for thread in payers:
        thread.start()
    for thread in payers:
        thread.join(30)
    wait_until(lambda: rds.zcard(keys.holds(aid)) == 0, 10, what="every hold decided")
    stop.set()
    runner.join(10)

    raw: dict[str, str] = rds.hgetall(keys.payments(aid))  # type: ignore[assignment]
    records = {o: r.split("|", 1)[0] for o, r in raw.items()}
    assert set(records) == set(held) and set(records.values()) <= {"paid", "expired"}
    for order_id, (status, body) in answers.items():
        expected = (200, "paid") if records[order_id] == "paid" else (409, "payment_expired")
        assert (status, body.get("status") or body.get("error")) == expected, (order_id, body)
    paid = sum(1 for state in records.values() if state == "paid")
    expired = count - paid
    assert expired_total == expired == len(expired_entries(rds, keys.orders(aid)))
    meta = rds.hgetall(keys.meta(aid))
    assert (int(meta["remaining"]), int(meta["sold"])) == (expired, paid)
    assert (int(meta["paid"]), int(meta["expired"])) == (paid, expired)
    # Both outcomes happened: the payments really did straddle the deadline.
    assert 0 < paid < count, paid


@pytest.mark.slow  # about 35 s: a thousand holds, one expiry call each
def test_the_worker_killed_mid_expiry_of_a_thousand_holds_expires_each_once(
        env: dict[str, str], make_activity: Any, rds: redis.Redis, prefix: str,
        tmp_path: Path, database_url: str) -> None:
    """The real `seckill worker`, one hold per expiry call: frozen then killed -9 once some
    holds are expired and some are not; a second worker finishes. Every order expired exactly
    once in Redis, and stored as expired once in the database."""
    count = 1000
    aid = make_activity(total=count, payment_window=3)["id"]
    keys = KeySpace(prefix)
    held = hold_many(rds, keys, aid, count)
    options = {"SECKILL_EXPIRY_BATCH": "1", "SECKILL_WORKER_BLOCK_MS": "100"}
    log_path = tmp_path / "worker.log"
    first = worker_process(env, log_path, **options)
    try:
        def mid_expiry() -> bool:
            if first.poll() is not None:
                raise AssertionError(f"worker exited: {log_path.read_text()[-3000:]}")
            return 0 < rds.zcard(keys.holds(aid)) < count

        freeze_mid(first, mid_expiry)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop_worker_process(first)
    assert first.returncode == -signal.SIGKILL
    left = rds.zcard(keys.holds(aid))
    assert 0 < left < count, left
    second = worker_process(env, log_path, **options)
    try:
        wait_until(lambda: rds.zcard(keys.holds(aid)) == 0, 60, what="the second worker")
        check_every_hold_expired_once(rds, keys, aid, held)

        def stored_expired() -> int:
            return sum(1 for o in stored_orders(database_url, aid)
                       if (o.status, o.payment) == ("cancelled", "expired"))

        wait_until(lambda: stored_expired() == count, 60, what="the expiries stored")
    finally:
        assert stop_worker_process(second) == 0, log_path.read_text()[-3000:]
    rows = stored_orders(database_url, aid)
    assert len(rows) == count and {o.order_id for o in rows} == set(held)


def test_valkey_killed_mid_expiry_comes_back_from_its_aof_and_expires_each_once(
        env: dict[str, str], tmp_path: Path, prefix: str) -> None:
    """A Valkey of this test's own (appendfsync always, as `seckill up`), killed -9
    mid-expiry, then restarted from its AOF: the expiry resumes from what was written, and
    no hold is expired twice or forgotten."""
    keys = KeySpace(prefix)
    with dedicated_valkey(tmp_path / "valkey") as server:
        app = create_app(Settings.from_env({**env, "REDIS_URL": server.url}))
        services = app.extensions["seckill"]
        try:
            aid = create_activity(app.test_client(), total=2000, payment_window=1)["id"]
            rds = redis.Redis.from_url(server.url, decode_responses=True)
            held = hold_many(rds, keys, aid, 2000)
            expirer = Expirer(services.client, services.keys, services.book, batch=1,
                              interval=0.01, refresh_seconds=0.1)
            stop = StopFlag()
            runner = threading.Thread(target=expirer.run, args=(stop,), daemon=True)
            runner.start()
            process = server.process
            assert process is not None
            # One hold per call, 2,000 holds: the kill lands well inside the run.
            wait_until(lambda: rds.zcard(keys.holds(aid)) < 2000, 30, interval=0.001,
                       what="the expiry under way")
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            rds.close()
            server.start()  # from the same folder: the AOF
            rds = redis.Redis.from_url(server.url, decode_responses=True)
            assert 0 < rds.zcard(keys.holds(aid)) < 2000  # what the AOF had: mid-expiry
            wait_until(lambda: rds.zcard(keys.holds(aid)) == 0, 30, what="the expiry resumed")
            stop.event.set()
            runner.join(10)
            check_every_hold_expired_once(rds, keys, aid, held)
            rds.close()
        finally:
            services.close()


@pytest.mark.parametrize("redis_backend", ["single"], indirect=True)
def test_holds_expire_while_the_database_is_away(
        app: Flask, make_activity: Any, rds: redis.Redis, prefix: str) -> None:
    """The expirer knows the activity, then its database stops answering (nothing listens on
    its port any more): the holds still go back on time; the list is the only thing it
    reads from the database."""
    aid = make_activity(total=50, payment_window=1)["id"]
    keys = KeySpace(prefix)
    held = hold_many(rds, keys, aid, 50)
    services = app.extensions["seckill"]
    expirer = Expirer(services.client, services.keys, services.book, refresh_seconds=0.0)
    assert aid in expirer.activities()
    away = OrderBook(make_engine("postgresql+psycopg://seckill@127.0.0.1:9/away"))
    expirer.book = away  # the same expirer, its database gone
    wait_until(lambda: now_ms() > max(held.values()), 5, what="pay_by")
    assert expirer.step() == 50
    check_every_hold_expired_once(rds, keys, aid, held)
