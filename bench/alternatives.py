"""The seeds' alternative stock decisions, each a minimal Flask endpoint (no edge at all).

Served by ``bench.baselines:seed_app()`` next to the seed's script endpoint, on the same
activity layout (the meta hash's ``remaining`` and ``sold``, the buyers hash), so that the
three are compared on one server with one setup:

* ``POST /unsafe/<aid>/<uid>/buy``: read, then decrement, **not atomic**: ``HGET remaining``;
  if positive, one pipeline ``HINCRBY remaining -1``, ``HINCRBY sold 1``, ``HSET buyers``.
  Two round trips, and between them other greenlets read the same last units: it oversells.
* ``POST /lock/<aid>/<uid>/buy``: the same read and decrement inside a per-activity lock,
  ``SET lock <token> NX PX 1000``, retried with jittered exponential backoff (1 ms doubling
  to 16 ms) at most ``LOCK_TRIES`` times and ``LOCK_WAIT_S`` seconds (then 503 ``busy``),
  released by a compare-and-delete script. Four round trips when the lock is free at once,
  and all purchases of an activity one after another. The lock expires after
  ``LOCK_TTL_MS`` even if its holder is still inside (a stalled greenlet), which is when a
  lock can oversell too.
* the seed's script (``/seed/...`` in ``bench.baselines``): one EVALSHA, atomic in Redis.

Each answers 200 ``{"status": "ok"}``, 410 ``{"error": "sold_out"}`` or, for the lock,
503 ``{"error": "busy"}``. Oversold = the activity's ``sold`` minus its ``total``.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import redis
from flask import Blueprint

from seckill.store.plumbing.keys import KeySpace

LOCK_TTL_MS = 1000
LOCK_TRIES = 200
LOCK_WAIT_S = 1.0
LOCK_BACKOFF_S = (0.001, 0.016)  # first and longest pause between tries

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def lock_key(keys: KeySpace, aid: str) -> str:
    return f"{keys.prefix}:{{{aid}}}:lock"


def alternatives_blueprint(client: redis.Redis, keys: KeySpace) -> Blueprint:
    bp = Blueprint("alternatives", __name__)
    unlock = client.register_script(_UNLOCK)

    def take_one(aid: str, uid: str) -> tuple[dict[str, Any], int]:
        """Read, then decrement: the two steps the lock is meant to make one."""
        meta = keys.meta(aid)
        remaining = int(client.hget(meta, "remaining") or 0)
        if remaining <= 0:
            return {"error": "sold_out"}, 410
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(meta, "remaining", -1)
        pipe.hincrby(meta, "sold", 1)
        pipe.hset(keys.buyers(aid), uid, "1")
        pipe.execute()
        return {"status": "ok", "quantity": 1}, 200

    @bp.post("/unsafe/<aid>/<uid>/buy")
    def unsafe(aid: str, uid: str) -> tuple[dict[str, Any], int]:
        return take_one(aid, uid)

    @bp.post("/lock/<aid>/<uid>/buy")
    def locked(aid: str, uid: str) -> tuple[dict[str, Any], int]:
        lock = lock_key(keys, aid)
        token = uuid.uuid4().hex
        deadline = time.monotonic() + LOCK_WAIT_S
        pause, longest = LOCK_BACKOFF_S
        for _ in range(LOCK_TRIES):
            if client.set(lock, token, nx=True, px=LOCK_TTL_MS):
                break
            if time.monotonic() >= deadline:
                return {"error": "busy"}, 503
            time.sleep(pause * random.uniform(0.5, 1.0))  # gevent-patched: the holder runs
            pause = min(pause * 2, longest)
        else:
            return {"error": "busy"}, 503
        try:
            return take_one(aid, uid)
        finally:
            unlock(keys=[lock], args=[token])

    return bp
