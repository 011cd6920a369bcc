"""Red-envelope packets (issue 6): creation (split, pushed, meta last), the grab over HTTP, the
orders worker storing amounts, cancellation giving the packet back, no restock, the rebuild
from the database, and the packet multiset under concurrency.

Real Valkey (the session's, a key prefix per test), the test's own SQLite file or PostgreSQL
schema, the real orders worker driven in-process. No mocks.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
import redis
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.domain import errors
from seckill.domain.entries import Poison, parse_entry
from seckill.domain.orders import OrderRow
from seckill.domain.packets import split
from seckill.sql import engine as db
from seckill.sql.book import OrderBook
from seckill.sql.schema import activities
from seckill.store.audit.reconcile import reconcile
from seckill.store.plumbing.connection import close_client
from seckill.store.sale.meta import meta_fields
from seckill.store.sale.stock import Purchases
from tests.backends import redis_backend  # noqa: F401  (each test on both)
from tests.conftest import (
    ADMIN,
    activity_stats,
    buy,
    connect,
    expect,
    iso,
    keep_buying,
    keys_of,
    user_headers,
)
from tests.faults import built_worker, drain, stored_orders


def _key(prefix: str, aid: str, name: str) -> str:
    return f"{prefix}:{{{aid}}}:{name}"


def _create(client: FlaskClient, amount: int, count: int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"p{uuid.uuid4().hex[:10]}", "name": "Lucky money", "kind": "packets",
        "amount": amount, "count": count, "starts_at": iso(-60), "ends_at": iso(3600),
    }
    body.update(fields)
    return expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)


def _seed(database_url: str, aid: str) -> int:
    engine = db.make_engine(database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.select(activities.c.amount, activities.c.packet_count, activities.c.seed)
                .where(activities.c.id == aid)
            ).one()
    finally:
        engine.dispose()
    return int(row.seed)


def _split_of(database_url: str, aid: str, amount: int, count: int) -> list[int]:
    return split(amount, count, _seed(database_url, aid))


def _held(rds: redis.Redis, prefix: str, aid: str) -> tuple[list[int], dict[str, int]]:
    """Atomically: the packets in the list, and user -> amount of each live grab."""
    pipe = rds.pipeline(transaction=True)
    pipe.lrange(_key(prefix, aid, "packets"), 0, -1)
    pipe.hgetall(_key(prefix, aid, "amounts"))
    listed, amounts = pipe.execute()
    return [int(p) for p in listed], {u: int(a) for u, a in amounts.items()}


def _multiset_is_the_split(rds: redis.Redis, prefix: str, aid: str, packets: list[int]) -> None:
    """Every packet is in the list or held by a live grab, exactly once."""
    listed, amounts = _held(rds, prefix, aid)
    assert sorted(listed + list(amounts.values())) == sorted(packets)


# --- creation ----------------------------------------------------------------------------


def test_create_pushes_the_seeded_split_and_answers_the_activity(
    client: FlaskClient, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    created = _create(client, amount=100_000, count=2_500)
    aid = created["id"]
    assert created["kind"] == "packets"
    assert (created["amount"], created["count"], created["total"], created["remaining"]) == (
        100_000, 2_500, 2_500, 2_500)
    assert created["per_user_limit"] == 1 and created["state"] == "open"
    assert "seed" not in created, "the seed tells every packet: never in a response"

    listed = [int(p) for p in rds.lrange(_key(prefix, aid, "packets"), 0, -1)]
    assert listed == _split_of(database_url, aid, 100_000, 2_500), "the split, in its order"
    assert sum(listed) == 100_000 and min(listed) >= 1
    meta = rds.hgetall(_key(prefix, aid, "meta"))
    assert (meta["kind"], meta["amount"], meta["amount_given"], meta["remaining"]) == (
        "packets", "100000", "0", "2500")
    assert not [k for k in keys_of(rds, prefix) if "staging" in k], "staging list renamed"
    assert rds.ttl(_key(prefix, aid, "packets")) == -1, "the list does not expire"

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
    assert int(rds.llen(_key(prefix, aid, "packets"))) == 2_500


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
    aid = _create(client, amount=1_000, count=3)["id"]
    packets = _split_of(database_url, aid, 1_000, 3)
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
    assert int(rds.llen(_key(prefix, aid, "packets"))) == 0


def test_restock_is_refused_for_packets(client: FlaskClient, rds: redis.Redis,
                                        prefix: str) -> None:
    aid = _create(client, amount=500, count=5)["id"]
    for add in (3, -1):
        answer = expect(client.post(f"/admin/activities/{aid}/stock", json={"add": add},
                                    headers=ADMIN), 400, "bad_request")
        assert "packets" in answer["message"]
    assert rds.hmget(_key(prefix, aid, "meta"), "total", "remaining") == ["5", "5"]
    assert int(rds.llen(_key(prefix, aid, "packets"))) == 5


def test_http_crowd_grabs_every_packet_once_and_the_worker_stores_the_amounts(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    """200 users from 20 threads through the Flask app for 50 packets of 12 345 cents."""
    amount, count, users = 12_345, 50, 200
    aid = _create(app.test_client(), amount=amount, count=count)["id"]
    packets = _split_of(database_url, aid, amount, count)
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
    _multiset_is_the_split(rds, prefix, aid, packets)

    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == count
    rows = stored_orders(database_url, aid)
    assert {o.user_id: (o.order_id, o.amount) for o in rows} == {
        uid: (b["order_id"], b["amount"]) for uid, b in won.items()}
    assert sum(o.amount or 0 for o in rows) == amount
    assert rds.xlen(_key(prefix, aid, "dead")) == 0
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
    aid = _create(client, amount=900, count=3)["id"]
    packets = _split_of(database_url, aid, 900, 3)
    first = expect(buy(client, aid, "alice"), 200)
    expect(buy(client, aid, "bob"), 200)
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 2
        cancelled = client.post(f"/admin/orders/{first['order_id']}/cancel", headers=ADMIN)
        expect(cancelled, 200)
        _multiset_is_the_split(rds, prefix, aid, packets)
        listed, amounts = _held(rds, prefix, aid)
        assert listed == [packets[2], first["amount"]], "back at the end of the list"
        assert "alice" not in amounts
        stats = activity_stats(client, aid)
        assert (stats["remaining"], stats["sold"], stats["buyers"]) == (2, 1, 1)
        assert (stats["amount_given"], stats["amount_left"]) == (
            packets[1], 900 - packets[1])

        twice = client.post(f"/admin/orders/{first['order_id']}/cancel", headers=ADMIN)
        expect(twice, 409, "already_cancelled")
        _multiset_is_the_split(rds, prefix, aid, packets)
        assert int(rds.llen(_key(prefix, aid, "packets"))) == 2, "never returned twice"

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
    aid = _create(client, amount=50, count=2)["id"]
    got = expect(buy(client, aid, "alice"), 200)
    rds.hdel(_key(prefix, aid, "amounts"), "alice")  # damage
    response = client.post(f"/admin/orders/{got['order_id']}/cancel", headers=ADMIN)
    assert response.status_code == 500
    assert int(rds.llen(_key(prefix, aid, "packets"))) == 1, "no packet invented"
    assert rds.hget(_key(prefix, aid, "buyers"), "alice") == got["order_id"]


def test_grabs_racing_cancels_never_lose_or_duplicate_a_packet(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    """30 packets; 30 holders, 15 of them cancelled (each from two threads) while 40
    newcomers grab. A sampler reads the list and the amounts hash atomically throughout:
    at every instant they hold exactly the split, and amount_given is what the hash holds."""
    amount, count = 3_000, 30
    aid = _create(app.test_client(), amount=amount, count=count)["id"]
    packets = _split_of(database_url, aid, amount, count)
    client = app.test_client()
    holders = {f"h{i:02d}": expect(buy(client, aid, f"h{i:02d}"), 200)["order_id"]
               for i in range(count)}
    meta = _key(prefix, aid, "meta")
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
                pipe.lrange(_key(prefix, aid, "packets"), 0, -1)
                pipe.hgetall(_key(prefix, aid, "amounts"))
                pipe.hmget(meta, "remaining", "amount_given")
                pipe.hlen(_key(prefix, aid, "buyers"))
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
    _multiset_is_the_split(rds, prefix, aid, packets)

    with built_worker(settings, block_ms=100) as worker:
        drain(worker)
    live = [o for o in stored_orders(database_url, aid) if o.status == "confirmed"]
    listed, amounts = _held(rds, prefix, aid)
    assert sorted([o.amount or 0 for o in live] + listed) == sorted(packets)
    assert {o.user_id: o.amount for o in live} == amounts


# --- rebuild from the database ---------------------------------------------------------------


def test_rebuild_after_the_keys_are_lost_restores_the_unclaimed_packets(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    amount, count = 50_000, 300
    client = app.test_client()
    aid = _create(client, amount=amount, count=count)["id"]
    packets = _split_of(database_url, aid, amount, count)
    grabs = {f"u{i:02d}": expect(buy(client, aid, f"u{i:02d}"), 200) for i in range(40)}
    for uid in ("u00", "u07", "u13", "u21", "u39"):
        expect(client.post(f"/admin/orders/{grabs[uid]['order_id']}/cancel", headers=ADMIN),
               200)
    live = {u: g for u, g in grabs.items() if u not in {"u00", "u07", "u13", "u21", "u39"}}
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 45
    before = sorted(_held(rds, prefix, aid)[0])

    names = ("meta", "packets", "amounts", "buyers", "cancelled", "orders")
    assert rds.delete(*(_key(prefix, aid, n) for n in names)) == len(names)
    app.extensions["seckill"].cache.forget()

    # The first request that needs the activity rebuilds it from the database.
    repeat = expect(buy(client, aid, "u05"), 409, "already_purchased")
    assert (repeat["order_id"], repeat["amount"]) == (live["u05"]["order_id"],
                                                      live["u05"]["amount"])
    listed, amounts = _held(rds, prefix, aid)
    assert sorted(listed) == before, "the unclaimed multiset: split minus live grabs"
    assert amounts == {u: g["amount"] for u, g in live.items()}
    _multiset_is_the_split(rds, prefix, aid, packets)
    stats = activity_stats(client, aid)
    given = sum(g["amount"] for g in live.values())
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (
        count, count - len(live), len(live), len(live))
    assert (stats["amount_given"], stats["amount_left"]) == (given, amount - given)
    assert expect(client.get(f"/seckill/{aid}/order", headers=user_headers("u00")), 200) == {
        "status": "cancelled", "order_id": grabs["u00"]["order_id"]}
    services = app.extensions["seckill"]
    assert reconcile(services.restorer, aid)["differences"] == {}

    # The rest of the packets still go, each once, and the sum comes out exact.
    more = [expect(buy(client, aid, f"late{i:03d}"), 200)["amount"]
            for i in range(count - len(live))]
    expect(buy(client, aid, "one-too-many"), 410, "sold_out")
    assert sorted(more + [g["amount"] for g in live.values()]) == sorted(packets)
    assert sum(more) + given == amount


def test_reconcile_sees_a_packet_list_that_differs(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str,
) -> None:
    client = app.test_client()
    aid = _create(client, amount=100, count=4)["id"]
    expect(buy(client, aid, "alice"), 200)
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 1
    assert reconcile(app.extensions["seckill"].restorer, aid)["differences"] == {}
    rds.rpush(_key(prefix, aid, "packets"), 77)  # damage: a packet that was never split
    report = reconcile(app.extensions["seckill"].restorer, aid)
    assert report["differences"] == {"packets": {"redis": 4, "database": 3}}


# --- the scripts and the worker's parsing ---------------------------------------------------


def test_each_script_refuses_the_other_kind_and_the_service_reroutes(
    app: Flask, client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
) -> None:
    services = app.extensions["seckill"]
    scripts, keys = services.scripts, services.keys
    packets_aid = _create(client, amount=100, count=2)["id"]
    stock_aid = make_activity(total=2)["id"]
    assert scripts.purchase(keys=keys.activity_keys(packets_aid), args=["x", 1, packets_aid]) \
        == ["wrong_kind", "packets"]
    assert scripts.grab(keys=keys.grab_keys(stock_aid), args=["x", 1, stock_aid]) == [
        "wrong_kind", "stock"]
    assert int(rds.llen(_key(prefix, packets_aid, "packets"))) == 2
    purchases: Purchases = services.purchases
    grabbed = purchases.purchase(packets_aid, "y", 1, kind="stock")  # a stale idea of the kind
    assert grabbed.amount is not None and grabbed.amount >= 1
    bought = purchases.purchase(stock_aid, "y", 1, kind="packets")
    assert bought.amount is None and bought.remaining == 1


def _entry(**fields: str) -> dict[str, str]:
    base = {"type": "purchase", "order_id": "pk-0000000000001-000001", "activity": "pk",
            "user": "alice", "quantity": "1", "ts": "1"}
    return {**base, **fields}


def test_parse_entry_amounts() -> None:
    row = parse_entry("pk", _entry(kind="packets", amount="123"))
    assert not isinstance(row, type(None)) and getattr(row, "amount", None) == 123
    assert getattr(parse_entry("pk", _entry()), "amount", "x") is None, "optional for stock"
    assert getattr(parse_entry("pk", _entry(amount="5")), "amount", None) == 5
    for bad in (_entry(kind="packets"), _entry(kind="packets", amount="0"),
                _entry(kind="packets", amount="-3"), _entry(kind="packets", amount="1.5"),
                _entry(kind="packets", amount=str(10**13)),
                _entry(kind="packets", amount="10", quantity="2"),
                _entry(amount="abc"), _entry(kind="lottery", amount="1")):
        with pytest.raises(Poison):
            parse_entry("pk", bad)


# --- creation's edges: racing publishers, an incomplete push, an older database -------------


def test_a_second_publisher_never_adds_packets(
    app: Flask, client: FlaskClient, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    """A rebuild racing the creation (a request for the activity arrived during the push)
    publishes the same split; whichever comes second changes nothing and leaves nothing."""
    services = app.extensions["seckill"]
    aid = _create(client, amount=1_000, count=20)["id"]
    activity = services.book.load_activity(aid)
    assert activity is not None and activity.seed is not None
    packets = split(1_000, 20, activity.seed)
    fields = meta_fields(activity, 0)
    assert services.activities.publish_packets(activity, packets, fields) is False
    assert services.activities.create(activity) is False
    assert int(rds.llen(_key(prefix, aid, "packets"))) == 20
    assert not [k for k in keys_of(rds, prefix) if "staging" in k]

    # An incomplete staging list (a push cut short) is never published.
    rds.delete(_key(prefix, aid, "meta"))
    with pytest.raises(errors.SeckillError, match="incomplete"):
        services.activities.publish_packets(activity, packets[:-1], fields)
    assert rds.exists(_key(prefix, aid, "meta")) == 0
    assert not [k for k in keys_of(rds, prefix) if "staging" in k]
    assert services.activities.publish_packets(activity, packets, fields) is True
    assert [int(p) for p in rds.lrange(_key(prefix, aid, "packets"), 0, -1)] == packets


def test_an_older_database_gets_the_new_columns(database_url: str) -> None:
    """A database created before packets existed: the nullable columns are added at start-up
    and its rows keep working."""
    engine = db.make_engine(database_url)
    old = sa.MetaData()
    sa.Table("seckill_activities", old,
             sa.Column("id", sa.String(64), primary_key=True),
             sa.Column("name", sa.String(200), nullable=False),
             sa.Column("kind", sa.String(16), nullable=False, server_default="stock"),
             sa.Column("starts_ms", sa.BigInteger, nullable=False),
             sa.Column("ends_ms", sa.BigInteger, nullable=False),
             sa.Column("total", sa.BigInteger, nullable=True),
             sa.Column("per_user_limit", sa.Integer, nullable=False, server_default="1"),
             sa.Column("created_ms", sa.BigInteger, nullable=False))
    sa.Table("seckill_orders", old,
             sa.Column("order_id", sa.String(100), primary_key=True),
             sa.Column("activity_id", sa.String(64), nullable=False),
             sa.Column("user_id", sa.String(64), nullable=False),
             sa.Column("quantity", sa.Integer, nullable=False),
             sa.Column("status", sa.String(16), nullable=False),
             sa.Column("created_ms", sa.BigInteger, nullable=False),
             sa.Column("stored_ms", sa.BigInteger, nullable=False),
             sa.Column("cancelled_ms", sa.BigInteger, nullable=True))
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO seckill_activities (id, name, kind, starts_ms, ends_ms, total, "
            "per_user_limit, created_ms) VALUES ('old', 'Old', 'stock', 1, 2, 5, 1, 1)"))
    book = OrderBook(engine).ready()
    columns = {t: {c["name"] for c in sa.inspect(engine).get_columns(t)}
               for t in ("seckill_activities", "seckill_orders")}
    assert {"amount", "packet_count", "seed"} <= columns["seckill_activities"]
    assert "amount" in columns["seckill_orders"]
    loaded = book.load_activity("old")
    assert loaded is not None and (loaded.total, loaded.amount, loaded.seed) == (5, None, None)
    assert book.store_batch([OrderRow("old-0000000000001-000001", "old", "alice", 1, 1, 42)]) \
        == set()
    assert [(o.user_id, o.amount) for o in book.orders_of("old")] == [("alice", 42)]
    OrderBook(engine).ready()  # a second start finds nothing to add
    engine.dispose()
