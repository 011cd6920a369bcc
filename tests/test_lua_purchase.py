"""``lua/purchase.lua`` run directly on the session Valkey (per-test key prefix), through the same
``Scripts``/``KeySpace``/``ActivityStore`` objects the gateway uses: every return code, the
window on Redis TIME, the stream entry, the order id, the counters, NOSCRIPT, no overselling."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from seckill.domain.activities import Activity
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts, lua_source
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.meta import meta_fields
from tests.support.api import buy, create_activity, expect
from tests.support.relay import ChunkHook, Relay
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import keys_of


@dataclasses.dataclass
class Lua:
    rds: redis.Redis
    keys: KeySpace
    scripts: Scripts
    store: ActivityStore

    def redis_ms(self) -> int:
        seconds, micros = self.rds.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def put(self, start_ms: int = -60_000, end_ms: int = 3_600_000, total: int | None = 5,
            per_user_limit: int = 1) -> Activity:
        """An activity whose window is relative to *Redis's* clock."""
        at = self.redis_ms()
        activity = Activity(
            id=f"a{uuid.uuid4().hex[:10]}", name="Lua test", starts_ms=at + start_ms,
            ends_ms=at + end_ms, total=total, remaining=total, per_user_limit=per_user_limit,
        )
        self.store.create(activity)
        assert self.rds.exists(self.keys.meta(activity.id)) == 1
        return activity

    def purchase(self, aid: str, uid: str, quantity: Any = 1) -> list[Any]:
        reply = self.scripts.purchase(keys=self.keys.activity_keys(aid),
                                      args=[uid, quantity, aid, 0])
        assert isinstance(reply, list)
        return reply

    def meta(self, aid: str) -> dict[str, str]:
        return dict(self.rds.hgetall(self.keys.meta(aid)))  # type: ignore[arg-type]

    def stream(self, aid: str) -> list[dict[str, str]]:
        entries: list[tuple[str, dict[str, str]]] = self.rds.xrange(  # type: ignore[assignment]
            self.keys.orders(aid))
        return [fields for _, fields in entries]


@pytest.fixture
def lua(rds: redis.Redis, prefix: str) -> Lua:
    keys = KeySpace(prefix)
    scripts = Scripts(rds)
    return Lua(rds, keys, scripts, ActivityStore(rds, keys, scripts))


def order_id_re(aid: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(aid)}-(?P<ms>\d{{13}})-(?P<seq>\d{{6,}})")


def assert_untouched(lua: Lua, activity: Activity, remaining: int | None = None) -> None:
    meta = lua.meta(activity.id)
    expected = activity.total if remaining is None else remaining
    assert meta["remaining"] == str(-1 if expected is None else expected)
    assert lua.rds.exists(lua.keys.buyers(activity.id)) == 0
    assert lua.rds.exists(lua.keys.orders(activity.id)) == 0


# --- return codes -----------------------------------------------------------------------------


def test_ok(lua):
    activity = lua.put(total=5)
    before = lua.redis_ms()
    reply = lua.purchase(activity.id, "alice")
    after = lua.redis_ms()
    assert reply[0] == "ok"
    order_id = reply[1]
    assert int(reply[2]) == 4
    match = order_id_re(activity.id).fullmatch(order_id)
    assert match is not None, order_id
    assert before <= int(match["ms"]) <= after
    assert int(match["seq"]) == 1
    meta = lua.meta(activity.id)
    assert (meta["remaining"], meta["sold"], meta["seq"]) == ("4", "1", "1")
    assert lua.rds.hget(lua.keys.buyers(activity.id), "alice") == order_id


def test_stream_entry(lua):
    activity = lua.put(total=5, per_user_limit=3)
    before = lua.redis_ms()
    order_id = lua.purchase(activity.id, "alice@example.com", 3)[1]
    after = lua.redis_ms()
    entries = lua.rds.xrange(lua.keys.orders(activity.id))
    assert len(entries) == 1
    entry_id, fields = entries[0]
    expected = {"order_id": order_id, "activity": activity.id, "user": "alice@example.com",
                "quantity": "3"}
    assert {k: fields[k] for k in expected} == expected
    assert before <= int(fields["ts"]) <= after
    assert fields["ts"] == order_id_re(activity.id).fullmatch(order_id)["ms"]  # type: ignore[index]
    # The entry id is Redis's own clock too (XADD '*').
    assert before <= int(entry_id.split("-")[0]) <= after


