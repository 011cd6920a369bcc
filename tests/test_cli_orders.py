"""``seckill order cancel`` and ``seckill reconcile``, run as real processes."""

from __future__ import annotations

import json

import pytest

from tests.support.api import buy
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.cli import assert_one_line_error, seckill
from tests.support.orders import built_worker
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database


def test_order_cancel_gives_the_stock_back_once(client, make_activity, env, rds, prefix):
    activity = make_activity(total=2)
    order_id = buy(client, activity["id"], "alice").get_json()["order_id"]

    done = seckill("order", "cancel", order_id, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": "cancelled", "order_id": order_id,
                                       "remaining": 2}
    assert rds.hget(f"{prefix}:{{{activity['id']}}}:meta", "remaining") == "2"

    again = seckill("order", "cancel", order_id, env=env)
    assert_one_line_error(again, 1, "already_cancelled")
    assert rds.hget(f"{prefix}:{{{activity['id']}}}:meta", "remaining") == "2"

    unknown = seckill("order", "cancel", f"{activity['id']}-1700000000000-000099", env=env)
    assert_one_line_error(unknown, 1, "unknown_order")


def test_order_pay_and_an_activity_with_a_payment_window(client, env):
    """`seckill activity create --payment-window` and `seckill order pay`: the admin API's
    validation and answers, as one-line errors when refused."""
    made = seckill("activity", "create", "--id", "cliheld", "--name", "Held", "--total", "3",
                   "--duration", "3600", "--payment-window", "120", env=env)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["payment_window"] == 120
    bought = buy(client, "cliheld", "payer").get_json()
    assert bought["pay_by"] > 0
    paid = seckill("order", "pay", bought["order_id"], "--ref", "pi_cli_1", env=env)
    assert paid.returncode == 0, paid.stderr
    assert json.loads(paid.stdout) == {"status": "paid", "order_id": bought["order_id"],
                                       "payment_ref": "pi_cli_1"}
    again = seckill("order", "pay", bought["order_id"], "--ref", "pi_cli_2", env=env)
    assert_one_line_error(again, 1, "already_paid")
    bad = seckill("activity", "create", "--id", "clibad", "--name", "Bad", "--total", "3",
                  "--duration", "3600", "--payment-window", "86401", env=env)
    assert bad.returncode != 0 and "payment_window" in bad.stderr


def test_reconcile_rebuilds_a_lost_activity_and_repairs_a_drift(
    client, make_activity, env, settings, rds, prefix
):
    activity = make_activity(total=5)
    aid = activity["id"]
    for uid in ("alice", "bob"):
        assert buy(client, aid, uid).status_code == 200
    with built_worker(settings, block_ms=50) as worker:
        for _ in range(20):
            worker.step()
            if client.get(f"/admin/activities/{aid}/stats", headers=ADMIN).get_json()["orders"][
                "confirmed"
            ] == 2:
                break
        worker._housekept_at = 0  # trim now: no backlog left in the stream
        worker.step()

    rds.delete(f"{prefix}:{{{aid}}}:meta", f"{prefix}:{{{aid}}}:buyers")
    rebuilt = seckill("reconcile", aid, "--repair", env=env)  # without it: read-only
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["action"] == "rebuilt"
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == "3"
    assert rds.hlen(f"{prefix}:{{{aid}}}:buyers") == 2

    rds.hset(f"{prefix}:{{{aid}}}:meta", "remaining", 4)  # drift: one unit too many
    report = seckill("reconcile", aid, env=env)
    body = json.loads(report.stdout)
    assert body["action"] == "none"
    assert body["differences"] == {"remaining": {"redis": 4, "database": 3}}
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == "4"

    repaired = seckill("reconcile", aid, "--repair", env=env)
    assert json.loads(repaired.stdout)["action"] == "rebuilt", repaired.stdout
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == "3"
    assert buy(client, aid, "alice").status_code == 409  # still a buyer after the rebuild
