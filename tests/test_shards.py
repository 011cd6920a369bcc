"""Sharded stock through the gateway (in-process), on one server and on the cluster: the whole
is what every view reports, one purchase per user across the parts, no "sold out" while a
part still holds a unit, cancel, restock, validation, and a part rebuilt after Redis lost it."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags
from seckill.store.plumbing.scripts import Scripts
from tests.support.api import activity_stats, buy, expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.shards import users_homed
from tests.support.tokens import ADMIN

pytestmark = BOTH_BACKENDS


def view(client: FlaskClient, aid: str) -> dict[str, Any]:
    return expect(client.get(f"/seckill/activities/{aid}"), 200)


def part_numbers(rds: redis.Redis, prefix: str, aid: str, shards: int) -> list[dict[str, int]]:
    keys = KeySpace(prefix)
    out = []
    for tag in part_tags(aid, shards):
        raw = rds.hgetall(keys.meta(tag))
        out.append({f: int(raw.get(f, 0)) for f in
                    ("total", "remaining", "held", "sold", "lent", "borrowed")})
    return out


def test_a_sharded_activity_reports_the_whole_and_sells_every_unit(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str
) -> None:
    created = make_activity(total=10, shards=4)
    aid = created["id"]
    assert (created["total"], created["remaining"], created["shards"]) == (10, 10, 4)
    assert [p["total"] for p in part_numbers(rds, prefix, aid, 4)] == [3, 3, 2, 2]
    # Everyone homed on part 1: its 3 units go first, then they borrow the other parts' 7.
    buyers = users_homed(4, 1, 11)
    outcomes = [buy(client, aid, uid) for uid in buyers[:5]]
    # A repeat is the same order, from the home part (here after a borrow).
    again = buy(client, aid, buyers[4])
    assert expect(again, 409, "already_purchased")["order_id"] == outcomes[4].get_json()["order_id"]
    outcomes += [buy(client, aid, uid) for uid in buyers[5:]]
    assert [r.status_code for r in outcomes] == [200] * 10 + [410]
    assert outcomes[-1].get_json()["error"] == "sold_out"
    order_ids = {r.get_json()["order_id"] for r in outcomes[:10]}
    assert len(order_ids) == 10
    parts = part_numbers(rds, prefix, aid, 4)
    for part in parts:
        assert part["total"] == part["remaining"] + part["held"] + part["sold"]
    assert sum(p["sold"] for p in parts) == 10
    assert parts[1]["sold"] == 10 and parts[1]["borrowed"] == 7
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (10, 0, 10, 10)
    assert view(client, aid)["state"] == "sold_out"
    assert order_status(client, aid, buyers[3])["order_id"] == outcomes[3].get_json()["order_id"]


def test_no_sold_out_while_one_part_still_holds_a_unit(
    client: FlaskClient, make_activity: Any
) -> None:
    aid = make_activity(total=8, shards=8)["id"]
    # Seven parts emptied by their own buyers; the last unit sits on part 5.
    for part in (0, 1, 2, 3, 4, 6, 7):
        expect(buy(client, aid, users_homed(8, part, 1, f"p{part}-")[0]), 200)
    assert view(client, aid)["remaining"] == 1
    late = users_homed(8, 0, 1, "late")[0]  # home part 0 is empty: borrows part 5's unit
    expect(buy(client, aid, late), 200)
    expect(buy(client, aid, users_homed(8, 2, 1, "last")[0]), 410, "sold_out")


def test_one_purchase_per_user_even_when_more_units_exist_elsewhere(
    client: FlaskClient, make_activity: Any
) -> None:
    aid = make_activity(total=6, shards=3, per_user_limit=3)["id"]
    uid = users_homed(3, 2, 1)[0]
    first = expect(buy(client, aid, uid, {"quantity": 3}), 200)
    expect(buy(client, aid, uid, {"quantity": 1}), 409, "already_purchased")
    other = users_homed(3, 2, 1, "o")[0]  # home part 2 has 0 left: 3 borrowed
    expect(buy(client, aid, other, {"quantity": 3}), 200)
    assert view(client, aid)["remaining"] == 0
    assert first["quantity"] == 3


def test_insufficient_stock_counts_every_part(client: FlaskClient, make_activity: Any) -> None:
    aid = make_activity(total=4, shards=4, per_user_limit=4)["id"]
    body = expect(buy(client, aid, "greedy", {"quantity": 4}), 200)
    assert body["quantity"] == 4
    aid = make_activity(total=3, shards=4, per_user_limit=4)["id"]
    refused = expect(buy(client, aid, "greedy", {"quantity": 4}), 409, "insufficient_stock")
    assert refused["remaining"] == 3
    assert view(client, aid)["remaining"] == 3  # nothing stranded by the attempt
    expect(buy(client, aid, "modest", {"quantity": 3}), 200)


def test_cancel_returns_the_unit_to_the_home_part_and_restock_spreads(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str
) -> None:
    aid = make_activity(total=4, shards=4)["id"]
    buyers = users_homed(4, 3, 4)
    orders = [expect(buy(client, aid, uid), 200)["order_id"] for uid in buyers]
    expect(buy(client, aid, "someone"), 410, "sold_out")
    expect(client.post(f"/admin/orders/{orders[2]}/cancel", headers=ADMIN), 200)
    parts = part_numbers(rds, prefix, aid, 4)
    assert parts[3]["remaining"] == 1 and sum(p["remaining"] for p in parts) == 1
    assert order_status(client, aid, buyers[2])["status"] == "cancelled"
    expect(buy(client, aid, "someone"), 200)
    grown = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 6},
                               headers=ADMIN), 200)
    assert (grown["total"], grown["remaining"]) == (10, 6)
    shrunk = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": -5},
                                headers=ADMIN), 200)
    assert (shrunk["total"], shrunk["remaining"]) == (5, 1)
    refused = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": -2},
                                 headers=ADMIN), 409, "insufficient_stock")
    assert refused["remaining"] == 1
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["remaining"], stats["sold"]) == (5, 1, 4)


def test_claims_on_different_parts_never_share_an_id(
    make_activity: Any, rds: redis.Redis, prefix: str
) -> None:
    """A donor keys what it lent by claim id: two parts' claims with one id (same millisecond,
    same count) once had both take the one unit lent to the first; a race over real HTTP sold
    201 of 200 units. Part j's claims are numbered j+n, j+2n, ..."""
    shards = 4
    aid = make_activity(total=0, shards=shards)["id"]
    keys, scripts = KeySpace(prefix), Scripts(rds)
    ids = []
    for part, tag in enumerate(part_tags(aid, shards)):
        for uid in users_homed(shards, part, 2, f"c{part}-"):
            reply = scripts.purchase(keys=keys.part_keys(tag), args=[uid, 1, aid, 0])
            assert reply[0] == "borrow", reply
            number = int(str(reply[1]).split(":")[1])
            assert number % shards == part, reply
            ids.append(number)
    assert len(set(ids)) == len(ids) == 2 * shards


