"""The suite's secrets, and the ``Authorization`` headers they make: a buyer's, the operator's
and the metrics scraper's. The gateways the tests start run with these secrets
(tests/support/gateway.py), so a test sends what a real client would."""

from __future__ import annotations

from edge.identity import mint_user_token

JWT_SECRET = "test-jwt-secret-0123456789abcdef0123456789"
URL_KEY = "test-url-key-0123456789abcdef0123456789abcd"
ADMIN_TOKEN = "test-admin-token-0123456789"
METRICS_TOKEN = "test-metrics-token-0123456789"  # SECKILL_METRICS_TOKEN: scrapes only

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
METRICS = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # what Prometheus sends


def user_headers(uid: str, secret: str = JWT_SECRET, ttl: int = 600) -> dict[str, str]:
    """The headers of a buyer ``uid``: a bearer token signed with ``secret``, ``ttl`` seconds."""
    return {"Authorization": f"Bearer {mint_user_token(uid, secret, ttl)}"}
