"""The cold routes of fair admission (the joins and polls are hot: ``seckill.web.hot``): the
public queue state nginx caches for a second, the proof-of-work challenge, and the operator's
admission factor."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import redis
from flask import Blueprint, Response, current_app, request

import edge
from seckill.domain import admission, errors
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.services import Services
from seckill.store.plumbing.connection import unavailable
from seckill.web.body import json_body, read_body
from seckill.web.limits import ColdLimits

STATE_MAX_AGE = 1  # seconds: nginx (and any cache on the way) may keep a state this long


def _services() -> Services:
    found: Services = current_app.extensions["seckill"]
    return found


def _queued(aid: str) -> Activity:
    activity: Activity = _services().cache.require(aid)
    if not activity.queued:
        raise errors.BadRequest("this activity has no queue (admission first_come)",
                                field="admission")
    return activity


def blueprint(limits: ColdLimits) -> Blueprint:
    """The admission routes: public state, challenge, and the operator's factor."""
    bp = Blueprint("admission", __name__)

    @bp.get("/seckill/<aid>/queue/state")
    def queue_state(aid: str) -> Response:
        activity = _queued(aid)
        view = _services().queue.state(aid)
        response = Response(orjson.dumps(view.state_body(activity.ends_ms,
                                                         activity.queue_opens_ms or 0)),
                            mimetype="application/json")
        response.headers["Cache-Control"] = f"public, max-age={STATE_MAX_AGE}"
        return response

    @bp.get("/seckill/<aid>/challenge")
    @edge.filters(edge.USER)
    @limits.per_user
    def challenge(aid: str) -> Response:
        activity = _queued(aid)
        if not activity.challenge:
            raise errors.BadRequest("this activity's queue needs no challenge",
                                    field="challenge")
        try:
            issued = _services().challenges.issue(aid, edge.passage().require_uid())
        except redis.RedisError as exc:
            raise unavailable(exc) from exc
        response = Response(orjson.dumps(issued), mimetype="application/json")
        response.headers["Cache-Control"] = "no-store"  # one per user, used once
        return response

    @bp.post("/admin/activities/<aid>/admission")
    @edge.filters(edge.ADMIN)
    def admission_factor(aid: str) -> dict[str, Any]:
        activity = _queued(aid)
        factor = admission.parse_factor(json_body(read_body(request.environ), False))
        found = _services()
        found.queue.set_factor(aid, factor)
        found.cache.forget(aid)
        return dataclasses.replace(activity, admission_factor=factor).public(now_ms())

    return bp

