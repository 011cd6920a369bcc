"""A purchase is never decided after the moment its buyer may have been told it failed.

nginx stamps each request with its arrival (``X-Request-Start: t=<seconds>``); the gateway
passes the purchase's deadline (arrival + ``SECKILL_PURCHASE_BUDGET_MS``) to the script, which
refuses on Redis's clock before anything is done: 503 ``unavailable``, detail ``expired``,
no order, no claim, no rate counted. Without a stamp the deadline runs from the gateway's own
receipt. Here through the app (single server and cluster), through a relay that holds the
script's call past the deadline, and at the scripts themselves (a sharded settlement, a
packet grab). Through real nginx and a frozen gunicorn: tests/test_purchase_deadline_nginx.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask

from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.web.hot import purchase_deadline
from tests.support.api import expect, order_status
from tests.support.backends import BOTH_BACKENDS
from tests.support.relay import ChunkHook, Relay, _forward
from tests.support.tokens import ADMIN, user_headers


def _stamp(seconds_ago: float) -> str:
    return f"t={time.time() - seconds_ago:.3f}"


def _url(client: Any, aid: str, uid: str) -> str:
    got = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)), 200)
    return str(got["url"])


def _sold(client: Any, aid: str) -> int:
    stats = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    return int(stats["sold"])


@BOTH_BACKENDS
def test_a_purchase_older_than_its_budget_decides_nothing(
        client: Any, make_activity: Callable[..., dict[str, Any]]) -> None:
    aid = make_activity(total=5)["id"]
    url = _url(client, aid, "late")
    stale = client.post(url, headers=user_headers("late") | {"X-Request-Start": _stamp(6)})
    body = expect(stale, 503, "unavailable")
    assert body["detail"] == "expired", body
    assert order_status(client, aid, "late")["status"] == "none"
    assert _sold(client, aid) == 0
    # Nothing was counted either: the buyer's next purchase, on time, goes through.
    fresh = client.post(url, headers=user_headers("late") | {"X-Request-Start": _stamp(0.5)})
    expect(fresh, 200)
    assert _sold(client, aid) == 1


@BOTH_BACKENDS
def test_a_sharded_purchase_past_its_deadline_leaves_no_claim(
        client: Any, rds: redis.Redis, make_activity: Callable[..., dict[str, Any]],
        prefix: str) -> None:
    aid = make_activity(total=8, shards=4, per_user_limit=4)["id"]
    url = _url(client, aid, "sharded")
    expect(client.post(url, headers=user_headers("sharded") | {"X-Request-Start": _stamp(9)},
                       json={"quantity": 4}), 503, "unavailable")
    keys = KeySpace(prefix)
    for tag in part_tags(aid, 4):
        assert not rds.hgetall(keys.claims(tag)), tag
        assert rds.hget(keys.meta(tag), "held") in (None, "0"), tag
    assert _sold(client, aid) == 0
    expect(client.post(url, headers=user_headers("sharded"), json={"quantity": 4}), 200)


def test_a_packet_grab_past_its_deadline_decides_nothing(
        client: Any, make_activity: Callable[..., dict[str, Any]]) -> None:
    aid = make_activity(kind="packets", amount=1000, count=4)["id"]
    url = _url(client, aid, "grabber")
    expect(client.post(url, headers=user_headers("grabber") | {"X-Request-Start": _stamp(7)}),
           503, "unavailable")
    assert order_status(client, aid, "grabber")["status"] == "none"
    expect(client.post(url, headers=user_headers("grabber")), 200)


def test_a_settlement_past_its_deadline_gives_the_claims_units_back(
        rds: redis.Redis, client: Any, make_activity: Callable[..., dict[str, Any]],
        prefix: str) -> None:
    """settle.lua, the decision of a purchase that borrowed: past its deadline it sells
    nothing, releases the claim and puts what it held (and what was lent) back in stock."""
    aid = make_activity(total=4, shards=2, per_user_limit=4)["id"]
    keys, scripts = KeySpace(prefix), Scripts(rds)
    home = part_tags(aid, 2)[0]
    borrow = scripts.purchase(keys=keys.part_keys(home), args=["u1", 4, aid, 0])
    assert borrow[0] == "borrow", borrow
    past = int(time.time() * 1000) - 1000
    settled = scripts.settle(keys=keys.settle_keys(home), args=["u1", 4, aid, borrow[1], past])
    assert settled[0] == "expired", settled
    assert not rds.hget(keys.claims(home), "u1")
    assert not rds.hget(keys.buyers(home), "u1")
    meta = rds.hmget(keys.meta(home), ["remaining", "held", "sold"])
    assert meta == ["2", "0", "0"], meta


class _HoldingRelay(Relay):
    """Holds every script call (EVALSHA) for ``hold`` seconds once armed: the purchase reaches
    Redis after its deadline has passed, as it would behind a stalled instance or network."""

    def __init__(self, upstream_port: int, hold: float) -> None:
        self.hold = hold
        self.armed = False
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        def on_request(chunk: bytes) -> bool:
            if self.armed and b"EVALSHA" in chunk.upper():
                time.sleep(self.hold)
            return True

        return on_request, _forward


def test_without_a_stamp_the_deadline_runs_from_the_gateways_receipt(
        valkey: Any, make_app: Callable[..., Flask], client: Any,
        make_activity: Callable[..., dict[str, Any]]) -> None:
    aid = make_activity(total=3)["id"]
    with _HoldingRelay(valkey.port, hold=1.2) as relay:
        app = make_app(REDIS_URL=relay.url, SECKILL_PURCHASE_BUDGET_MS="400")
        own = app.test_client()
        url = _url(own, aid, "slow")
        relay.armed = True
        body = expect(own.post(url, headers=user_headers("slow")), 503, "unavailable")
        relay.armed = False
        assert body["detail"] == "expired", body
    assert order_status(client, aid, "slow")["status"] == "none"
    assert _sold(client, aid) == 0


def test_the_deadline_is_the_earlier_of_the_stamp_and_the_receipt() -> None:
    received = 1_800_000_000_000
    assert purchase_deadline(None, received, 5000) == received + 5000
    assert purchase_deadline("t=1799999990.250", received, 5000) == received - 9750 + 5000
    assert purchase_deadline("1799999999.5", received, 100) == received - 500 + 100
    assert purchase_deadline("t=1799999998000", received, 0) == received - 2000  # ms
    assert purchase_deadline("t=1799999997000000", received, 0) == received - 3000  # µs
    # A stamp after the receipt (a client's own header, a clock ahead) never lengthens it.
    assert purchase_deadline("t=1800000060.000", received, 5000) == received + 5000
    for garbage in ("", "t=", "t=abc", "t=-5", "t=nan", "t=inf", "0"):
        assert purchase_deadline(garbage, received, 5000) == received + 5000, garbage


@pytest.mark.parametrize("seconds_ago", [0.0, 2.0])
def test_a_purchase_within_its_budget_is_decided(
        client: Any, make_activity: Callable[..., dict[str, Any]], seconds_ago: float) -> None:
    aid = make_activity(total=2)["id"]
    uid = f"u{uuid.uuid4().hex[:6]}"
    url = _url(client, aid, uid)
    expect(client.post(url, headers=user_headers(uid) | {
        "X-Request-Start": _stamp(seconds_ago)}), 200)
    assert order_status(client, aid, uid)["status"] in ("pending", "confirmed")


def test_the_budget_setting_is_read_and_checked() -> None:
    from seckill.config import ConfigError, Settings

    base = {"SECKILL_ENV": "development"}
    assert Settings.from_env(base).purchase_budget_ms == 5000
    assert Settings.from_env({**base, "SECKILL_PURCHASE_BUDGET_MS": "2500"}
                             ).purchase_budget_ms == 2500
    with pytest.raises(ConfigError, match="SECKILL_PURCHASE_BUDGET_MS"):
        Settings.from_env({**base, "SECKILL_PURCHASE_BUDGET_MS": "0"})
