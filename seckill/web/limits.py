"""Per-user limits of the cold routes (order status; operator calls), with flask-limiter.

The cold routes go through Flask anyway, so flask-limiter's hooks cost them little; the hot
routes count their limit in one Lua call instead (``edge.ratelimit``; why: docs/architecture.md,
"Dependencies, each with a job"). The counters live in the gateway's own Redis, through the
gateway's own connection pool (same timeouts, no retries), under ``<prefix>:rate``; on a
cluster, through a cluster client of the limiter's own with the same options (limits'
``redis+cluster``).

Two of flask-limiter's defaults are traps for a gateway, and are closed here: a key function
that returns "" skips the limit (ours never can: the edge has verified the caller before the
limiter runs, and a view without a caller has no limit), and ``swallow_errors`` would also
let a bug in a key function through unlimited. Instead, only a storage failure fails open,
counted in ``seckill_ratelimit_failures_total``, as for the hot routes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis
from flask import Blueprint, Flask, Response
from flask_limiter import Limiter, RateLimitExceeded
from redis.exceptions import RedisClusterException

from edge.views import passage
from seckill import metrics
from seckill.config import Settings
from seckill.domain import errors
from seckill.store.plumbing.connection import (
    Client,
    close_client,
    is_cluster_client,
    node_urls,
)
from seckill.web.errors import error_response

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., object])


class _FailOpenLimiter(Limiter):
    """flask-limiter whose storage failures let the request through, counted."""

    def _check_request_limit(self, callable_name: str | None = None,
                             in_middleware: bool = True) -> None:
        try:
            super()._check_request_limit(callable_name, in_middleware)
        except (redis.RedisError, RedisClusterException) as exc:  # the latter: no node answers
            metrics.RATELIMIT_FAILURES.inc()
            log.warning("cold-route rate limit not checked (fails open): %s", exc)


def _user_key() -> str:
    return "user:" + passage().require_uid()


def _operator_key() -> str:
    return "operator"


class ColdLimits:
    """The cold routes' limits: ``SECKILL_STATUS_RATE`` per user, ``SECKILL_ADMIN_RATE`` for
    the operator."""

    def __init__(self, settings: Settings, client: Client) -> None:
        self.settings = settings
        uri, options = _storage(settings, client)
        self.limiter = _FailOpenLimiter(
            key_func=_operator_key,
            storage_uri=uri,
            storage_options=options,
            strategy="fixed-window",
            swallow_errors=False,
            headers_enabled=False,
        )

    def close(self) -> None:
        """Close the cluster client the limiter made for itself (nothing on one server)."""
        storage: Any = self.limiter._storage
        if is_cluster_client(getattr(storage, "storage", None)):
            close_client(storage.storage)

    def init_app(self, app: Flask) -> None:
        """Register after the edge: the limiter's hook then runs once the caller is known."""
        app.extensions["seckill.cold_limits"] = self
        self.limiter.init_app(app)
        app.register_error_handler(RateLimitExceeded, self._refused)

    def per_user(self, view: F) -> F:
        """Limit a user view (one marked with the user filter) per user."""
        return cast(F, self.limiter.limit(self.settings.status_rate, key_func=_user_key)(view))

    def operator(self, blueprint: Blueprint) -> None:
        """Count every route of an operator's blueprint on the operator's one budget."""
        self._operator_budget()(blueprint)

    def operator_call(self, view: F) -> F:
        """Count one operator view on that same budget: for a blueprint whose other routes
        (the sale-day levers) stay outside it."""
        return cast(F, self._operator_budget()(view))

    def _operator_budget(self) -> Any:
        # One scope for every counted route, blueprint or view: one counter, one budget.
        return self.limiter.shared_limit(self.settings.admin_rate, scope="operator",
                                         key_func=_operator_key)

    def _refused(self, exc: RateLimitExceeded) -> Response:
        limit = self.limiter.current_limit
        wait_ms = 1000.0 if limit is None else (limit.window[0] - time.time()) * 1000
        return error_response(errors.RateLimited.after_ms(wait_ms))


def _storage(settings: Settings, client: Client) -> tuple[str, dict[str, Any]]:
    """limits' storage URI and options: the gateway's pool, or a cluster client like it."""
    options: dict[str, Any] = {"key_prefix": f"{settings.key_prefix}:rate"}
    if not is_cluster_client(client):
        return "redis://", {**options, "connection_pool": client.connection_pool}
    urls = [urlsplit(url) for url in node_urls(settings.redis_url)]
    if urls[0].scheme == "rediss":
        options["ssl"] = True
    cluster = {k: v for k, v in client.options.items()
               if k in ("retry", "socket_timeout", "socket_connect_timeout")}
    # limits' form: the first node's credentials, then every node's host:port.
    nodes = ",".join([urls[0].netloc, *(f"{u.hostname}:{u.port or 6379}" for u in urls[1:])])
    return f"redis+cluster://{nodes}", {**options, **cluster}
