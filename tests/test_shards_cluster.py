"""A sharded hot item raced over real HTTP: gunicorn with gevent workers on the session's
3-master cluster, many client threads at once.

Exactly ``total`` units go to distinct users; nobody hears ``sold_out`` while a part still
holds a unit (the buyers homed on a part that ran dry borrow from the others); one user's
simultaneous copies buy once across all the parts; cancels racing the last units never let
more than ``total`` be held. After each race the parts are counted in Redis directly.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import urllib3
from redis.cluster import RedisCluster

from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.store.plumbing.connection import close_client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags
from tests.support.gateway import gateway_env
from tests.support.race import CLIENT_THREADS, USER_RATE, Gateway, order_ids_of_buyers, run_all
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

Answer = tuple[str, int, dict[str, Any]]


@pytest.fixture(scope="module")
def gateway(valkey_cluster: EmbeddedCluster,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Two gevent workers on the session's cluster (REDIS_URL naming one node)."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    data = tmp_path_factory.mktemp("sharded-gateway")
    env = gateway_env(valkey_cluster.url, prefix, data, f"sqlite:///{data / 'orders.db'}",
                      USER_RATE)
    http = urllib3.PoolManager(maxsize=CLIENT_THREADS + 32, block=True)
    with gunicorn_server(env, workers=2) as base:
        yield Gateway(base, prefix, http, valkey_cluster.url, valkey_cluster)
        http.clear()


@pytest.fixture
def rdb(valkey_cluster: EmbeddedCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(valkey_cluster.url, decode_responses=True)
    yield client
    close_client(client)


def create_sharded(gateway: Gateway, total: int, shards: int) -> str:
    aid = f"h{uuid.uuid4().hex[:10]}"
    status, body = gateway.call(
        "POST", "/admin/activities", headers={**ADMIN, "Content-Type": "application/json"},
        body={"id": aid, "name": "Hot", "total": total, "shards": shards,
              "starts_at": iso(-60), "ends_at": iso(3600)})
    assert (status, body.get("shards")) == (201, shards), body
    return aid


def purchase_paths(gateway: Gateway, pool: ThreadPoolExecutor, aid: str,
                   uids: list[str]) -> dict[str, str]:
    def fetch(uid: str) -> tuple[str, int, dict[str, Any]]:
        status, body = gateway.call("GET", f"/seckill/url?activity={aid}",
                                    headers=user_headers(uid))
        return uid, status, body

    fetched = run_all(pool, fetch, [(uid,) for uid in uids])
    assert {status for _, status, _ in fetched} == {200}, fetched[:3]
    return {uid: body["url"] for uid, _, body in fetched}


def race(gateway: Gateway, pool: ThreadPoolExecutor, paths: dict[str, str],
         copies: int = 1) -> list[Answer]:
    """Every user's purchase (``copies`` of it) sent at once, behind one gate."""
    gate = threading.Event()
    headers = {uid: user_headers(uid) for uid in paths}

    def purchase(uid: str) -> Answer:
        gate.wait(10)
        status, body = gateway.call("POST", paths[uid], headers=headers[uid])
        return uid, status, body

    jobs = [(uid,) for uid in paths for _ in range(copies)]
    return run_all(pool, purchase, jobs, gate=gate)


def parts(rdb: RedisCluster, gateway: Gateway, aid: str, shards: int) -> list[dict[str, Any]]:
    """Each part's counters, buyers (user -> order id) and claims, straight from Redis."""
    keys = KeySpace(gateway.prefix)
    out = []
    for tag in part_tags(aid, shards):
        raw = rdb.hgetall(keys.meta(tag))
        numbers = {f: int(raw.get(f, 0)) for f in
                   ("total", "remaining", "held", "sold", "lent", "borrowed")}
        out.append({**numbers, "buyers": order_ids_of_buyers(rdb, keys.buyers(tag)),
                    "claims": rdb.hlen(keys.claims(tag)),
                    "transfers": rdb.hgetall(keys.transfers(tag)),
                    "received": rdb.hgetall(keys.received(tag))})
    return out


