"""The confirmed mark (issue 11, item 5): an order stored in the database is never left
``pending`` in Redis, whatever moment a connection or a server dies at.

Everything is real: the session's Valkey (own key prefix per test), the test's own SQLite file
or PostgreSQL schema, the orders worker run as ``seckill worker`` runs it (``run`` in a
thread), and a TCP relay (``tests/cutting_proxy.py``) that cuts the worker's connection at the
exact moment the stream entries are acknowledged.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import redis
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.ops.embedded import EmbeddedValkey
from seckill.worker.orders import GROUP
from tests.conftest import activity_stats, order_status
from tests.cutting_proxy import CuttingProxy
from tests.faults import WorkerThread, built_worker, pending, stored_orders, wait_until
from tests.test_orders_worker import buy_ok, stream_key


def test_a_cut_right_after_the_acknowledgement_never_leaves_an_order_pending(
    client: FlaskClient, make_activity: Any, env: dict[str, str], database_url: str,
    valkey: EmbeddedValkey, rds: redis.Redis, prefix: str,
) -> None:
    """Six orders wait in the stream; the worker reads them, stores them, and the moment the
    group shows them acknowledged (nothing pending, everything delivered) its connection is
    cut, before the reply to that command reaches it: what a kill -9 of Valkey right after
    the acknowledgement does to the worker, every time. Then the worker goes on. Each buyer
    must end ``confirmed``, as the database and the stats say, not ``pending`` forever."""
    aid = make_activity(total=10)["id"]
    stream = stream_key(prefix, aid)
    bought = {f"user{i}": buy_ok(client, aid, f"user{i}") for i in range(6)}
    last_id = cast(list[tuple[str, Any]], rds.xrevrange(stream, count=1))[0][0]
    watcher = redis.Redis.from_url(valkey.url, decode_responses=True)

    def acknowledged() -> bool:
        """The group delivered every entry and none is pending: the acknowledgement ran."""
        if not watcher.exists(stream):
            return False
        groups: Any = watcher.xinfo_groups(stream)
        group = next((g for g in groups if g["name"] == GROUP), None)
        return bool(group and group["last-delivered-id"] == last_id and group["pending"] == 0)

    def statuses() -> dict[str, str]:
        return {uid: order_status(client, aid, uid)["status"] for uid in bought}

    try:
        with CuttingProxy(valkey.port, cut_when=acknowledged) as proxy:
            through = Settings.from_env({**env, "REDIS_URL": proxy.url})
            with built_worker(through, block_ms=100) as worker, WorkerThread(worker) as running:
                wait_until(lambda: proxy.cuts, 15, what="the cut right after the acknowledgement")
                # The window, as the cut left it: every order stored and acknowledged.
                rows = stored_orders(database_url, aid)
                assert {o.order_id for o in rows} == set(bought.values())
                assert {o.status for o in rows} == {"confirmed"}
                assert pending(rds, stream) == 0
                # The worker reconnects and goes on (its next cycles run within ~1 s).
                # (If they never are, the assertion below says what each buyer was told.)
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: set(statuses().values()) == {"confirmed"}, 5,
                               what="every buyer confirmed after the cut")
                assert running.alive(), running.error
                running.stop()
            assert not proxy.errors, proxy.errors
    finally:
        watcher.close()
    assert statuses() == dict.fromkeys(bought, "confirmed")
    stats = activity_stats(client, aid)["orders"]
    assert stats == {"pending": 0, "confirmed": 6, "cancelled": 0}
    assert pending(rds, stream) == 0