def test_already_purchased_changes_nothing(lua):
    activity = lua.put(total=5, per_user_limit=2)
    order_id = lua.purchase(activity.id, "alice")[1]
    snapshot = (lua.meta(activity.id), lua.stream(activity.id))
    for quantity in (1, 2, 3, 0):  # the buyer check comes first, whatever the quantity
        assert lua.purchase(activity.id, "alice", quantity) == ["already_purchased", order_id]
    assert (lua.meta(activity.id), lua.stream(activity.id)) == snapshot


def test_already_purchased_after_sold_out(lua):
    activity = lua.put(total=1)
    order_id = lua.purchase(activity.id, "alice")[1]
    assert lua.purchase(activity.id, "bob") == ["sold_out"]
    assert lua.purchase(activity.id, "alice") == ["already_purchased", order_id]


def test_not_started_answers_redis_time(lua):
    activity = lua.put(start_ms=60_000)
    before = lua.redis_ms()
    reply = lua.purchase(activity.id, "alice")
    after = lua.redis_ms()
    assert reply[0] == "not_started"
    assert int(reply[1]) == activity.starts_ms
    assert before <= int(reply[2]) <= after
    assert_untouched(lua, activity)


def test_ended(lua):
    activity = lua.put(start_ms=-60_000, end_ms=-1)
    assert lua.purchase(activity.id, "alice") == ["ended"]
    assert_untouched(lua, activity)


def test_window_follows_redis_time(lua):
    """A window a fraction of a second long, placed on Redis's clock: the script refuses, then
    sells, then refuses, exactly as Redis TIME crosses its edges."""
    activity = lua.put(start_ms=600, end_ms=1400, total=None)
    assert lua.purchase(activity.id, "early")[0] == "not_started"
    while lua.redis_ms() < activity.starts_ms:
        time.sleep(0.01)
    reply = lua.purchase(activity.id, "in-time")
    assert reply[0] == "ok"
    assert activity.starts_ms <= int(order_id_re(activity.id).fullmatch(reply[1])["ms"])  # type: ignore[index]
    while lua.redis_ms() < activity.ends_ms:
        time.sleep(0.01)
    assert lua.purchase(activity.id, "late") == ["ended"]
    assert lua.rds.hkeys(lua.keys.buyers(activity.id)) == ["in-time"]


def test_sold_out(lua):
    activity = lua.put(total=2)
    assert lua.purchase(activity.id, "u1")[0] == "ok"
    assert lua.purchase(activity.id, "u2")[0] == "ok"
    snapshot = lua.meta(activity.id)
    assert lua.purchase(activity.id, "u3") == ["sold_out"]
    assert lua.meta(activity.id) == snapshot
    assert lua.rds.hexists(lua.keys.buyers(activity.id), "u3") == 0


def test_zero_stock_is_sold_out_from_the_start(lua):
    activity = lua.put(total=0)
    assert lua.purchase(activity.id, "alice") == ["sold_out"]
    assert_untouched(lua, activity)


def test_insufficient_stock(lua):
    activity = lua.put(total=3, per_user_limit=3)
    assert lua.purchase(activity.id, "u1", 2)[0] == "ok"
    assert lua.purchase(activity.id, "u2", 2) == ["insufficient_stock", 1]
    assert lua.purchase(activity.id, "u2", 3) == ["insufficient_stock", 1]
    assert lua.rds.hexists(lua.keys.buyers(activity.id), "u2") == 0
    assert lua.purchase(activity.id, "u2", 1)[0] == "ok"
    meta = lua.meta(activity.id)
    assert (meta["remaining"], meta["sold"]) == ("0", "3")


@pytest.mark.parametrize("quantity", [0, -1, 3, 1000, "1.5", "0.5", "abc", "", "nan", "inf",
                                      "-inf", "1e400"])
def test_bad_quantity(lua, quantity):
    activity = lua.put(total=5, per_user_limit=2)
    assert lua.purchase(activity.id, "alice", quantity) == ["bad_quantity", 2]
    assert_untouched(lua, activity)


def test_uninitialized_creates_nothing(lua, prefix):
    aid = f"a{uuid.uuid4().hex[:10]}"
    assert lua.purchase(aid, "alice") == ["uninitialized"]
    assert keys_of(lua.rds, prefix) == set()


# --- counters, order ids, the stream ----------------------------------------------------------


