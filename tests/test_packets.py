"""Red-envelope packets: creation (split, pushed, meta last), the grab over HTTP, the
orders worker storing amounts, cancellation giving the packet back, no restock, the rebuild
from the database, and the packet multiset under concurrency.

Real Valkey (the session's, a key prefix per test), the test's own SQLite file or PostgreSQL
schema, the real orders worker driven in-process. No mocks.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.store.plumbing.connection import close_client
from tests.support.api import activity_stats, buy, expect, keep_buying
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.orders import built_worker, drain, stored_orders
from tests.support.packets import create, held, key, multiset_is_the_split, split_of
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import connect, keys_of

pytestmark = pytest.mark.database

# --- creation ----------------------------------------------------------------------------


def test_create_pushes_the_seeded_split_and_answers_the_activity(
    client: FlaskClient, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    created = create(client, amount=100_000, count=2_500)
    aid = created["id"]
    assert created["kind"] == "packets"
    assert (created["amount"], created["count"], created["total"], created["remaining"]) == (
        100_000, 2_500, 2_500, 2_500)
    assert created["per_user_limit"] == 1 and created["state"] == "open"
    assert "seed" not in created, "the seed tells every packet: never in a response"

    listed = [int(p) for p in rds.lrange(key(prefix, aid, "packets"), 0, -1)]
    assert listed == split_of(database_url, aid, 100_000, 2_500), "the split, in its order"
    assert sum(listed) == 100_000 and min(listed) >= 1
    meta = rds.hgetall(key(prefix, aid, "meta"))
    assert (meta["kind"], meta["amount"], meta["amount_given"], meta["remaining"]) == (
        "packets", "100000", "0", "2500")
    assert not [k for k in keys_of(rds, prefix) if "staging" in k], "staging list renamed"
    assert rds.ttl(key(prefix, aid, "packets")) == -1, "the list does not expire"

    shown = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert {k: shown[k] for k in ("kind", "amount", "count", "remaining")} == {
        "kind": "packets", "amount": 100_000, "count": 2_500, "remaining": 2_500}
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["remaining"], stats["sold"]) == (2_500, 2_500, 0)
    assert (stats["amount_given"], stats["amount_left"]) == (0, 100_000)
    again = client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "x", "kind": "packets", "amount": 10, "count": 1,
        "starts_at": iso(-60), "ends_at": iso(60)})
    expect(again, 409, "activity_exists")
    assert int(rds.llen(key(prefix, aid, "packets"))) == 2_500


BAD_PACKETS = [
    ("total given", {"total": 5}, "total", "does not apply to kind 'packets'"),
    ("per_user_limit given", {"per_user_limit": 2}, "per_user_limit", "does not apply"),
    ("amount below count", {"amount": 4, "count": 5}, "amount", "at least count"),
    ("amount missing", {"amount": None}, "amount", "amount is required"),
    ("count missing", {"count": None}, "count", "count is required"),
    ("count zero", {"count": 0}, "count", "between"),
    ("count huge", {"count": 10**7, "amount": 10**9}, "count", "between"),
    ("amount zero", {"amount": 0}, "amount", "between"),
    ("amount float", {"amount": 100.5}, "amount", "integer"),
    ("amount string", {"amount": "100"}, "amount", "integer"),
    ("amount bool", {"amount": True, "count": 1}, "amount", "integer"),
    ("amount huge", {"amount": 10**13}, "amount", "between"),
    ("count list", {"count": [3]}, "count", "integer"),
    ("unknown field", {"colour": "red"}, None, "unknown fields"),
]


@pytest.mark.parametrize(("case", "change", "field", "message"), BAD_PACKETS,
                         ids=[c for c, _, _, _ in BAD_PACKETS])
def test_create_validation(client: FlaskClient, rds: redis.Redis, prefix: str, case: str,
                           change: dict[str, Any], field: str | None, message: str) -> None:
    body: dict[str, Any] = {
        "id": "bad", "name": "x", "kind": "packets", "amount": 100, "count": 10,
        "starts_at": iso(-60), "ends_at": iso(60),
    }
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    answer = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                    "bad_request")
    assert answer.get("field") == field, answer
    assert message in answer["message"], answer
    assert keys_of(rds, prefix) == set(), case


def test_stock_refuses_packet_fields(client: FlaskClient) -> None:
    body = {"id": "s", "name": "x", "total": 3, "amount": 100, "starts_at": iso(-60),
            "ends_at": iso(60)}
    answer = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                    "bad_request")
    assert answer["field"] == "amount" and "packets" in answer["message"]


# --- the grab over HTTP ------------------------------------------------------------------


def test_grab_answers_the_amount_once_per_user(
    client: FlaskClient, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    aid = create(client, amount=1_000, count=3)["id"]
    packets = split_of(database_url, aid, 1_000, 3)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    expect(client.post(url, headers=headers, json={"quantity": 2}), 400, "bad_request")
    got = expect(client.post(url, headers=headers), 200)
    assert set(got) == {"status", "order_id", "quantity", "amount"}
    assert (got["status"], got["quantity"], got["amount"]) == ("ok", 1, packets[0])

    repeat = expect(client.post(url, headers=headers), 409, "already_purchased")
    assert (repeat["order_id"], repeat["amount"]) == (got["order_id"], got["amount"])
    status = expect(client.get(f"/seckill/{aid}/order", headers=headers), 200)
    assert status == {"status": "pending", "order_id": got["order_id"], "amount": got["amount"]}

    amounts = [got["amount"]]
    for uid in ("bob", "carol"):
        amounts.append(expect(buy(client, aid, uid), 200)["amount"])
    assert amounts == packets and sum(amounts) == 1_000
    expect(buy(client, aid, "dave"), 410, "sold_out")
    # Sold out and flagged in this process: the winner's repeat is answered without Redis,
    # and still carries the amount.
    late = expect(client.post(url, headers=headers), 409, "already_purchased")
    assert (late["order_id"], late["amount"]) == (got["order_id"], got["amount"])

    stats = activity_stats(client, aid)
    assert (stats["remaining"], stats["sold"], stats["buyers"]) == (0, 3, 3)
    assert (stats["amount_given"], stats["amount_left"]) == (1_000, 0)
    assert int(rds.llen(key(prefix, aid, "packets"))) == 0


def test_restock_is_refused_for_packets(client: FlaskClient, rds: redis.Redis,
                                        prefix: str) -> None:
    aid = create(client, amount=500, count=5)["id"]
    for add in (3, -1):
        answer = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": add},
                                    headers=ADMIN), 400, "bad_request")
        assert "packets" in answer["message"]
    assert rds.hmget(key(prefix, aid, "meta"), "total", "remaining") == ["5", "5"]
    assert int(rds.llen(key(prefix, aid, "packets"))) == 5


def test_http_crowd_grabs_every_packet_once_and_the_worker_stores_the_amounts(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    """200 users from 20 threads through the Flask app for 50 packets of 12 345 cents."""
    amount, count, users = 12_345, 50, 200
    aid = create(app.test_client(), amount=amount, count=count)["id"]
    packets = split_of(database_url, aid, amount, count)
    gate = threading.Event()

    def attempt(uid: str) -> tuple[str, int, dict[str, Any]]:
        gate.wait(10)
        response = buy(app.test_client(), aid, uid)
        return uid, response.status_code, cast(dict[str, Any], response.get_json())

    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(attempt, f"user{i:03d}") for i in range(users)]
        gate.set()
        answers = [f.result(timeout=60) for f in futures]

    won = {uid: body for uid, code, body in answers if code == 200}
    others = collections.Counter((code, body.get("error")) for _, code, body in answers
                                 if code != 200)
    assert len(won) == count, others
    assert set(others) == {(410, "sold_out")}, others
    assert sum(b["amount"] for b in won.values()) == amount
    assert sorted(b["amount"] for b in won.values()) == sorted(packets), "each packet once"
    assert len({b["order_id"] for b in won.values()}) == count
    multiset_is_the_split(rds, prefix, aid, packets)

    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == count
    rows = stored_orders(database_url, aid)
    assert {o.user_id: (o.order_id, o.amount) for o in rows} == {
        uid: (b["order_id"], b["amount"]) for uid, b in won.items()}
    assert sum(o.amount or 0 for o in rows) == amount
    assert rds.xlen(key(prefix, aid, "dead")) == 0
    status = expect(app.test_client().get(f"/seckill/{aid}/order",
                                          headers=user_headers("user000")), 200)
    if "user000" in won:
        assert status == {"status": "confirmed", "order_id": won["user000"]["order_id"],
                          "amount": won["user000"]["amount"]}
    assert activity_stats(app.test_client(), aid)["orders"] == {
        "pending": 0, "confirmed": count, "cancelled": 0}


# --- cancellation --------------------------------------------------------------------------


def test_cancelling_a_grab_puts_its_packet_back(
    client: FlaskClient, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    aid = create(client, amount=900, count=3)["id"]
    packets = split_of(database_url, aid, 900, 3)
    first = expect(buy(client, aid, "alice"), 200)
    expect(buy(client, aid, "bob"), 200)
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 2
        cancelled = client.post(f"/admin/orders/{first['order_id']}/cancel", headers=ADMIN)
        expect(cancelled, 200)
        multiset_is_the_split(rds, prefix, aid, packets)
        listed, amounts = held(rds, prefix, aid)
        assert listed == [packets[2], first["amount"]], "back at the end of the list"
        assert "alice" not in amounts
        stats = activity_stats(client, aid)
        assert (stats["remaining"], stats["sold"], stats["buyers"]) == (2, 1, 1)
        assert (stats["amount_given"], stats["amount_left"]) == (
            packets[1], 900 - packets[1])

        twice = client.post(f"/admin/orders/{first['order_id']}/cancel", headers=ADMIN)
        expect(twice, 409, "already_cancelled")
        multiset_is_the_split(rds, prefix, aid, packets)
        assert int(rds.llen(key(prefix, aid, "packets"))) == 2, "never returned twice"

        carol = expect(buy(client, aid, "carol"), 200)
        alice = expect(buy(client, aid, "alice"), 200)  # the freed slot: a second grab
        assert alice["order_id"] != first["order_id"]
        assert sorted([carol["amount"], alice["amount"]]) == sorted(
            [packets[2], first["amount"]])
        expect(buy(client, aid, "dave"), 410, "sold_out")
        assert drain(worker) == 3  # the cancel event and the two new grabs
    rows = {o.order_id: o for o in stored_orders(database_url, aid)}
    assert rows[first["order_id"]].status == "cancelled"
    assert rows[first["order_id"]].amount == first["amount"]
    live = [o for o in rows.values() if o.status == "confirmed"]
    assert sorted(o.amount or 0 for o in live) == sorted(packets)
    assert activity_stats(client, aid)["amount_given"] == 900


def test_cancel_refuses_a_grab_whose_amount_redis_lost(
    client: FlaskClient, rds: redis.Redis, prefix: str,
) -> None:
    aid = create(client, amount=50, count=2)["id"]
    got = expect(buy(client, aid, "alice"), 200)
    rds.hdel(key(prefix, aid, "amounts"), "alice")  # damage
    response = client.post(f"/admin/orders/{got['order_id']}/cancel", headers=ADMIN)
    assert response.status_code == 500
    assert int(rds.llen(key(prefix, aid, "packets"))) == 1, "no packet invented"
    assert rds.hget(key(prefix, aid, "buyers"), "alice") == got["order_id"]


def test_grabs_racing_cancels_never_lose_or_duplicate_a_packet(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    """30 packets; 30 holders, 15 of them cancelled (each from two threads) while 40
    newcomers grab. A sampler reads the list and the amounts hash atomically throughout:
    at every instant they hold exactly the split, and amount_given is what the hash holds."""
    amount, count = 3_000, 30
    aid = create(app.test_client(), amount=amount, count=count)["id"]
    packets = split_of(database_url, aid, amount, count)
    client = app.test_client()
    holders = {f"h{i:02d}": expect(buy(client, aid, f"h{i:02d}"), 200)["order_id"]
               for i in range(count)}
    meta = key(prefix, aid, "meta")
    bad: list[Any] = []
    samples = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal samples
        sampler = connect(settings.redis_url)
        try:
            deadline = time.monotonic() + 30
            while not done.is_set() and time.monotonic() < deadline:
                pipe = sampler.pipeline(transaction=True)
                pipe.lrange(key(prefix, aid, "packets"), 0, -1)
                pipe.hgetall(key(prefix, aid, "amounts"))
                pipe.hmget(meta, "remaining", "amount_given")
                pipe.hlen(key(prefix, aid, "buyers"))
                listed, amounts, (remaining, given), buyers = pipe.execute()
                held = [int(a) for a in amounts.values()]
                if (sorted([int(p) for p in listed] + held) != sorted(packets)
                        or int(remaining) != len(listed) or int(given) != sum(held)
                        or buyers != len(held)):
                    bad.append((listed, amounts, remaining, given, buyers))
                samples += 1
        finally:
            close_client(sampler)

    gate = threading.Event()
    cancels_done = threading.Event()

    def cancel(order_id: str) -> int:
        gate.wait(10)
        response = app.test_client().post(f"/admin/orders/{order_id}/cancel", headers=ADMIN)
        return response.status_code

    def newcomer(uid: str) -> tuple[str, int, Any]:
        response = keep_buying(app, aid, uid, gate, cancels_done)
        return uid, response.status_code, response.get_json()

    to_cancel = list(holders.values())[:15] * 2
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    with ThreadPoolExecutor(len(to_cancel) + 40) as pool:
        cancels = [pool.submit(cancel, oid) for oid in to_cancel]
        grabs = [pool.submit(newcomer, f"n{i:02d}") for i in range(40)]
        gate.set()
        codes = collections.Counter(f.result(timeout=30) for f in cancels)
        cancels_done.set()
        results = [f.result(timeout=30) for f in grabs]
    done.set()
    watcher.join(10)

    assert codes == {200: 15, 409: 15}
    winners = {uid: body for uid, code, body in results if code == 200}
    assert 0 < len(winners) <= 15
    assert samples > 10, "the sampler must have watched the race"
    assert bad == [], bad[:3]
    multiset_is_the_split(rds, prefix, aid, packets)

    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
    live = [o for o in stored_orders(database_url, aid) if o.status == "confirmed"]
    listed, amounts = held(rds, prefix, aid)
    assert sorted([o.amount or 0 for o in live] + listed) == sorted(packets)
    assert {o.user_id: o.amount for o in live} == amounts
