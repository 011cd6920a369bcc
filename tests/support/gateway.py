"""The gateway as the tests build it: a production environment on the test's servers with the
suite's secrets (:func:`gateway_env`, for in-process apps and for gunicorn alike), and an app
whose test clients check every answer against the OpenAPI document (:func:`checked_app`)."""

from __future__ import annotations

from pathlib import Path

from flask import Flask

from seckill.config import Settings
from seckill.web.app import create_app
from tests.support.openapi_check import CheckedClient
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, URL_KEY


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


def checked_app(settings: Settings) -> Flask:
    """An app on ``settings`` for tests: TESTING on, its test clients checking every answer."""
    application = create_app(settings)
    application.config["TESTING"] = True
    application.test_client_class = CheckedClient
    return application