def check_whole(rdb: RedisCluster, gateway: Gateway, aid: str, shards: int, total: int,
                holders: dict[str, str]) -> None:
    """The parts together: ``holders`` (user -> order id) are exactly the live orders, each on
    its buyer's home part, every part balanced, nothing left claimed or in transit (each
    transfer record matched by its home part's receipt), and the stats endpoint agrees."""
    counted = parts(rdb, gateway, aid, shards)
    live: dict[str, str] = {}
    for index, part in enumerate(counted):
        assert part["total"] == part["remaining"] + part["held"] + part["sold"], (index, part)
        assert (part["claims"], part["held"]) == (0, 0), (index, part)
        assert part["sold"] == len(part["buyers"]), (index, part)
        for uid, order_id in part["buyers"].items():
            assert home_part(uid, shards) == index, (uid, index)
            assert uid not in live, uid
            live[uid] = order_id
    assert live == holders
    # Every unit lent was received by the claim's home part, once: none in transit.
    received = {claim: units for part in counted for claim, units in part["received"].items()}
    lent = {f"{claim}@{index}": record.split("|")[0] for index, part in enumerate(counted)
            for claim, record in part["transfers"].items()}
    assert lent == received
    assert sum(p["lent"] for p in counted) == sum(p["borrowed"] for p in counted)
    whole_total = sum(p["total"] + p["lent"] - p["borrowed"] for p in counted)
    sold = sum(p["sold"] for p in counted)
    assert (whole_total, sold) == (total, len(holders))
    status, stats = gateway.call("GET", f"/admin/activities/{aid}/stats", headers=ADMIN)
    assert status == 200, stats
    assert (stats["total"], stats["remaining"], stats["sold"], stats["buyers"]) == (
        total, total - len(holders), len(holders), len(holders))


def winners_of(answers: list[Answer]) -> dict[str, str]:
    won = [(uid, body["order_id"]) for uid, status, body in answers if status == 200]
    assert len({uid for uid, _ in won}) == len(won), "a user won twice"
    return dict(won)


@pytest.mark.parametrize(("buyers", "total"), [(210, 200), (5_000, 200)],
                         ids=["ten-too-many", "crowd"])
def test_a_sharded_item_sells_exactly_its_stock_and_says_sold_out_only_when_empty(
        gateway: Gateway, rdb: RedisCluster, buyers: int, total: int) -> None:
    """Every buyer once, at the same instant, 8 parts of 25 units: the buyers homed on a part
    that runs dry borrow from the others, so exactly ``total`` win and every other buyer (and
    only they) hears ``sold_out``: no 503, no ``purchase_in_progress``."""
    shards = 8
    aid = create_sharded(gateway, total, shards)
    uids = [f"hot{i:05d}" for i in range(buyers)]
    homes = collections.Counter(home_part(uid, shards) for uid in uids)
    # Some parts' buyers outnumber its 25 units: the race needs borrowing to end exact.
    assert max(homes.values()) > total // shards, homes
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        answers = race(gateway, pool, purchase_paths(gateway, pool, aid, uids))
    outcomes = collections.Counter((status, body.get("error")) for _, status, body in answers)
    assert outcomes == {(200, None): total, (410, "sold_out"): buyers - total}, outcomes
    winners = winners_of(answers)
    assert len(set(winners.values())) == total
    check_whole(rdb, gateway, aid, shards, total, winners)
    status, public = gateway.call("GET", f"/seckill/activities/{aid}")
    assert (status, public["remaining"], public["state"]) == (200, 0, "sold_out")


