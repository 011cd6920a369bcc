"""The drill waits for the orders streams, not only the stats, before it counts the database.

A fresh-clone run's drill failed "every 200 stored: 1 missing": an order bought 5 ms before
the orders worker was killed, on an activity with a 7 s payment window. Its entry stayed
pending under the dead consumer until the next worker reclaimed it (30 s idle), while its
hold expired meanwhile, so the stats counted it as no longer pending (an expired hold is not a
decided, unstored order) and the drill read the database before the order was stored. The
state is made here directly on a real gateway: an entry in an activity's orders stream read
by a consumer that never acknowledges it, while the stats say nothing is pending."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from werkzeug.serving import make_server

from seckill.ops.drill.faults import Operator
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.activity.recovery import ORDERS_GROUP
from tests.support.api import create_activity
from tests.support.tokens import ADMIN_TOKEN


@pytest.fixture
def admin_base(app: Flask) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(10)


def test_drained_waits_for_an_entry_a_dead_worker_read(app: Flask, rds: redis.Redis,
                                                      prefix: str, admin_base: str) -> None:
    aid = create_activity(app.test_client(), total=5)["id"]
    stream = KeySpace(prefix).orders(aid)
    entry: Any = rds.xadd(stream, {"order_id": f"{aid}-0-000001", "user": "u1"})
    rds.xgroup_create(stream, ORDERS_GROUP, id="0")
    rds.xreadgroup(ORDERS_GROUP, "killed-worker", {stream: ">"}, count=1)  # never acked
    operator = Operator(admin_base, ADMIN_TOKEN)
    try:
        assert operator.stats(aid)["orders"]["pending"] == 0  # what the stats say
        acked = threading.Timer(1.5, lambda: rds.xack(stream, ORDERS_GROUP, entry))
        started = time.monotonic()
        acked.start()
        operator.drained([aid], timeout=20)
        took = time.monotonic() - started
        acked.join()
    finally:
        operator.close()
    assert 1.5 <= took < 10, took  # it waited for the acknowledgement, then saw it
