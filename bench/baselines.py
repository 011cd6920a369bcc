"""The baselines the gateway is measured against, served by the same gunicorn settings.

    gunicorn -c gunicorn.conf.py 'bench.baselines:hello_app()'
    gunicorn -c gunicorn.conf.py 'bench.baselines:seed_app()'

* ``hello_app``: a bare Flask app, ``GET /hello`` answers ``{"ok": 1}``. What Flask + gunicorn
  + gevent cost with nothing else.
* ``seed_app``: ``POST /seed/<aid>/<uid>/buy`` runs only the seed's purchase script
  (``bench/seed_purchase.lua``, frozen from the project's first commit; one EVALSHA) for that
  user: no JWT, no sale window, no signed URL, no rate limit, no WAITAOF. The seed's "Lua
  only" endpoint. ``POST /script/<aid>/<uid>/buy`` does the same with today's
  ``lua/purchase.lua`` (no rate-limit counters passed), and the same app serves the alternative
  designs of ``bench/alternatives.py``, so the stock decisions are compared on one server.

Both read ``REDIS_URL``, ``SECKILL_KEY_PREFIX`` (keys as the gateway names them) and
``SECKILL_REDIS_MAX_CONNECTIONS`` (which ``gunicorn.conf.py`` sizes from worker_connections,
as for the gateway), and connect lazily, on the first request. ``GET /healthz`` answers 200
(Redis is pinged for ``seed_app``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import redis
from flask import Flask
from redis.backoff import NoBackoff
from redis.retry import Retry

from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import lua_source

SEED_SCRIPT = Path(__file__).with_name("seed_purchase.lua")


def hello_app() -> Flask:
    app = Flask("bench.hello")

    @app.get("/hello")
    def hello() -> dict[str, Any]:
        return {"ok": 1}

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    return app


def bench_client() -> redis.Redis:
    """A client on a blocking pool configured like the gateway's (``seckill.store``): sized
    from ``SECKILL_REDIS_MAX_CONNECTIONS``, 1 s timeouts, no retries."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=int(os.environ.get("SECKILL_REDIS_MAX_CONNECTIONS", "200")),
        timeout=1.0,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
        health_check_interval=0,
    )
    return redis.Redis(connection_pool=pool)


def seed_app() -> Flask:
    from bench.alternatives import alternatives_blueprint

    app = Flask("bench.seed")
    client = bench_client()
    keys = KeySpace(os.environ.get("SECKILL_KEY_PREFIX", "bench"))
    seed_script = client.register_script(SEED_SCRIPT.read_text(encoding="utf-8"))
    current_script = client.register_script(lua_source("purchase"))

    def answer(reply: Any) -> tuple[dict[str, Any], int]:
        if reply[0] == "ok":
            return {"status": "ok", "order_id": reply[1], "quantity": 1}, 200
        if reply[0] == "already_purchased":
            return {"error": "already_purchased", "order_id": reply[1]}, 409
        if reply[0] in ("sold_out", "ended"):
            return {"error": reply[0]}, 410
        return {"error": str(reply[0])}, 409

    @app.post("/seed/<aid>/<uid>/buy")
    def seed(aid: str, uid: str) -> tuple[dict[str, Any], int]:
        return answer(seed_script(keys=keys.activity_keys(aid), args=[uid, 1, aid, 0]))

    @app.post("/script/<aid>/<uid>/buy")
    def script(aid: str, uid: str) -> tuple[dict[str, Any], int]:
        return answer(current_script(keys=keys.activity_keys(aid), args=[uid, 1, aid, 0]))

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        client.ping()
        return {"status": "ok"}

    app.register_blueprint(alternatives_blueprint(client, keys))
    return app
