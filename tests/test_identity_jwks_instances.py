"""The identity provider's keys across real gateway processes: gunicorn with two gevent workers,
each fetching the provider's JWKS (a real server, tests/support/jwks_server.py) for itself.

A key added mid-sale verifies in every worker within one refresh, a key removed stops in every
worker after the next refresh (tokens they remember included), and a gateway restarted while
the provider is down verifies with the set its predecessor saved in Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.jwks_server import JwksServer, SigningKey, idp_claims, issuer_env
from tests.support.servers import gunicorn_server
from tests.support.timing import iso, wait_until
from tests.support.tokens import ADMIN

TIMEOUT = urllib3.Timeout(connect=5.0, read=10.0)
WORKERS = 2


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pool = urllib3.PoolManager(maxsize=8)
    yield pool
    pool.clear()


@pytest.fixture
def env(valkey: EmbeddedValkey, tmp_path: Path) -> dict[str, str]:
    return gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", tmp_path / "data",
                       f"sqlite:///{tmp_path / 'orders.db'}", "1000000/second")


def call(http: urllib3.PoolManager, method: str, url: str, token: str | None = None,
         body: Any = None) -> tuple[int, str]:
    """The status and the answering worker (X-Seckill-Instance: host and PID) of a request on
    a connection of its own, so that requests spread over the workers."""
    headers = {"Connection": "close", **(ADMIN if token is None else
                                         {"Authorization": f"Bearer {token}"})}
    response = http.request(method, url, headers=headers, timeout=TIMEOUT, retries=False,
                            body=None if body is None else orjson.dumps(body))
    return response.status, response.headers["X-Seckill-Instance"]


def answers(http: urllib3.PoolManager, base: str, aid: str, token: str, n: int = 24
            ) -> dict[int, set[str]]:
    """status -> the workers that answered it, over ``n`` order-status requests."""
    found: dict[int, set[str]] = {}
    for _ in range(n):
        status, worker = call(http, "GET", f"{base}/seckill/{aid}/order", token)
        found.setdefault(status, set()).add(worker)
    return found


def every_worker(http: urllib3.PoolManager, base: str, aid: str, token: str,
                 status: int) -> bool:
    """Whether ``token`` got ``status`` from every worker, and nothing else from any."""
    found = answers(http, base, aid, token)
    return set(found) == {status} and len(found[status]) == WORKERS


def activity(http: urllib3.PoolManager, base: str) -> str:
    aid = f"a{uuid.uuid4().hex[:10]}"
    body = {"id": aid, "name": "Phone", "total": 100, "starts_at": iso(-60),
            "ends_at": iso(3600)}
    assert call(http, "POST", f"{base}/admin/activities", body=body)[0] == 201
    return aid


def test_keys_rotated_mid_sale_reach_every_worker(http, env):
    old, new = SigningKey.make("RS256"), SigningKey.make("ES256")
    with JwksServer(cache_control="public, max-age=1") as idp:
        idp.publish(old)
        settings = {**env, **issuer_env(idp.url, SECKILL_JWT_JWKS_REFRESH_MIN="1")}
        with gunicorn_server(settings, workers=WORKERS) as base:
            aid = activity(http, base)
            remembered = old.token(idp_claims("mid-sale"))
            wait_until(lambda: every_worker(http, base, aid, remembered, 200), timeout=10,
                       what="the old key's token verified by every worker")

            idp.publish(old, new)
            added = new.token(idp_claims("after"))
            wait_until(lambda: every_worker(http, base, aid, added, 200), timeout=4,
                       what="the new key's token verified by every worker")

            idp.publish(new)
            # Every worker remembers this token (it verified it above): it is refused anyway.
            wait_until(lambda: every_worker(http, base, aid, remembered, 401), timeout=4,
                       what="the removed key's token refused by every worker")
            wait_until(lambda: every_worker(http, base, aid, added, 200), timeout=4,
                       what="the new key's token still verified by every worker")


def test_a_gateway_restarted_while_the_provider_is_down(http, env):
    key = SigningKey.make("EdDSA")
    token = key.token(idp_claims("buyer"))
    with JwksServer() as idp:
        idp.publish(key)
        settings = {**env, **issuer_env(idp.url)}
        with gunicorn_server(settings, workers=WORKERS) as base:
            aid = activity(http, base)
            wait_until(lambda: every_worker(http, base, aid, token, 200), timeout=10,
                       what="every worker fetched the set")
        idp.stop()
        with gunicorn_server(settings, workers=WORKERS) as base:
            wait_until(lambda: every_worker(http, base, aid, token, 200), timeout=4,
                       what="every restarted worker verifying with the saved set")
            url = f"{base}/seckill/url?activity={aid}"
            assert call(http, "GET", url, token)[0] == 200
