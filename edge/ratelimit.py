"""Per-user rate limit on Redis, keyed by the authenticated user id.

The limit is a check in the edge chain, after identity (so it always has its key) and after
every check that needs no Redis (so the requests those reject cost nothing here). It is the
fixed-window strategy of ``limits``, the library flask-limiter is built on, with the same rate
syntax (``SECKILL_USER_RATE``, e.g. ``5/second``) and the same scope (per user, per endpoint),
on the gateway's own Redis pool: one EVALSHA (INCR + EXPIRE) per checked request.

Why not flask-limiter's extension itself (it was used until the performance work): its
``before_request`` middleware runs on *every* request, limited or not, and its decorator then
evaluates the view's limits a second time; on this 2-core machine that machinery cost more CPU
than the Redis call it wraps (figures in the README's Performance section). It also has two
traps a gateway must not fall into: a limit whose key function returns "" is silently
skipped, and with ``swallow_errors`` an exception in the key function lets the request through
unlimited. Here the key is the verified user id (``Passage.require_uid`` raises without one,
and a view cannot ask for ``rate`` without ``user``), and storage errors are handled below.

Failure behaviour (written down, as the design asks): when the limiter's Redis cannot be
reached the limit **fails open**, and every such request is counted in
``seckill_ratelimit_failures_total``. Rate limiting protects capacity, not correctness: the
purchase itself needs the same Redis and fails closed (503) on its own.
"""

from __future__ import annotations

import logging
import math

import redis
from flask import Flask
from limits import RateLimitItem, parse_many
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter

from edge import RATE, Edge, Passage
from seckill import errors, metrics

log = logging.getLogger("seckill.ratelimit")


class UserRateLimit:
    def __init__(self) -> None:
        self.strategy: FixedWindowRateLimiter | None = None
        self.items: list[RateLimitItem] = []

    def init_app(self, app: Flask, pool: redis.ConnectionPool, key_prefix: str, rate: str) -> None:
        storage = RedisStorage("redis://", connection_pool=pool, key_prefix=key_prefix)
        self.strategy = FixedWindowRateLimiter(storage)
        self.items = parse_many(rate)  # one EVALSHA each; the default is a single rate
        app.extensions["edge.user_rate_limit"] = self
        Edge.of(app).add({RATE}, self.check)

    def check(self, passage: Passage) -> None:
        assert self.strategy is not None
        uid = passage.require_uid()
        endpoint = passage.endpoint
        for item in self.items:
            try:
                # Per user and per endpoint: a buyer's URL requests and purchases count apart.
                allowed = self.strategy.hit(item, "user", uid, endpoint)
            except redis.RedisError as exc:
                metrics.RATELIMIT_FAILURES.inc()
                log.warning("rate limit not checked for %s (fails open): %s", uid, exc)
                return
            if not allowed:
                # A fixed window resets within its length: an upper bound known without Redis.
                raise errors.RateLimited(retry_after=max(1, math.ceil(item.get_expiry())))