def test_counters_follow_every_purchase(lua):
    activity = lua.put(total=10, per_user_limit=3)
    for uid, quantity, remaining in (("u1", 3, 7), ("u2", 3, 4), ("u3", 2, 2), ("u4", 1, 1)):
        reply = lua.purchase(activity.id, uid, quantity)
        assert reply[0] == "ok" and int(reply[2]) == remaining
        meta = lua.meta(activity.id)
        assert int(meta["remaining"]) == remaining
        assert int(meta["sold"]) == 10 - remaining
    quantities = [int(e["quantity"]) for e in lua.stream(activity.id)]
    assert quantities == [3, 3, 2, 1]
    assert lua.rds.hlen(lua.keys.buyers(activity.id)) == 4


def test_order_ids_unique_and_increasing(lua):
    activity = lua.put(total=None)
    pattern = order_id_re(activity.id)
    ids = [lua.purchase(activity.id, f"user{i}")[1] for i in range(40)]
    assert len(set(ids)) == 40
    parsed = [pattern.fullmatch(i) for i in ids]
    assert all(parsed), ids
    seqs = [int(m["seq"]) for m in parsed if m]
    stamps = [int(m["ms"]) for m in parsed if m]
    assert seqs == list(range(1, 41))
    assert stamps == sorted(stamps)
    assert ids == sorted(ids)  # sortable as strings
    assert [e["order_id"] for e in lua.stream(activity.id)] == ids
    assert lua.rds.xlen(lua.keys.orders(activity.id)) == 40  # nothing trimmed


def test_order_sequence_grows_past_six_digits(lua):
    activity = lua.put(total=None)
    lua.rds.hset(lua.keys.meta(activity.id), "seq", 999_999)
    order_id = lua.purchase(activity.id, "alice")[1]
    match = order_id_re(activity.id).fullmatch(order_id)
    assert match is not None and match["seq"] == "1000000"


def test_unlimited_stock(lua):
    activity = lua.put(total=None, per_user_limit=2)
    for i in range(5):
        reply = lua.purchase(activity.id, f"u{i}", 2)
        assert reply[0] == "ok" and int(reply[2]) == -1
    meta = lua.meta(activity.id)
    assert (meta["remaining"], meta["total"], meta["sold"]) == ("-1", "-1", "10")
    assert lua.purchase(activity.id, "u0")[0] == "already_purchased"


def test_a_purchase_touches_only_its_three_keys(lua, prefix):
    activity = lua.put(total=5)
    assert lua.purchase(activity.id, "alice")[0] == "ok"
    assert keys_of(lua.rds, prefix) == set(lua.keys.activity_keys(activity.id))
    tag = f"{{{activity.id}}}"
    assert all(tag in key for key in lua.keys.activity_keys(activity.id))  # one cluster slot


def test_create_activity_script_never_overwrites(lua):
    activity = lua.put(total=5)
    lua.purchase(activity.id, "alice")
    snapshot = lua.meta(activity.id)
    again = dataclasses.replace(activity, total=99, remaining=99, name="Other")
    created = lua.scripts.create_activity(keys=[lua.keys.meta(activity.id)],
                                          args=meta_fields(again, 0))
    assert created == 0
    assert lua.meta(activity.id) == snapshot


# --- stock never goes negative ----------------------------------------------------------------


def test_stock_never_negative_sequentially(lua):
    activity = lua.put(total=7, per_user_limit=3)
    sold = 0
    for i in range(30):
        quantity = 3 - i % 3
        reply = lua.purchase(activity.id, f"u{i}", quantity)
        remaining = int(lua.meta(activity.id)["remaining"])
        assert remaining >= 0
        if reply[0] == "ok":
            sold += quantity
        else:
            assert reply[0] in {"insufficient_stock", "sold_out"}, reply
        assert sold + remaining == 7
    assert sold == 7
    assert sum(int(e["quantity"]) for e in lua.stream(activity.id)) == 7


def test_stock_never_negative_under_concurrency(lua, valkey):
    activity = lua.put(total=10, per_user_limit=2)
    clients = [redis.Redis.from_url(valkey.url, decode_responses=True) for _ in range(8)]
    try:
        def attempt(i: int) -> list[Any]:
            own = clients[i % len(clients)]
            script = own.register_script(lua_source("purchase"))
            reply = script(keys=lua.keys.activity_keys(activity.id),
                           args=[f"u{i % 150}", 1 + i % 2, activity.id, 0])
            assert isinstance(reply, list)
            return reply

        with ThreadPoolExecutor(max_workers=16) as pool:
            replies = list(pool.map(attempt, range(300)))
    finally:
        for own in clients:
            own.close()
    sold = sum(1 + i % 2 for i, r in enumerate(replies) if r[0] == "ok")
    assert sold == 10
    assert {r[0] for r in replies} <= {"ok", "sold_out", "insufficient_stock",
                                       "already_purchased"}
    meta = lua.meta(activity.id)
    assert (meta["remaining"], meta["sold"]) == ("0", "10")
    buyers = lua.rds.hgetall(lua.keys.buyers(activity.id))
    assert sum(int(e["quantity"]) for e in lua.stream(activity.id)) == 10
    assert len(buyers) == len(lua.stream(activity.id))


