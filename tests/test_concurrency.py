"""The race, over real HTTP: gunicorn with gevent workers, a real Valkey, many client threads,
on one server and on a 3-master cluster (activities whose slots land on every master).

Exactly ``total`` units go to distinct users however hard the crowd pushes, and one user
repeating a purchase at the same instant buys once. The per-user rate limit stays on (set
high enough that no honest request here is refused; a test checks it still bites).
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import orjson
import pytest
import redis

from tests.support.race import CLIENT_THREADS, HTTP_TIMEOUT, Gateway, order_ids_of_buyers, run_all
from tests.support.tokens import ADMIN, user_headers

# The race's fixtures, ``gateway`` and ``rdb`` of tests/support/race.py: a gunicorn of this
# module's own, on the single server and the cluster.


def test_five_thousand_users_race_for_fifty_units(gateway: Gateway, rdb: redis.Redis) -> None:
    """5 000 users, 50 units over three activities (on a cluster: one per master), all at
    once: each activity sells exactly its stock to distinct users, and says so everywhere."""
    users, stocks = 5_000, (17, 17, 16)
    aids = gateway.activity_ids(len(stocks))
    for aid, stock in zip(aids, stocks, strict=True):
        gateway.create_activity(total=stock, aid=aid)
    uids = [f"racer{i:05d}" for i in range(users)]
    target = {uid: aids[i % len(aids)] for i, uid in enumerate(uids)}
    headers = {uid: user_headers(uid) for uid in uids}
    started = time.monotonic()

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        # Everyone fetches a purchase URL while stock remains: all must get one.
        def fetch_url(uid: str) -> tuple[int, dict[str, Any]]:
            return gateway.call("GET", f"/seckill/url?activity={target[uid]}",
                                headers=headers[uid])

        urls = run_all(pool, fetch_url, [(uid,) for uid in uids])
        url_statuses = collections.Counter(status for status, _ in urls)
        assert url_statuses == {200: users}, url_statuses
        fetched = time.monotonic()

        # Then the crowd buys, all at once.
        gate = threading.Event()

        def purchase(uid: str, path: str) -> tuple[str, int, dict[str, Any]]:
            gate.wait(10)
            status, body = gateway.call("POST", path, headers=headers[uid])
            return uid, status, body

        paths = [body["url"] for _, body in urls]
        answers = run_all(pool, purchase, list(zip(uids, paths, strict=True)), gate=gate)
    bought = time.monotonic()

    total = sum(stocks)
    outcomes = collections.Counter((status, body.get("error")) for _, status, body in answers)
    assert outcomes == {(200, None): total, (410, "sold_out"): users - total}, outcomes
    order_ids = [body["order_id"] for _, status, body in answers if status == 200]
    assert len(set(order_ids)) == total
    for aid, stock in zip(aids, stocks, strict=True):
        winners = {uid: body for uid, status, body in answers
                   if status == 200 and target[uid] == aid}
        check_sold_out_activity(gateway, rdb, aid, stock, winners)
    some_winner = next(uid for uid, status, _ in answers if status == 200)
    loser = next(uid for uid, status, _ in answers if status != 200)
    assert gateway.call("GET", f"/seckill/{target[loser]}/order", headers=headers[loser]) == (
        200, {"status": "none"},
    )
    status, mine = gateway.call("GET", f"/seckill/{target[some_winner]}/order",
                                headers=headers[some_winner])
    assert (status, mine["status"]) == (200, "pending")

    print(
        f"\n{users} URL fetches in {fetched - started:.1f}s, "
        f"{users} purchases in {bought - fetched:.1f}s"
    )


def check_sold_out_activity(gateway: Gateway, rdb: redis.Redis, aid: str, stock: int,
                            winners: dict[str, dict[str, Any]]) -> None:
    """One activity of the race: ``stock`` winners, each once, and Redis, the stats and the
    public view all say exactly that."""
    assert len(winners) == stock, aid
    assert all(body == {"status": "ok", "order_id": body["order_id"], "quantity": 1}
               for body in winners.values())
    assert rdb.hget(gateway.key(aid, "meta"), "remaining") == "0"
    assert rdb.hget(gateway.key(aid, "meta"), "sold") == str(stock)
    buyers = order_ids_of_buyers(rdb, gateway.key(aid, "buyers"))
    assert buyers == {uid: body["order_id"] for uid, body in winners.items()}
    assert rdb.xlen(gateway.key(aid, "orders")) == stock
    entries = cast(list[tuple[str, dict[str, str]]], rdb.xrange(gateway.key(aid, "orders")))
    assert {fields["user"]: fields["order_id"] for _, fields in entries} == buyers
    status, stats = gateway.call("GET", f"/admin/activities/{aid}/stats", headers=ADMIN)
    assert status == 200, stats
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (
        stock, 0, stock, stock,
    )
    status, public = gateway.call("GET", f"/seckill/activities/{aid}")
    assert (status, public["remaining"], public["state"]) == (200, 0, "sold_out")


@pytest.mark.parametrize(("repeaters", "stock"), [(20, 100), (20, 7)], ids=["ample", "scarce"])
def test_one_user_repeating_a_purchase_at_once_buys_once(
    gateway: Gateway, rdb: redis.Redis, repeaters: int, stock: int
) -> None:
    copies = 5
    aid = gateway.create_activity(total=stock)
    uids = [f"repeater{i:03d}" for i in range(repeaters)]
    headers = {uid: user_headers(uid) for uid in uids}
    paths = {}
    for uid in uids:
        status, body = gateway.call("GET", f"/seckill/url?activity={aid}", headers=headers[uid])
        assert status == 200, body
        paths[uid] = body["url"]

    barriers = {uid: threading.Barrier(copies) for uid in uids}

    def purchase(uid: str) -> tuple[str, int, dict[str, Any]]:
        barriers[uid].wait(10)  # the same user's copies leave together
        status, body = gateway.call("POST", paths[uid], headers=headers[uid])
        return uid, status, body

    with ThreadPoolExecutor(repeaters * copies) as pool:
        answers = run_all(pool, purchase, [(uid,) for uid in uids for _ in range(copies)])

    per_user: dict[str, list[tuple[int, dict[str, Any]]]] = collections.defaultdict(list)
    for uid, status, body in answers:
        per_user[uid].append((status, body))

    winners = {}
    for uid in uids:
        got = per_user[uid]
        statuses = sorted(status for status, _ in got)
        if statuses == [410] * copies:
            # Lost the race for stock with every copy: sold out each time, nothing bought.
            assert all(body["error"] == "sold_out" for _, body in got), got
            continue
        assert statuses == [200] + [409] * (copies - 1), (uid, got)
        won = next(body for status, body in got if status == 200)
        repeats = [body for status, body in got if status == 409]
        assert all(body["error"] == "already_purchased" for body in repeats), repeats
        assert {body["order_id"] for body in repeats} == {won["order_id"]}, (won, repeats)
        winners[uid] = won["order_id"]

    expected_winners = min(repeaters, stock)
    assert len(winners) == expected_winners
    assert len(set(winners.values())) == expected_winners
    assert order_ids_of_buyers(rdb, gateway.key(aid, "buyers")) == winners
    assert rdb.xlen(gateway.key(aid, "orders")) == expected_winners
    assert rdb.hget(gateway.key(aid, "meta"), "remaining") == str(stock - expected_winners)


def test_the_per_user_limit_is_on_in_this_server(gateway: Gateway) -> None:
    """The races above run with the limiter on; show that it does refuse a flood."""
    aid = gateway.create_activity(total=10)
    headers = user_headers("flooder")
    statuses = []
    retry_after = None
    for _ in range(45):  # more than two fixed windows' worth of "20/second"
        response = gateway.http.request(
            "GET", f"{gateway.base}/seckill/url?activity={aid}", headers=headers,
            timeout=HTTP_TIMEOUT, retries=False,
        )
        statuses.append(response.status)
        if response.status == 429:
            retry_after = response.headers.get("Retry-After")
            assert orjson.loads(response.data)["error"] == "rate_limited"
    assert set(statuses) == {200, 429}, statuses
    assert retry_after is not None and int(retry_after) >= 1
