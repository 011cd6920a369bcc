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
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar, cast

import orjson
import pytest
import redis
import urllib3
from redis.cluster import RedisCluster
from redis.crc import key_slot

from edge.identity import mint_user_token
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import close_client
from tests.support.gateway import gateway_env
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN, JWT_SECRET

CLIENT_THREADS = 96
# Each racer makes 2 calls (URL, purchase), each repeater 6; well under this, but it is on.
USER_RATE = "20/second"
HTTP_TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)
PHASE_BUDGET = 40.0  # seconds for one phase of requests; a hang fails instead of blocking CI

T = TypeVar("T")


class Gateway:
    """A gunicorn+gevent gateway on a free port, and a thread-safe HTTP client for it."""

    def __init__(self, base: str, prefix: str, http: urllib3.PoolManager, redis_url: str,
                 cluster: EmbeddedCluster | None) -> None:
        self.base = base
        self.redis_url = redis_url
        self.prefix = prefix
        self.http = http
        self.cluster = cluster

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
    ) -> tuple[int, dict[str, Any]]:
        response = self.http.request(
            method,
            self.base + path,
            headers=headers,
            body=None if body is None else orjson.dumps(body),
            timeout=HTTP_TIMEOUT,
            retries=False,  # never resend a purchase
        )
        payload = orjson.loads(response.data) if response.data else {}
        return response.status, payload

    def activity_ids(self, count: int) -> list[str]:
        """``count`` new activity ids; on a cluster, their slots on as many masters as can be."""
        if self.cluster is None:
            return [f"c{uuid.uuid4().hex[:10]}" for _ in range(count)]
        masters = len({self.cluster.master_of_slot(s) for s in (0, 8000, 16383)})
        chosen: dict[int, str] = {}
        while len(chosen) < min(count, masters):
            aid = f"c{uuid.uuid4().hex[:10]}"
            chosen.setdefault(self.cluster.master_of_slot(key_slot(aid.encode())), aid)
        extra = [f"c{uuid.uuid4().hex[:10]}" for _ in range(count - len(chosen))]
        return [*chosen.values(), *extra]

    def create_activity(self, total: int, aid: str | None = None) -> str:
        aid = aid or self.activity_ids(1)[0]
        status, body = self.call(
            "POST",
            "/admin/activities",
            headers={**ADMIN, "Content-Type": "application/json"},
            body={
                "id": aid,
                "name": "Race",
                "total": total,
                "starts_at": iso(-60),
                "ends_at": iso(3600),
            },
        )
        assert status == 201, body
        return aid

    def key(self, aid: str, name: str) -> str:
        return f"{self.prefix}:{{{aid}}}:{name}"


@pytest.fixture(scope="module", params=["single", "cluster"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """Two gevent workers on the session's Valkey, or on the session's cluster (REDIS_URL
    naming one of its nodes, SECKILL_REDIS_CLUSTER left at auto)."""
    cluster: EmbeddedCluster | None = None
    if request.param == "cluster":
        cluster = request.getfixturevalue("valkey_cluster")
        url = cluster.url
    else:
        url = cast(EmbeddedValkey, request.getfixturevalue("valkey")).url
    prefix = f"t{uuid.uuid4().hex[:12]}"
    data = tmp_path_factory.mktemp("gateway-data")
    # Always a database of this module's own, never one named in the caller's environment;
    # the race is decided in Redis, the database only sees the activities created here.
    env = gateway_env(url, prefix, data, f"sqlite:///{data / 'orders.db'}", USER_RATE)
    http = urllib3.PoolManager(maxsize=CLIENT_THREADS + 32, block=True)
    with gunicorn_server(env, workers=2) as base:
        yield Gateway(base, prefix, http, url, cluster)
        http.clear()  # close keep-alive connections first: the server then stops at once


@pytest.fixture
def rdb(gateway: Gateway) -> Iterator[redis.Redis]:
    """A client of the gateway's Redis (the cluster client on a cluster)."""
    if gateway.cluster is not None:
        cluster = RedisCluster.from_url(gateway.cluster.url, decode_responses=True)
        yield cluster  # type: ignore[misc]
        close_client(cluster)
        return
    conn = redis.Redis.from_url(gateway.redis_url, decode_responses=True)
    yield conn
    conn.close()


def run_all(
    pool: ThreadPoolExecutor,
    job: Callable[..., T],
    args: Sequence[tuple[Any, ...]],
    gate: threading.Event | None = None,
) -> list[T]:
    """``job(*a)`` for every ``a`` in ``args`` on the pool, within the phase budget; results in
    order. With a ``gate``, it is opened once every call is queued (the jobs wait on it)."""
    futures = [pool.submit(job, *a) for a in args]
    if gate is not None:
        gate.set()
    _, pending = wait(futures, timeout=PHASE_BUDGET)
    for future in pending:
        future.cancel()
    assert not pending, f"{len(pending)} of {len(futures)} requests did not finish in time"
    return [future.result() for future in futures]


def order_ids_of_buyers(rdb: redis.Redis | RedisCluster, key: str) -> dict[str, str]:
    """The buyers hash as user -> order id. A value may carry a marker after ``|`` (the orders
    worker notes a confirmed order there); order ids never contain ``|``."""
    return {str(uid): str(value).split("|", 1)[0] for uid, value in rdb.hgetall(key).items()}


def bearer(uid: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(uid, JWT_SECRET, ttl=600)}"}


def test_five_thousand_users_race_for_fifty_units(gateway: Gateway, rdb: redis.Redis) -> None:
    """5 000 users, 50 units over three activities (on a cluster: one per master), all at
    once: each activity sells exactly its stock to distinct users, and says so everywhere."""
    users, stocks = 5_000, (17, 17, 16)
    aids = gateway.activity_ids(len(stocks))
    for aid, stock in zip(aids, stocks, strict=True):
        gateway.create_activity(total=stock, aid=aid)
    uids = [f"racer{i:05d}" for i in range(users)]
    target = {uid: aids[i % len(aids)] for i, uid in enumerate(uids)}
    headers = {uid: bearer(uid) for uid in uids}
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
    headers = {uid: bearer(uid) for uid in uids}
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
    headers = bearer("flooder")
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
