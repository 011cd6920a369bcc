"""The cold routes of fair admission (the joins and polls are hot: ``seckill.web.hot``): the
public queue state nginx caches for a second, the proof-of-work challenge, and the operator's
admission factor."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Blueprint, Response, request

from edge.chain import ADMIN, USER
from edge.views import filters, passage
from seckill.domain import errors
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.operator import activities, levers
from seckill.web.body import json_body, read_body
from seckill.web.current import services as _services
from seckill.web.limits import ColdLimits

STATE_MAX_AGE = 1  # seconds: nginx (and any cache on the way) may keep a state this long


def _queued(aid: str) -> Activity:
    return levers.queued(activities.find(_services(), aid))


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
    @filters(USER)
    @limits.per_user
    def challenge(aid: str) -> Response:
        activity = _queued(aid)
        if not activity.challenge:
            raise errors.BadRequest("this activity's queue needs no challenge",
                                    field="challenge")
        # A Redis failure is seckill.web.errors's 503, as on every route.
        issued = _services().challenges.issue(aid, passage().require_uid())
        response = Response(orjson.dumps(issued), mimetype="application/json")
        response.headers["Cache-Control"] = "no-store"  # one per user, used once
        return response

    @bp.post("/admin/activities/<aid>/admission")
    @filters(ADMIN)
    def admission_factor(aid: str) -> dict[str, Any]:
        activity = _queued(aid)
        factor = levers.parse_factor(json_body(read_body(request.environ), False))
        return levers.set_admission_factor(_services(), activity, factor).public(now_ms())

    return bp

