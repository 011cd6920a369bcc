"""Per-user rate limit: flask-limiter on Redis, keyed by the authenticated user id.

Two flask-limiter traps, and how they are avoided here:

* A limit whose key function returns an empty string is *skipped* (logged, not enforced).
  The key function is :func:`edge.current_uid`, which raises instead of returning "". The
  limit is attached to each view with a decorator, and the limited views all carry the
  ``user`` filter, so identity has always run first (a test checks this wiring).
* Default and blueprint limits run in flask-limiter's own ``before_request``, before a
  blueprint's ``before_request`` could have authenticated the user. None are used: the limit
  wraps the view, so it runs after every edge ``before_request`` hook.

Failure behaviour (written down, as the design asks): when the limiter's Redis cannot be
reached the limit **fails open** (``swallow_errors``), and every such request is counted in
``seckill_ratelimit_failures_total``. Rate limiting protects capacity, not correctness: the
purchase itself needs the same Redis and fails closed (503) on its own.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any, cast

import redis
from flask import Flask, current_app
from flask_limiter import Limiter, RateLimitExceeded

from edge import current_uid
from seckill import errors, metrics


class _CountSwallowedErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to rate limit"):
            metrics.RATELIMIT_FAILURES.inc()
        return True


_counting_filter = _CountSwallowedErrors()


def _user_rate() -> str:
    rate: str = current_app.extensions["seckill"].settings.user_rate
    return rate


class UserRateLimit:
    def __init__(self) -> None:
        self.limiter: Limiter | None = None

    def init_app(self, app: Flask, pool: redis.ConnectionPool, key_prefix: str) -> None:
        self.limiter = Limiter(
            key_func=current_uid,
            storage_uri="redis://",  # the pool below decides where; the scheme picks the class
            storage_options=cast(dict[str, Any], {"connection_pool": pool}),
            strategy="fixed-window",
            key_prefix=key_prefix,
            swallow_errors=True,
            headers_enabled=False,
        )
        self.limiter.init_app(app)
        logger = logging.getLogger("flask-limiter")
        if _counting_filter not in logger.filters:
            logger.addFilter(_counting_filter)
        app.extensions["edge.user_rate_limit"] = self

    def limit(self) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator for a view that a user may call only ``SECKILL_USER_RATE`` times."""
        if self.limiter is None:
            raise RuntimeError("UserRateLimit.init_app must run before views are limited")
        limited = self.limiter.limit(_user_rate, key_func=current_uid)

        def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
            inner = limited(view)

            @functools.wraps(view)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                # flask-limiter swallows a key function's error (swallow_errors) and would let
                # the request through unlimited: check for the user *before* it runs, so a
                # wiring mistake fails closed (500) instead of open.
                current_uid()
                return inner(*args, **kwargs)

            return guarded

        return decorate


def rate_limited(exc: RateLimitExceeded) -> errors.RateLimited:
    """Turn flask-limiter's exception into the contract's 429 body with ``Retry-After``.

    Retry-After is the limit's window (a fixed window resets within it), known without
    another Redis round trip.
    """
    window = exc.limit.limit.get_expiry() if exc.limit is not None else 1
    return errors.RateLimited(retry_after=max(1, math.ceil(window)))
