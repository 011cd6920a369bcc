"""Per-user rate limit on Redis, keyed by the authenticated user id.

The limit is a check in the edge chain, after identity (so it always has its key) and after
every check that needs no Redis (so the requests those reject cost nothing here). Fixed
windows, in the rate syntax of ``limits``/flask-limiter (``SECKILL_USER_RATE``, e.g.
``5/second``, parsed by ``limits``), per user and per endpoint, counted by ``lua/rate_limit.lua``
(INCR, PEXPIRE on the first hit, PTTL when over) in **one** round trip for all the rates, on
the purchase lane's own connections (``seckill.store.Wire``). The purchase counts the same
limit inside its own script (``lua/include/rate_limit.lua``, shared).

Why not flask-limiter's extension (used until the performance work): its ``before_request``
middleware runs on *every* request, limited or not, and its decorator then evaluates the
view's limits a second time; on this 2-core machine that machinery cost more CPU than the
Redis call it wraps. Why not ``limits``' own ``FixedWindowRateLimiter`` (used next): one
round trip per rate through redis-py's ``Script`` and pool, ~23% of a URL issuance's CPU in
``python -m bench.profile --workload url``; the ``Wire`` costs half as much per call
(``python -m bench.wire``). flask-limiter's extension also has two traps a gateway must not
fall into: a limit whose key function returns "" is silently skipped, and with
``swallow_errors`` an exception in the key function lets the request through unlimited. Here
the key is the verified user id (``Passage.require_uid`` raises without one, and a view cannot
ask for ``rate`` without ``user``), and storage errors are handled below.

Failure behaviour (written down, as the design asks): when the limiter's Redis cannot be
reached the limit **fails open**, and every such request is counted in
``seckill_ratelimit_failures_total``. Rate limiting protects capacity, not correctness: the
purchase itself needs the same Redis and fails closed (503) on its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import redis
from flask import Flask
from limits import parse_many

from edge import RATE, Edge, Passage
from seckill import metrics
from seckill.domain import errors

log = logging.getLogger("seckill.ratelimit")


class UserRateLimit:
    def __init__(self) -> None:
        self.rates: list[tuple[int, int]] = []  # (limit, window ms)
        self.wire: Any = None  # seckill.store.Wire
        self.script: Any = None  # redis-py Script of lua/rate_limit.lua (sha, source)
        self.key: Callable[[str, str, int], str] = lambda uid, endpoint, window: ""

    def init_app(self, app: Flask, wire: Any, script: Any,
                 key: Callable[[str, str, int], str], rate: str) -> None:
        self.rates = [(item.amount, item.get_expiry() * 1000) for item in parse_many(rate)]
        self.wire, self.script, self.key = wire, script, key
        app.extensions["edge.user_rate_limit"] = self
        Edge.of(app).add({RATE}, self.check)

    def check(self, passage: Passage) -> None:
        uid = passage.require_uid()
        # Per user and per endpoint: a buyer's URL requests and purchases count apart.
        keys = [self.key(uid, passage.endpoint, window) for _, window in self.rates]
        args = [n for rate in self.rates for n in rate]
        try:
            reply = self.wire.run_script(self.script, keys, args)[0]
        except redis.RedisError as exc:
            metrics.RATELIMIT_FAILURES.inc()
            log.warning("rate limit not checked for %s (fails open): %s", uid, exc)
            return
        if reply[0] == "rate_limited":
            raise errors.RateLimited(retry_after=max(1, math.ceil(int(reply[1]) / 1000)))
