"""POST /admin/activities/<aid>/stock: total and remaining move together, atomically (on one
server and on a cluster)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from seckill.domain.activities import MAX_TOTAL
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.tokens import ADMIN

pytestmark = [BOTH_BACKENDS, pytest.mark.database]


def restock(client, aid, body):
    return client.post(f"/admin/activities/{aid}/stock", json=body, headers=ADMIN)


def test_restock_sells_the_new_units_and_removal_takes_only_unsold(client, make_activity, rds,
                                                                   prefix):
    aid = make_activity(total=1)["id"]
    assert buy(client, aid, "alice").status_code == 200
    assert buy(client, aid, "bob").status_code == 410  # sold out, and flagged in-process

    body = expect(restock(client, aid, {"add": 2}), 200)
    assert (body["total"], body["remaining"], body["state"]) == (3, 2, "open")
    assert buy(client, aid, "bob").status_code == 200  # the flag was dropped
    assert rds.hmget(f"{prefix}:{{{aid}}}:meta", "total", "remaining") == ["3", "1"]

    refused = expect(restock(client, aid, {"add": -2}), 409, "insufficient_stock")
    assert refused["remaining"] == 1
    assert rds.hmget(f"{prefix}:{{{aid}}}:meta", "total", "remaining") == ["3", "1"]
    body = expect(restock(client, aid, {"add": -1}), 200)
    assert (body["total"], body["remaining"], body["state"]) == (2, 0, "sold_out")
    stats = client.get(f"/admin/activities/{aid}/stats", headers=ADMIN).get_json()
    assert (stats["total"], stats["remaining"], stats["sold"]) == (2, 0, 2)


def test_restock_validation(client, make_activity):
    aid = make_activity(total=1)["id"]
    for bad in ({}, {"add": "1"}, {"add": 1.5}, {"add": True}, {"add": 1, "x": 1}, [1],
                {"add": 10**12}):
        expect(restock(client, aid, bad), 400, "bad_request")
    expect(client.post(f"/admin/activities/{aid}/stock", data="{", headers=ADMIN), 400,
           "bad_request")
    expect(restock(client, "nope", {"add": 1}), 404, "unknown_activity")
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 1}), 401,
           "unauthenticated")
    unlimited = make_activity(total=None)["id"]
    expect(restock(client, unlimited, {"add": 1}), 400, "bad_request")


def test_restock_racing_purchases_never_oversells(client, make_activity, rds, prefix):
    aid = make_activity(total=20)["id"]
    results: list[int] = []
    lock = threading.Lock()

    def buyer(n: int) -> None:
        status = buy(client, aid, f"u{n}").status_code
        with lock:
            results.append(status)

    def operator() -> None:
        for _ in range(10):
            restock(client, aid, {"add": 3})
            restock(client, aid, {"add": -2})  # may be refused when all is sold: fine

    threads = [threading.Thread(target=buyer, args=(n,)) for n in range(120)]
    threads.append(threading.Thread(target=operator))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    total, remaining, sold = (int(v) for v in rds.hmget(f"{prefix}:{{{aid}}}:meta", "total",
                                                         "remaining", "sold"))
    assert remaining >= 0
    assert sold == results.count(200) == rds.hlen(f"{prefix}:{{{aid}}}:buyers")
    assert remaining + sold == total


def test_restock_never_takes_total_past_what_an_activity_may_be_created_with(
        client, make_activity, rds, prefix):
    """Repeated restocks once pushed a total past 3.2 billion; the bound is MAX_TOTAL."""
    aid = make_activity(total=1)["id"]
    meta = f"{prefix}:{{{aid}}}:meta"
    body = expect(restock(client, aid, {"add": MAX_TOTAL - 1}), 200)
    assert (body["total"], body["remaining"]) == (MAX_TOTAL, MAX_TOTAL)  # the maximum itself
    for add in (1, MAX_TOTAL, MAX_TOTAL, MAX_TOTAL):
        refused = expect(restock(client, aid, {"add": add}), 400, "bad_request")
        assert refused["field"] == "add"
        assert str(MAX_TOTAL) in refused["message"]
        assert refused["total"] == MAX_TOTAL
    assert rds.hmget(meta, "total", "remaining") == [str(MAX_TOTAL), str(MAX_TOTAL)]
    view = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert view["total"] == MAX_TOTAL
    # Removing units is still allowed at the bound, and adding them back.
    assert expect(restock(client, aid, {"add": -10}), 200)["total"] == MAX_TOTAL - 10
    assert expect(restock(client, aid, {"add": 10}), 200)["total"] == MAX_TOTAL


def test_restock_bound_holds_under_concurrent_restocks(client, make_activity, rds, prefix):
    """The bound is checked in the restock script, so racing operators cannot pass it."""
    aid = make_activity(total=0)["id"]
    step = MAX_TOTAL // 5
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: restock(client, aid, {"add": step}).status_code,
                                 range(8)))
    assert sorted(statuses) == [200] * 5 + [400] * 3
    assert rds.hmget(f"{prefix}:{{{aid}}}:meta", "total", "remaining") == [str(MAX_TOTAL)] * 2
