"""The sold-out flag across real worker processes: gunicorn with two gevent workers.

Each worker learns "sold out" on its own (one purchase each goes to the script, the rest are
answered from the flag); when stock comes back, every worker sells again at once, through
pub/sub, long before its background check would (set to 60 s here).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import urllib3

from edge.identity import mint_user_token
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN, JWT_SECRET

TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)
# Each request on a connection of its own, so that the kernel hands it to either worker.
CLOSE = {"Connection": "close"}


class Gateway:
    def __init__(self, base: str, prefix: str, access_log: Path) -> None:
        self.base, self.prefix, self.access_log = base, prefix, access_log

    def log_lines(self) -> int:
        """How many lines the access log has now."""
        return len(self.access_log.read_text(encoding="utf-8").splitlines())

    def workers_that_answered(self, path: str, outcome: str, since: int = 0) -> set[str]:
        """The worker pids of the access log's lines for ``path`` with ``outcome`` (from line
        ``since`` on)."""
        lines = self.access_log.read_text(encoding="utf-8").splitlines()[since:]
        return {re.search(r"worker=<(\d+)>", line).group(1)  # type: ignore[union-attr]
                for line in lines if f" {path} " in line and f"outcome={outcome} " in line}


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Gateway]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    data = tmp_path_factory.mktemp("sold-out-workers")
    env = gateway_env(valkey.url, prefix, data, f"sqlite:///{data / 'orders.db'}", "50/second")
    env.update(SECKILL_SOLD_OUT_TTL="60", SECKILL_META_TTL="60",
               GUNICORN_ACCESSLOG=str(data / "access.log"))
    with gunicorn_server(env, workers=2) as base:
        yield Gateway(base, prefix, data / "access.log")


def call(base: str, method: str, path: str, headers: dict[str, str], body: Any = None
         ) -> tuple[int, dict[str, Any]]:
    response = urllib3.request(method, base + path, headers={**CLOSE, **headers},
                               body=None if body is None else orjson.dumps(body),
                               timeout=TIMEOUT, retries=False)
    return response.status, orjson.loads(response.data)


def bearer(uid: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(uid, JWT_SECRET, ttl=600)}"}


def evalsha_calls(rds: redis.Redis) -> int:
    return int(rds.info("commandstats")["cmdstat_evalsha"]["calls"])


def test_every_worker_flags_the_sell_out_and_sells_again_when_stock_returns(
        gateway: Gateway, rds: redis.Redis) -> None:
    base = gateway.base
    aid = f"w{uuid.uuid4().hex[:10]}"
    status, _ = call(base, "POST", "/admin/activities", {**ADMIN, "Content-Type":
                     "application/json"}, {"id": aid, "name": "x", "total": 1,
                                           "starts_at": iso(-60), "ends_at": iso(3600)})
    assert status == 201
    users = ["winner", *(f"late{i}" for i in range(MOST)), *(f"again{i}" for i in range(MOST))]
    urls = {}
    for uid in users:  # while in stock: from now on only purchases are sent
        status, got = call(base, "GET", f"/seckill/url?activity={aid}", bearer(uid))
        assert status == 200, got
        urls[uid] = got["url"]
    assert call(base, "POST", urls["winner"], bearer("winner"))[0] == 200

    # Late buyers, one at a time, each on a new connection, until both workers have answered
    # some (the kernel hands a connection to either). Each worker's first purchase goes to the
    # script and raises that worker's flag; every other is answered from a flag: two EVALSHAs
    # in all, one per worker.
    before = evalsha_calls(rds)
    for i in range(MOST):
        status, body = call(base, "POST", urls[f"late{i}"], bearer(f"late{i}"))
        assert (status, body["error"]) == (410, "sold_out")
        if len(answered(gateway, "sold_out", urls, "late", i)) == 2:
            break
    assert len(answered(gateway, "sold_out", urls, "late", i)) == 2, "one worker got them all"
    assert evalsha_calls(rds) - before == 2

    status, body = call(base, "POST", f"/admin/activities/{aid}/stock",
                        {**ADMIN, "Content-Type": "application/json"}, {"add": MOST})
    assert (status, body["remaining"]) == (200, MOST)
    time.sleep(0.5)  # the pub/sub message reaches the other worker
    # Both workers dropped their flags: no purchase is refused while stock lasts, until both
    # have sold (with a flag left in one worker, its answers would be 410 for the next 60 s).
    for i in range(MOST):
        status, body = call(base, "POST", urls[f"again{i}"], bearer(f"again{i}"))
        assert status == 200, body
        if len(answered(gateway, "ok", urls, "again", i)) == 2:
            break
    assert len(answered(gateway, "ok", urls, "again", i)) == 2, "one worker got them all"


MOST = 150  # requests per phase at most; both workers have taken part long before


def answered(gateway: Gateway, outcome: str, urls: dict[str, str], who: str, upto: int
             ) -> set[str]:
    """The workers that answered the purchases of users ``<who>0`` .. ``<who><upto>``."""
    pids: set[str] = set()
    for i in range(upto + 1):
        pids |= gateway.workers_that_answered(urls[f"{who}{i}"], outcome)
    return pids


def test_every_worker_sells_again_when_an_unpaid_hold_expires(
        gateway: Gateway, rds: redis.Redis, tmp_path: Path) -> None:
    """The last unit bought with a payment window (the worker that sold it copies remaining
    0; no purchase ever heard "sold out", so no flag was raised anywhere), then left unpaid:
    once the expiry returns it, every worker hands out purchase URLs again at once, not after
    its next refresh of the copy (60 s here). Seen failing: the selling worker kept answering
    410 from its copy, as it was not listening for returned units."""
    from seckill.sql.book import OrderBook
    from seckill.sql.engine import make_engine
    from seckill.store.plumbing.keys import KeySpace
    from seckill.worker.expiry import Expirer

    base = gateway.base
    aid = f"p{uuid.uuid4().hex[:10]}"
    status, _ = call(base, "POST", "/admin/activities", {**ADMIN, "Content-Type":
                     "application/json"}, {"id": aid, "name": "x", "total": 1,
                                           "payment_window": 1, "starts_at": iso(-60),
                                           "ends_at": iso(3600)})
    assert status == 201
    status, got = call(base, "GET", f"/seckill/url?activity={aid}", bearer("holder"))
    assert status == 200, got
    status, bought = call(base, "POST", got["url"], bearer("holder"))
    assert status == 200, bought
    time.sleep(max(0.0, bought["pay_by"] / 1000 - time.time()) + 0.05)
    book = OrderBook(make_engine(f"sqlite:///{tmp_path / 'unused.db'}"))
    expirer = Expirer(rds, KeySpace(gateway.prefix), book)
    assert expirer.expire(aid, 1) == (1, 1)
    time.sleep(0.5)  # the pub/sub message reaches the workers
    pids: set[str] = set()
    since = gateway.log_lines()
    for i in range(MOST):
        path = f"/seckill/url?activity={aid}"
        status, got = call(base, "GET", path, bearer(f"next{i}"))
        assert status == 200, got
        pids |= gateway.workers_that_answered(path, "ok", since)
        if len(pids) == 2:
            break
    assert len(pids) == 2, "one worker got them all"