@pytest.mark.parametrize("shards", [0, 65, "2", True, None])
def test_shards_are_validated(client: FlaskClient, shards: Any) -> None:
    body = {"id": "badshards", "name": "x", "total": 5, "shards": shards,
            "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}
    refused = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                     "bad_request")
    assert refused["field"] == "shards"


def test_packets_cannot_be_sharded(client: FlaskClient) -> None:
    body = {"id": "pshards", "name": "x", "kind": "packets", "amount": 100, "count": 10,
            "shards": 2, "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}
    expect(client.post("/admin/activities", json=body, headers=ADMIN), 400, "bad_request")


def test_unlimited_sharded_stock_sells_once_per_user(
    client: FlaskClient, make_activity: Any
) -> None:
    aid = make_activity(total=None, shards=5)["id"]
    for uid in (f"x{i}" for i in range(12)):
        expect(buy(client, aid, uid), 200)
    expect(buy(client, aid, "x3"), 409, "already_purchased")
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (
        None, None, 12, 12)


def test_a_lost_part_is_rebuilt_from_the_database_and_the_other_parts(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str, app: Any
) -> None:
    aid = make_activity(total=12, shards=3)["id"]
    buyers = [f"b{i}" for i in range(7)]
    for uid in buyers:
        expect(buy(client, aid, uid), 200)
    worker = app.extensions["seckill"]
    from seckill.worker.orders import OrdersWorker
    OrdersWorker(worker.client, worker.keys, worker.book).step()  # the orders into the database
    keys = KeySpace(prefix)
    lost = part_tags(aid, 3)[1]
    for key in (keys.meta(lost), keys.buyers(lost), keys.claims(lost), keys.orders(lost)):
        rds.delete(key)
    homed = [uid for uid in buyers if home_part(uid, 3) == 1]
    for uid in homed:  # their orders come back from the database
        expect(buy(client, aid, uid), 409, "already_purchased")
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["sold"], stats["remaining"]) == (12, 7, 5)
    newcomers = [f"n{i}" for i in range(6)]
    codes = [buy(client, aid, uid).status_code for uid in newcomers]
    assert codes == [200] * 5 + [410]