# --- NOSCRIPT ---------------------------------------------------------------------------------


def test_noscript_after_script_flush(lua):
    """SCRIPT FLUSH (what a Redis restart looks like to EVALSHA): the next purchase reloads the
    script and still runs exactly once. Flushing the shared server is harmless: every client
    of the suite reloads on NOSCRIPT."""
    activity = lua.put(total=5)
    assert lua.purchase(activity.id, "u1")[0] == "ok"
    sha = lua.scripts.purchase.sha
    lua.rds.script_flush()
    assert lua.rds.script_exists(sha) == [False]
    reply = lua.purchase(activity.id, "u2")
    assert reply[0] == "ok" and int(reply[2]) == 3
    assert lua.rds.script_exists(sha) == [True]
    assert lua.rds.xlen(lua.keys.orders(activity.id)) == 2


def test_noscript_through_the_gateway(client, make_activity, rds):
    activity = make_activity(total=5)
    expect(buy(client, activity["id"], "u1"), 200)
    rds.script_flush()
    expect(buy(client, activity["id"], "u2"), 200)
    stats = client.get(f"/admin/activities/{activity['id']}/stats",
                       headers=ADMIN)
    assert expect(stats, 200)["sold"] == 2


# --- a purchase whose answer is lost is never retried -----------------------------------------


class SlowProxy(Relay):
    """While ``delay`` is set, it holds back Redis's reply on any connection that sent the
    watched script's EVALSHA (and only there), and it counts how often that EVALSHA was sent."""

    def __init__(self, upstream_port: int, watch: bytes) -> None:
        self.watch = watch
        self.delay = 0.0
        self.seen = 0
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        hold = threading.Event()  # this connection sent the watched EVALSHA

        def on_request(chunk: bytes) -> bool:
            found = chunk.count(self.watch)
            if found:
                with self._lock:
                    self.seen += found
                if self.delay:
                    hold.set()
            return True

        def on_reply(chunk: bytes) -> bool:
            if hold.is_set():
                time.sleep(self.delay)
                hold.clear()
            return True

        return on_request, on_reply


@pytest.fixture
def slow_proxy(valkey, rds) -> Iterator[SlowProxy]:
    sha = rds.script_load(lua_source("purchase"))
    proxy = SlowProxy(valkey.port, sha.encode())
    yield proxy
    proxy.close()


def test_a_purchase_whose_answer_is_late_is_503_and_sent_once(make_app, slow_proxy, rds,
                                                               prefix):
    app = make_app(REDIS_URL=slow_proxy.url, SECKILL_REDIS_TIMEOUT="0.3",
                   SECKILL_DURABILITY_TIMEOUT_MS="200", SECKILL_META_TTL="300")
    client = app.test_client()
    aid = create_activity(client, total=5)["id"]
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    # A first purchase on time: the gateway's one-off checks of the server are done.
    expect(buy(client, aid, "early-bird"), 200)

    slow_proxy.seen = 0
    # Longer than the gateway waits for any reply (its socket timeout).
    slow_proxy.delay = app.extensions["seckill"].settings.socket_timeout + 0.7
    expect(client.post(url, headers=headers), 503, "unavailable")
    slow_proxy.delay = 0.0
    # The script was sent exactly once: redis-py did not retry it after the timeout.
    assert slow_proxy.seen == 1
    # It did run (Redis got it); the client resolves the unknown outcome with the order status.
    deadline = time.monotonic() + 5
    while rds.hget(f"{prefix}:{{{aid}}}:buyers", "alice") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    status = expect(client.get(f"/seckill/{aid}/order", headers=headers), 200)
    assert status["status"] == "pending"
    again = expect(client.post(url, headers=headers), 409, "already_purchased")
    assert again["order_id"] == status["order_id"]
    assert rds.hget(f"{prefix}:{{{aid}}}:meta", "remaining") == "3"
    assert slow_proxy.seen == 2