@pytest.mark.parametrize("total", [100, 5], ids=["ample", "scarce"])
def test_one_user_sending_five_purchases_at_once_wins_at_most_once(
        gateway: Gateway, rdb: RedisCluster, total: int) -> None:
    """30 users, 5 copies each at the same instant, on 6 parts (scarce: fewer units than
    parts, so most copies borrow): each user wins at most once, the other copies are told
    ``already_purchased`` (with the winning order) or, while the winning copy is still
    borrowing, ``purchase_in_progress``; never a second order anywhere."""
    shards, copies = 6, 5
    aid = create_sharded(gateway, total, shards)
    uids = [f"rep{i:03d}" for i in range(30)]
    with ThreadPoolExecutor(len(uids) * copies) as pool:
        answers = race(gateway, pool, purchase_paths(gateway, pool, aid, uids), copies=copies)
    per_user: dict[str, list[tuple[int, dict[str, Any]]]] = collections.defaultdict(list)
    for uid, status, body in answers:
        per_user[uid].append((status, body))
    winners = {}
    for uid, got in per_user.items():
        won = [body for status, body in got if status == 200]
        assert len(won) <= 1, (uid, got)
        for status, body in got:
            if status == 409 and body["error"] == "already_purchased":
                assert won and body["order_id"] == won[0]["order_id"], (uid, got)
            else:
                assert (status, body.get("error")) in {
                    (200, None), (410, "sold_out"), (409, "purchase_in_progress")}, (uid, got)
        if won:
            winners[uid] = won[0]["order_id"]
    assert len(winners) == min(total, len(uids))
    check_whole(rdb, gateway, aid, shards, total, winners)


def test_cancels_racing_the_last_units_never_let_more_than_total_be_held(
        gateway: Gateway, rdb: RedisCluster) -> None:
    """40 units on 8 parts sold out; then 20 operator cancels and 200 new buyers at the same
    instant: the new buyers win at most the 20 units that came back, never one more, and a
    last crowd takes whatever the race left, to exactly ``total`` again."""
    shards, total = 8, 40
    aid = create_sharded(gateway, total, shards)
    late = [f"late{i:03d}" for i in range(200)]
    last = [f"last{i:03d}" for i in range(60)]
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        # Everyone's purchase URL first: a sold-out activity hands out none.
        paths = purchase_paths(gateway, pool, aid,
                               [f"first{i:03d}" for i in range(total)] + late + last)
        first = race(gateway, pool, {uid: paths[uid] for uid in paths if uid.startswith("f")})
        holders = winners_of(first)
        assert len(holders) == total, first
        cancelled = sorted(holders)[:20]
        late_paths = {uid: paths[uid] for uid in late}
        headers = {uid: user_headers(uid) for uid in late}
        gate = threading.Event()

        def cancel(uid: str) -> tuple[str, int, dict[str, Any]]:
            gate.wait(10)
            status, body = gateway.call("POST", f"/admin/orders/{holders[uid]}/cancel",
                                        headers=ADMIN)
            return "cancel", status, body

        def purchase(uid: str) -> tuple[str, int, dict[str, Any]]:
            gate.wait(10)
            status, body = gateway.call("POST", late_paths[uid], headers=headers[uid])
            return uid, status, body

        jobs = [pool.submit(cancel, uid) for uid in cancelled]
        jobs += [pool.submit(purchase, uid) for uid in late]
        gate.set()
        answers = [job.result(timeout=60) for job in jobs]
        cancels = answers[:len(cancelled)]
        assert {(status, body["status"]) for _, status, body in cancels} == {
            (200, "cancelled")}, cancels
        bought = answers[len(cancelled):]
        assert {(status, body.get("error")) for _, status, body in bought} <= {
            (200, None), (410, "sold_out")}, bought
        late_winners = winners_of(bought)
        assert len(late_winners) <= len(cancelled)
        for uid in cancelled:
            del holders[uid]
        holders.update(late_winners)
        check_whole(rdb, gateway, aid, shards, total, holders)

        # Whatever came back and was not taken in the race is still on sale, and only that.
        mop = race(gateway, pool, {uid: paths[uid] for uid in last})
    mopped = winners_of(mop)
    assert len(mopped) == total - len(holders)
    holders.update(mopped)
    check_whole(rdb, gateway, aid, shards, total, holders)
