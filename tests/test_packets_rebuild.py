"""Red-envelope packets, continued from tests/test_packets.py: the rebuild from the
database, reconcile, each script refusing the other kind, the worker's parsing, and
creation's edges (racing publishers, an incomplete push, an older database).

Real Valkey (the session's, a key prefix per test), the test's own SQLite file or PostgreSQL
schema, the real orders worker driven in-process. No mocks.
"""

from __future__ import annotations

from typing import Any

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
from seckill.store.audit.reconcile import reconcile
from seckill.store.sale.activity.meta import meta_fields
from seckill.store.sale.purchase.stock import Purchases
from tests.support.api import activity_stats, buy, expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.orders import built_worker, drain
from tests.support.packets import create, held, key, multiset_is_the_split, split_of
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import keys_of

pytestmark = pytest.mark.database

# --- rebuild from the database ---------------------------------------------------------------


def test_rebuild_after_the_keys_are_lost_restores_the_unclaimed_packets(
    app: Flask, settings: Settings, rds: redis.Redis, prefix: str, database_url: str,
) -> None:
    amount, count = 50_000, 300
    client = app.test_client()
    aid = create(client, amount=amount, count=count)["id"]
    packets = split_of(database_url, aid, amount, count)
    grabs = {f"u{i:02d}": expect(buy(client, aid, f"u{i:02d}"), 200) for i in range(40)}
    for uid in ("u00", "u07", "u13", "u21", "u39"):
        expect(client.post(f"/admin/orders/{grabs[uid]['order_id']}/cancel", headers=ADMIN),
               200)
    live = {u: g for u, g in grabs.items() if u not in {"u00", "u07", "u13", "u21", "u39"}}
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 45
    before = sorted(held(rds, prefix, aid)[0])

    names = ("meta", "packets", "amounts", "buyers", "cancelled", "orders")
    assert rds.delete(*(key(prefix, aid, n) for n in names)) == len(names)
    app.extensions["seckill"].cache.forget()

    # The first request that needs the activity rebuilds it from the database.
    repeat = expect(buy(client, aid, "u05"), 409, "already_purchased")
    assert (repeat["order_id"], repeat["amount"]) == (live["u05"]["order_id"],
                                                      live["u05"]["amount"])
    listed, amounts = held(rds, prefix, aid)
    assert sorted(listed) == before, "the unclaimed multiset: split minus live grabs"
    assert amounts == {u: g["amount"] for u, g in live.items()}
    multiset_is_the_split(rds, prefix, aid, packets)
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
    aid = create(client, amount=100, count=4)["id"]
    expect(buy(client, aid, "alice"), 200)
    with built_worker(settings, block_ms=100) as worker:
        assert drain(worker) == 1
    assert reconcile(app.extensions["seckill"].restorer, aid)["differences"] == {}
    rds.rpush(key(prefix, aid, "packets"), 77)  # damage: a packet that was never split
    report = reconcile(app.extensions["seckill"].restorer, aid)
    assert report["differences"] == {"packets": {"redis": 4, "database": 3}}


# --- the scripts and the worker's parsing ---------------------------------------------------


def test_each_script_refuses_the_other_kind_and_the_service_reroutes(
    app: Flask, client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
) -> None:
    services = app.extensions["seckill"]
    scripts, keys = services.scripts, services.keys
    packets_aid = create(client, amount=100, count=2)["id"]
    stock_aid = make_activity(total=2)["id"]
    assert scripts.purchase(keys=keys.activity_keys(packets_aid), args=["x", 1, packets_aid, 0]) \
        == ["wrong_kind", "packets"]
    assert scripts.grab(keys=keys.grab_keys(stock_aid), args=["x", 1, stock_aid, 0]) == [
        "wrong_kind", "stock"]
    assert int(rds.llen(key(prefix, packets_aid, "packets"))) == 2
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
    aid = create(client, amount=1_000, count=20)["id"]
    activity = services.book.load_activity(aid)
    assert activity is not None and activity.seed is not None
    packets = split(1_000, 20, activity.seed)
    fields = meta_fields(activity, 0)
    assert services.activities.publish_packets(activity, packets, fields) is False
    assert services.activities.create(activity) is False
    assert int(rds.llen(key(prefix, aid, "packets"))) == 20
    assert not [k for k in keys_of(rds, prefix) if "staging" in k]

    # An incomplete staging list (a push cut short) is never published.
    rds.delete(key(prefix, aid, "meta"))
    with pytest.raises(errors.SeckillError, match="incomplete"):
        services.activities.publish_packets(activity, packets[:-1], fields)
    assert rds.exists(key(prefix, aid, "meta")) == 0
    assert not [k for k in keys_of(rds, prefix) if "staging" in k]
    assert services.activities.publish_packets(activity, packets, fields) is True
    assert [int(p) for p in rds.lrange(key(prefix, aid, "packets"), 0, -1)] == packets


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
