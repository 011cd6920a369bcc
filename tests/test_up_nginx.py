"""``seckill up`` in its production shape: nginx in front of several gunicorn instances.

Real processes throughout: the supervisor, the embedded Valkey, the orders worker, the gunicorn
instances and nginx. One instance is frozen and killed mid-sale; a crowd of 20 000 users goes
through nginx for 20 units.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
import redis
import urllib3

from seckill.ops.stack import nginx
from seckill.ops.stack.ports import free_listen_port
from tests.support.cli import (
    alive,
    call,
    seckill_process,
    seckill_up,
    stop_and_check_nothing_is_left,
)
from tests.support.servers import require_nginx
from tests.support.tokens import ADMIN
from tests.support.upstack import UpStack, running_up, up_env, user_token

TIMEOUT = urllib3.Timeout(connect=5.0, read=20.0)


def request(http: urllib3.PoolManager, method: str, url: str, token: str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    response = http.request(method, url, headers=all_headers, timeout=TIMEOUT, retries=False)
    body = orjson.loads(response.data) if response.headers.get(
        "Content-Type", "").startswith("application/json") else None
    return response.status, body, response.headers



def test_up_puts_nginx_in_front_and_stops_clean(world_readable_tmp: Path) -> None:
    with running_up(world_readable_tmp, "--instances", "2", "--workers", "1") as stack:
        text = stack.text()
        assert "nginx in front of 2 gunicorn instance(s), 1 gevent worker(s) each; " \
               "per-IP rate 20r/s" in text, text
        masters = stack.instances()
        assert set(masters) == {"gunicorn-1", "gunicorn-2"}, text
        for name, master in masters.items():
            environ = master.environ()
            assert (environ["SECKILL_INSTANCE"], environ["SECKILL_BEHIND_PROXY"],
                    environ["GUNICORN_WORKERS"]) == (name, "1", "1")
            listening = {c.laddr for c in master.net_connections("tcp")
                         if c.status == psutil.CONN_LISTEN}
            assert {addr.ip for addr in listening} == {"127.0.0.1"}, listening  # nginx only
        front = stack.nginx()
        assert front is not None, text

        # nginx's workers run as the account the rendered config says, and can do their job
        # (read the page, write the micro-cache) as that account.
        conf = stack.data / "nginx" / "nginx.conf"
        user, _ = nginx.worker_user(nginx.default_static_root(), stack.data / "nginx")
        assert ("user root;" in conf.read_text()) == (user == "root")
        if os.geteuid() == 0:
            workers = {p.username() for p in front.children()}
            assert workers == {user or "nobody"}, workers

        http = urllib3.PoolManager(maxsize=4)
        seen: collections.Counter[str] = collections.Counter()
        for _ in range(10):
            status, _body, headers = request(http, "GET", f"{stack.base}/seckill/time")
            assert status == 200
            seen[headers["X-Seckill-Instance"]] += 1
        assert set(seen) == {"gunicorn-1", "gunicorn-2"}, seen
        page = http.request("GET", f"{stack.base}/", timeout=TIMEOUT)
        assert page.status == 200 and b"sale.js" in page.data

        # Operators: only on the loopback admin port.
        admin = ADMIN["Authorization"].removeprefix("Bearer ")
        body = {"id": "front-phone", "name": "Phone", "total": 3,
                "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}
        assert call(stack.port, "POST", "/admin/activities", admin, body) == (
            404, {"error": "not_found", "message": "no such resource"})
        assert call(stack.admin_port, "POST", "/admin/activities", admin, body)[0] == 201
        url = f"{stack.base}/seckill/activities/front-phone"
        assert request(http, "GET", url)[2]["X-Cache"] == "MISS"
        assert request(http, "GET", url)[2]["X-Cache"] == "HIT"

        # The default per-IP rate (20r/s, burst 40) answers a burst with JSON 429s.
        statuses: collections.Counter[int] = collections.Counter()
        for _ in range(90):
            status, body_429, headers = request(http, "GET", f"{stack.base}/seckill/time")
            statuses[status] += 1
            if status == 429:
                assert body_429["error"] == "rate_limited" and headers["Retry-After"] == "1"
        assert statuses[429] >= 20 and statuses[200] >= 10, statuses  # burst 40, 13 used
        http.clear()

        # kill -9 nginx's master: its workers (still holding the ports) go with the process
        # group, and the supervisor starts nginx again on the same ports.
        stack.remember_processes()
        old_workers = front.children()
        assert old_workers
        front.kill()
        deadline = time.monotonic() + 30
        while "nginx restarted" not in stack.text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert re.search(r"nginx \(pid \d+\) exited with code -9 .*restarting", stack.text())
        assert "nginx restarted" in stack.text(), stack.text()
        assert not [p.pid for p in old_workers if alive(p)]
        restarted = stack.nginx()
        assert restarted is not None and restarted.pid != front.pid
        time.sleep(1.1)  # the per-IP bucket refills
        assert call(stack.port, "GET", "/seckill/time")[0] == 200

        stack.remember_processes()
        stop_and_check_nothing_is_left(stack.process, stack.log, stack.seen)
        text = stack.text()
        order = [text.index(f"{name} stopped") for name in
                 ("nginx", "gunicorn-2", "gunicorn-1", "orders-worker", "valkey")]
        assert order == sorted(order), text


def test_without_nginx_up_says_how_to_install_it_and_serves_directly(tmp_path: Path) -> None:
    """nginx missing (here: SECKILL_NGINX names no file): one gunicorn on --port, operator
    endpoints included, and a log line saying how to install nginx."""
    env = up_env(tmp_path / "data", SECKILL_NGINX=str(tmp_path / "no-such-nginx"))
    with seckill_up(tmp_path, env, "--instances", "3") as (up, port, log, seen):
        text = log.read_text()
        assert "apt-get install nginx" in text, text
        assert "gunicorn directly" in text, text
        admin = ADMIN["Authorization"].removeprefix("Bearer ")
        body = {"id": "direct", "name": "Phone", "total": 3, "starts_at": "2020-01-01T00:00:00Z",
                "ends_at": "2099-01-01T00:00:00Z"}
        assert call(port, "POST", "/admin/activities", admin, body)[0] == 201
        names = [" ".join(p.cmdline()) for p in psutil.Process(up.pid).children()]
        assert sum("gunicorn" in n for n in names) == 1 and not any("nginx" in n for n in names)
        stop_and_check_nothing_is_left(up, log, seen)


def test_up_refuses_a_taken_admin_port(tmp_path: Path) -> None:
    require_nginx()
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port = free_listen_port()
        while port == busy:
            port = free_listen_port()
        result = seckill_process("up", "--port", str(port), "--admin-port", str(busy),
                                 env=up_env(tmp_path / "data"))
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{busy}" in result.stderr


# -- one stack for the sale tests: per-IP limit off (the crowd comes from one address) ------


@pytest.fixture(scope="module")
def sale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    tmp = tmp_path_factory.mktemp("up-sale")
    with running_up(tmp, "--instances", "2", "--workers", "1", "--ip-rate", "off") as stack:
        yield stack


@pytest.fixture(scope="module")
def sale_redis(sale: UpStack) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(sale.redis_url(), decode_responses=True)
    yield conn
    conn.close()


def buyers(rdb: redis.Redis, aid: str) -> set[str]:
    return {str(uid) for uid in rdb.hkeys(f"seckill:{{{aid}}}:buyers")}


def stats(stack: UpStack, aid: str) -> dict[str, Any]:
    admin = ADMIN["Authorization"].removeprefix("Bearer ")
    status, body = call(stack.admin_port, "GET", f"/admin/activities/{aid}/stats", admin)
    assert status == 200, body
    return dict(body)


def test_killing_an_instance_mid_sale(sale: UpStack, sale_redis: redis.Redis) -> None:
    """gunicorn-1 hangs (SIGSTOP) with purchases and GETs in flight, then dies (SIGKILL).
    GETs all succeed (nginx moves them to gunicorn-2); purchases that reached gunicorn-1 fail
    with a JSON 502 and are not resent; none is decided twice; a user whose purchase failed
    can buy afterwards; the supervisor restarts gunicorn-1 and traffic returns to it."""
    aid = sale.create_activity(total=1000)
    users = [f"inflight{i:03d}" for i in range(60)]
    tokens = {uid: user_token(uid) for uid in users}
    http = urllib3.PoolManager(maxsize=64, block=True)
    urls = {}
    for uid in users:
        status, body, _ = request(http, "GET", f"{sale.base}/seckill/url?activity={aid}",
                                  tokens[uid])
        assert status == 200, body
        urls[uid] = body["url"]

    victim = sale.instances()["gunicorn-1"]
    victims = [*victim.children(recursive=True), victim]
    for process in victims:
        process.suspend()  # SIGSTOP: it accepts connections (the kernel does) but answers none
    with ThreadPoolExecutor(64) as pool:
        buys = {uid: pool.submit(request, http, "POST", f"{sale.base}{urls[uid]}", tokens[uid])
                for uid in users}
        gets = [pool.submit(request, http, "GET", f"{sale.base}/seckill/time")
                for _ in range(60)]
        time.sleep(1.5)  # requests reach the hung instance and wait there
        for process in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        _, pending = wait([*buys.values(), *gets], timeout=60)
        assert not pending, f"{len(pending)} requests did not finish"

    assert collections.Counter(f.result()[0] for f in gets) == {200: 60}
    answers = {uid: future.result() for uid, future in buys.items()}
    outcomes = collections.Counter(status for status, _, _ in answers.values())
    assert set(outcomes) <= {200, 502} and outcomes[502] >= 1, outcomes
    for status, body, headers in answers.values():
        if status == 502:
            assert headers["Content-Type"] == "application/json"
            assert body["error"] == "bad_gateway", body
    won = {uid for uid, (status, _, _) in answers.items() if status == 200}
    failed = set(users) - won
    # Exactly the answered purchases were decided: none lost after a 200, none decided
    # behind a 502, none twice (one buyer entry and one unit per order).
    assert buyers(sale_redis, aid) == won
    numbers = stats(sale, aid)
    assert (numbers["sold"], numbers["buyers"]) == (len(won), len(won)), numbers

    # The supervisor saw it and started gunicorn-1 again.
    deadline = time.monotonic() + 40
    while "gunicorn-1 restarted" not in sale.text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert re.search(r"gunicorn-1 \(pid \d+\) exited with code -9 .*restarting", sale.text())
    assert "gunicorn-1 restarted" in sale.text(), sale.text()
    assert sale.instances()["gunicorn-1"].pid != victim.pid
    sale.remember_processes()

    # Those whose purchase failed learn it from their order status, and can buy now: once.
    for uid in failed:
        status, body, _ = request(http, "GET", f"{sale.base}/seckill/{aid}/order", tokens[uid])
        assert (status, body) == (200, {"status": "none"})
        status, issued, _ = request(http, "GET", f"{sale.base}/seckill/url?activity={aid}",
                                    tokens[uid])
        assert status == 200, issued
        status, bought, _ = request(http, "POST", f"{sale.base}{issued['url']}", tokens[uid])
        assert status == 200, bought
    assert buyers(sale_redis, aid) == set(users)
    # The orders worker stores each once (the database's unique (activity, user) agrees).
    deadline = time.monotonic() + 30
    while (numbers := stats(sale, aid))["orders"]["confirmed"] < len(users):
        assert time.monotonic() < deadline, numbers
        time.sleep(0.2)
    assert (numbers["sold"], numbers["orders"]["pending"]) == (len(users), 0), numbers

    # Traffic returns to gunicorn-1 (nginx tries it again after fail_timeout, 2 s).
    fresh = urllib3.PoolManager(maxsize=1)
    deadline = time.monotonic() + 30
    served_by: set[str] = set()
    while "gunicorn-1" not in served_by and time.monotonic() < deadline:
        served_by.add(request(fresh, "GET", f"{sale.base}/seckill/time")[2]["X-Seckill-Instance"])
        time.sleep(0.05)
    assert "gunicorn-1" in served_by, served_by
    http.clear()
    fresh.clear()


CROWD = 20_000
STOCK = 20
CROWD_THREADS = 64
CROWD_BUDGET = 300.0  # seconds; a hang fails instead of blocking CI


def test_a_crowd_of_20000_through_nginx_buys_exactly_20(
    sale: UpStack, sale_redis: redis.Redis
) -> None:
    aid = sale.create_activity(total=STOCK)
    started = time.monotonic()
    tokens = [user_token(f"crowd{i:05d}") for i in range(CROWD)]
    minted = time.monotonic()
    http = urllib3.PoolManager(maxsize=CROWD_THREADS, block=True)

    def attempt(i: int) -> tuple[str, int, str | None, str | None]:
        status, body, _ = request(http, "GET", f"{sale.base}/seckill/url?activity={aid}",
                                  tokens[i])
        if status != 200:
            return "url", status, (body or {}).get("error"), None
        status, body, _ = request(http, "POST", f"{sale.base}{body['url']}", tokens[i])
        return "buy", status, (body or {}).get("error"), (body or {}).get("order_id")

    with ThreadPoolExecutor(CROWD_THREADS) as pool:
        futures = [pool.submit(attempt, i) for i in range(CROWD)]
        _, pending = wait(futures, timeout=CROWD_BUDGET)
        for future in pending:
            future.cancel()
        assert not pending, f"{len(pending)} of {CROWD} users unfinished in {CROWD_BUDGET}s"
    done = time.monotonic()
    http.clear()

    results = [future.result() for future in futures]
    kinds = collections.Counter((step, status, error) for step, status, error, _ in results)
    winners = [(i, order) for i, (step, status, _, order) in enumerate(results)
               if (step, status) == ("buy", 200)]
    assert len(winners) == STOCK, kinds
    assert set(kinds) <= {("buy", 200, None), ("url", 410, "sold_out"), ("buy", 410, "sold_out")}, (
        kinds)
    assert len({order for _, order in winners}) == STOCK
    assert buyers(sale_redis, aid) == {f"crowd{i:05d}" for i, _ in winners}

    # ... and the orders worker stores exactly those 20 in the database.
    deadline = time.monotonic() + 30
    while (numbers := stats(sale, aid))["orders"]["confirmed"] < STOCK:
        assert time.monotonic() < deadline, numbers
        time.sleep(0.2)
    assert (numbers["sold"], numbers["remaining"], numbers["buyers"]) == (STOCK, 0, STOCK)
    assert numbers["orders"] == {"pending": 0, "confirmed": STOCK, "cancelled": 0}
    requests_made = sum(1 if step == "url" else 2 for step, *_ in results)
    print(
        f"\ncrowd through nginx: {CROWD} users ({requests_made} requests, "
        f"{CROWD_THREADS} client threads), {STOCK} units: tokens minted in "
        f"{minted - started:.1f}s, sale over in {done - minted:.1f}s "
        f"({requests_made / (done - minted):.0f} requests/s); {dict(kinds)}"
    )

