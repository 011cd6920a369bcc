"""The operator console: ``GET /admin/`` (a page), its files, and the state it polls.

The page and its files hold no data, so they load without a token (a browser cannot send a
bearer token when it opens a URL); the page asks the operator for the token and sends it with
``GET /admin/console/state`` and the levers, which check it like every operator call. The
state is the census (seckill.store.audit.census), the outcome counters every process of this host
added up, each gateway instance's health, asked in parallel, and whether the store can write
to its disk (seckill.store.plumbing.storage). When the census could not be
read, the state says so (``stale``, ``stale_since``, ``stale_reason``) and carries the last numbers
read, never an empty list that would read as "no activities".

The page and its files are sent with a Content-Security-Policy that allows only the console's
own files (no inline script or style, no framing) and ``X-Frame-Options: DENY``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from flask import Blueprint, Response
from prometheus_client.parser import text_string_to_metric_families

from edge.chain import ADMIN
from edge.views import filters
from seckill import metrics
from seckill.domain import errors
from seckill.resources import resource_dir
from seckill.store.audit.census import Count
from seckill.store.plumbing.storage import read_storage
from seckill.web.current import services as _services
from seckill.web.health import away, database_health

HEALTH_TIMEOUT = 0.5  # seconds an instance has to answer /healthz for the console
FILES = {"index.html", "console.js", "console.css", "vendor/uPlot.iife.min.js",
         "vendor/uPlot.min.css", "blocks.js", "variants.js", "webhooks.js"}


def _folder() -> Path:
    return resource_dir("frontends") / "console"


_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
# Its own files only: no inline script or style, no other origin, never inside a frame.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@functools.cache
def _content(name: str) -> bytes:
    return (_folder() / name).read_bytes()


def _file(name: str) -> Response:
    """One of the console's files (small, read once per process)."""
    response = Response(_content(name), mimetype=_TYPES[Path(name).suffix])
    response.headers["Cache-Control"] = "no-cache"  # revalidated: a new version shows at once
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    return response


def outcomes() -> dict[str, dict[str, float]]:
    """``seckill_activity_outcomes_total`` as activity -> outcome -> count (every process's)."""
    body, _ = metrics.render()
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name != "seckill_activity_outcomes":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                per = found.setdefault(sample.labels["activity"], {})
                per[sample.labels["outcome"]] = sample.value
    return found


def health(instances: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each instance's ``/healthz``, asked in parallel: name, ok, and what failed."""
    answers: list[dict[str, Any]] = [{"instance": name, "ok": False} for name in instances]

    def ask(answer: dict[str, Any]) -> None:
        try:
            with urllib.request.urlopen(f"http://{answer['instance']}/healthz",
                                        timeout=HEALTH_TIMEOUT) as got:
                answer["ok"] = got.status == 200
        except Exception as exc:  # refused, timed out, 503: down for the console
            answer["error"] = type(exc).__name__
            code = getattr(exc, "code", None)
            if code is not None:
                answer["error"] = f"HTTP {code}"
                if isinstance(exc, urllib.error.HTTPError):
                    with contextlib.suppress(Exception):  # /healthz's body names the parts
                        answer["error"] += ": " + away(json.loads(exc.read())["failing"])

    threads = [threading.Thread(target=ask, args=(a,), daemon=True) for a in answers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HEALTH_TIMEOUT * 2)
    return answers


def _this_process(name: str, redis_up: bool) -> dict[str, Any]:
    """This process alone (no SECKILL_INSTANCES): healthy while Redis and the database
    answer."""
    failing = {} if redis_up else {"redis": "no answer"}
    if (database := database_health(_services()).failing()) is not None:
        failing["database"] = database
    found: dict[str, Any] = {"instance": f"{name} (this process)", "ok": not failing}
    if failing:
        found["error"] = "HTTP 503: " + away(failing)
    return found


def _row(count: Count, at_ms: int, counted: dict[str, dict[str, float]]) -> dict[str, Any]:
    listed = count.activity.listed(at_ms)
    if count.activity.variants:  # a bar per variant: its units sold too (the copy's, from Redis)
        listed["variants"] = [{**shown, "sold": v.sold} for shown, v in
                              zip(listed["variants"], count.activity.variants, strict=True)]
    return {
        **listed,
        "state": count.activity.console_state(at_ms),
        "sold": count.sold,  # the census's reading, summed over parts with the rest
        "buyers": count.buyers, "orders": count.orders,
        "holds": count.holds, "waiting": count.waiting,
        "oldest_pending_s": round(count.oldest_pending_s, 3),
        "dead_letters": count.dead_letters,
        "inconsistent": count.inconsistent,  # refusing 503 inconsistent until repaired
        "outcomes": counted.get(count.activity.id, {}),
    }


def blueprint() -> Blueprint:
    """The console's page, files and state."""
    bp = Blueprint("console", __name__)

    @bp.get("/admin/", strict_slashes=False)  # /admin too, rather than an HTML redirect
    def page() -> Response:
        return _file("index.html")

    @bp.get("/admin/console/<path:name>")
    def asset(name: str) -> Response:
        if name not in FILES:
            raise errors.NotFound()
        return _file(name)

    @bp.get("/admin/console/state")
    @filters(ADMIN)
    def state() -> dict[str, Any]:
        settings = _services().settings
        census = _services().census.take()
        counted = outcomes()
        return {
            "now_ms": census.taken_ms,
            "redis_up": census.redis_up,
            "redis_nodes": [dataclasses.asdict(node) for node in census.nodes],
            # Stale: the activities are the last complete reading's, of stale_since (null:
            # none yet), and stale_reason says why this one failed.
            "stale": census.stale,
            "stale_since": census.read_ms if census.stale else None,
            "stale_reason": census.error,
            "activities": [_row(c, census.taken_ms, counted) for c in census.counts],
            # Not writable: purchases answer 503 storage, and the reason says whose disk.
            "storage": dataclasses.asdict(read_storage(_services().client, settings.data_dir)),
            # Without SECKILL_INSTANCES, this process alone: healthy while Redis answers.
            "instances": health(settings.instances) if settings.instances else [
                _this_process(settings.instance, census.redis_up)],
        }

    return bp
