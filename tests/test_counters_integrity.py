"""A counter is never read as "unlimited", and a limited activity whose counters disagree
refuses to sell: 503 ``unavailable`` with ``"detail": "inconsistent"``,
flagged in ``/metrics`` and the console, until ``seckill reconcile --repair`` has made it agree
with the database. The torn AOF replay that sold 502 of 500 left ``remaining -1`` in a
limited activity's meta hash: the tests write that by hand."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from seckill.config import Settings
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from tests.support.api import activity_stats, buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.cli import seckill
from tests.support.metrics import of, scrape
from tests.support.orders import built_worker, drain
from tests.support.shards import users_homed
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN


def inconsistent(response: Any) -> None:
    """The refusal the contract promises."""
    body = expect(response, 503, "unavailable")
    assert body["detail"] == "inconsistent", body


def drained(settings: Settings) -> None:
    """The orders worker stores every decided order and trims its stream: nothing in flight
    (``--repair`` refuses to rebuild while orders wait in the stream)."""
    with built_worker(settings, block_ms=50) as worker:
        drain(worker)
        worker._housekept_at = 0  # trim now
        worker.step()


def flags(make_app: Any, aid: str) -> tuple[float | None, bool | None]:
    """What another process's ``/metrics`` and console state say of ``aid`` (a new app's
    console reads afresh; its /metrics may show the deployment's reading of up to an interval
    ago, shared through Redis: see :func:`flagged`)."""
    other = make_app().test_client()
    samples = scrape(other)
    state = expect(other.get("/admin/console/state", headers=ADMIN), 200)
    row = next(a for a in state["activities"] if a["id"] == aid)
    return of(samples, "seckill_activity_inconsistent", activity=aid), row.get("inconsistent")


def flagged(make_app: Any, aid: str, expected: tuple[float, bool],
            never: tuple[float, bool] | None = None) -> None:
    """Wait until another process says ``expected`` of ``aid`` (at most a reading later);
    with ``never``, fail as soon as either of its flags shows on the way."""

    def says() -> bool:
        found = flags(make_app, aid)
        assert never is None or (found[0] != never[0] and found[1] != never[1]), found
        return found == expected

    wait_until(says, 5, interval=0.2, what=f"{aid} flagged {expected}")


@BOTH_BACKENDS
def test_a_limited_activity_read_minus_one_refuses_until_reconcile_repairs_it(
    client: FlaskClient, make_activity: Any, make_app: Any, env: dict[str, str],
    settings: Settings, rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=5)["id"]
    for uid in ("u0", "u1"):
        expect(buy(client, aid, uid), 200)
    meta = KeySpace(prefix).meta(aid)
    flagged(make_app, aid, (0, False))
    rds.hset(meta, "remaining", -1)  # the torn replay's "unlimited"
    for i in range(8):  # today: every one of them is sold
        inconsistent(buy(client, aid, f"late{i}"))
    assert rds.hmget(meta, "remaining", "sold") == ["-1", "2"]
    assert rds.hlen(KeySpace(prefix).buyers(aid)) == 2
    flagged(make_app, aid, (1, True))
    view = expect(make_app().test_client().get(f"/seckill/activities/{aid}"), 200)
    assert (view["total"], view["remaining"]) == (5, 0)  # never -1, never "unlimited" (null)

    drained(settings)
    report = seckill("reconcile", aid, env=env)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["differences"]["remaining"] == {"redis": -1, "database": 3}
    repaired = seckill("reconcile", aid, "--repair", env=env)
    assert json.loads(repaired.stdout)["action"] == "rebuilt", repaired.stdout
    assert rds.hmget(meta, "total", "remaining", "sold") == ["5", "3", "2"]
    expect(buy(client, aid, "late0"), 200)
    flagged(make_app, aid, (0, False))
    for i in range(1, 3):
        expect(buy(client, aid, f"late{i}"), 200)
    expect(buy(client, aid, "late9"), 410, "sold_out")


def test_sold_and_remaining_that_do_not_add_up_to_total_refuse(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    aid = make_activity(total=10)["id"]
    expect(buy(client, aid, "first"), 200)
    meta = KeySpace(prefix).meta(aid)
    rds.hincrby(meta, "remaining", 3)  # 12 + 1 != 10: three units counted twice
    with caplog.at_level(logging.ERROR, logger="seckill.store.sale.purchase.stock"):
        for _ in range(3):
            inconsistent(buy(client, aid, "second"))
    said = [r.getMessage() for r in caplog.records  # the stock's (not the audit trail's)
            if r.name == "seckill.store.sale.purchase.stock" and aid in r.getMessage()]
    assert len(said) == 1 and "--repair" in said[0], said  # once per activity per process
    rds.hincrby(meta, "remaining", -3)
    expect(buy(client, aid, "second"), 200)
    rds.hincrby(meta, "sold", -1)  # 8 + 1 != 10
    inconsistent(buy(client, aid, "third"))
    assert rds.hmget(meta, "remaining", "sold") == ["8", "1"]


def test_only_the_flag_says_unlimited(
    client: FlaskClient, make_activity: Any, rds: redis.Redis, prefix: str,
) -> None:
    """An unlimited activity sells whatever its counters say; a limited one whose total and
    remaining both read -1 (what "unlimited" was stored as) refuses."""
    free = make_activity(total=None)["id"]
    assert rds.hget(KeySpace(prefix).meta(free), "unlimited") == "1"
    rds.hset(KeySpace(prefix).meta(free), "remaining", 0)
    for i in range(3):
        expect(buy(client, free, f"f{i}"), 200)
    expect(client.post(f"/admin/activities/{free}/stock", json={"add": 5}, headers=ADMIN),
           400, "bad_request")
    limited = make_activity(total=3)["id"]
    meta = KeySpace(prefix).meta(limited)
    assert rds.hget(meta, "unlimited") == "0"
    rds.hset(meta, mapping={"total": -1, "remaining": -1})
    inconsistent(buy(client, limited, "x"))
    assert rds.hget(meta, "sold") == "0"


@BOTH_BACKENDS
def test_a_sharded_part_that_disagrees_refuses_and_reconcile_repairs_it(
    app: Flask, client: FlaskClient, make_activity: Any, make_app: Any, env: dict[str, str],
    settings: Settings, rds: redis.Redis, prefix: str,
) -> None:
    aid = make_activity(total=6, shards=3)["id"]
    keys, tags = KeySpace(prefix), part_tags(aid, 3)
    homed = users_homed(3, 1, 3, "p1-")
    expect(buy(client, aid, homed[0]), 200)
    part = keys.meta(tags[1])
    rds.hset(part, "remaining", -1)  # total = remaining + held + sold no longer holds
    inconsistent(buy(client, aid, homed[1]))
    assert rds.hget(part, "sold") == "1"
    flagged(make_app, aid, (1, True))

    report = seckill("reconcile", aid, env=env)  # read-only: it once refused to send TIME
    assert report.returncode == 0, report.stderr
    assert "parts" in json.loads(report.stdout)["differences"], report.stdout
    drained(settings)
    repaired = seckill("reconcile", aid, "--repair", env=env)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt" in json.loads(repaired.stdout)["action"], repaired.stdout
    expect(buy(client, aid, homed[1]), 200)
    expect(buy(client, aid, homed[0]), 409, "already_purchased")
    stats = activity_stats(client, aid)
    assert (stats["total"], stats["remaining"], stats["sold"]) == (6, 4, 2)
    for tag in tags:
        total, remaining, held, sold = (int(v or 0) for v in rds.hmget(
            keys.meta(tag), "total", "remaining", "held", "sold"))
        assert total == remaining + held + sold and remaining >= 0, tag
    flagged(make_app, aid, (0, False))


def test_reconcile_of_a_sharded_activity_runs_read_only(
    client: FlaskClient, make_activity: Any, env: dict[str, str],
) -> None:
    """Red team, item 6: `seckill reconcile <sharded activity>` answered "refused to send
    TIME", so a sharded sale could not be audited without write access."""
    aid = make_activity(total=4, shards=2)["id"]
    expect(buy(client, aid, "someone"), 200)
    report = seckill("reconcile", aid, env=env)
    assert report.returncode == 0, report.stderr
    body = json.loads(report.stdout)
    assert body["action"] == "none" and not body["inconsistent"], body
    assert body["differences"] == {"sold": {"redis": 1, "database": 0}}  # not stored yet


def test_a_consistent_sale_is_never_flagged(
    client: FlaskClient, make_activity: Any, make_app: Any,
) -> None:
    """Packets, a sharded activity that borrowed, cancels and restocks keep their counters in
    agreement: none of them is flagged."""
    packets = make_activity(kind="packets", amount=1000, count=5)["id"]
    sharded = make_activity(total=4, shards=2)["id"]
    stock = make_activity(total=3)["id"]
    for uid in users_homed(2, 0, 3, "s"):  # part 0's two units, then one borrowed
        expect(buy(client, sharded, uid), 200)
    order = expect(buy(client, stock, "c"), 200)["order_id"]
    expect(client.post(f"/admin/orders/{order}/cancel", headers=ADMIN), 200)
    expect(client.post(f"/admin/activities/{stock}/stock", json={"add": 2}, headers=ADMIN), 200)
    for i in range(3):
        expect(buy(client, packets, f"g{i}"), 200)
        expect(buy(client, stock, f"c{i}"), 200)
    for aid in (packets, sharded, stock):
        flagged(make_app, aid, (0, False), never=(1, True))
