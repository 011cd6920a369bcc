"""Fair admission's public cold routes (the joins and polls are hot: ``seckill.web.hot``):
``GET /seckill/<aid>/queue/state``, which nginx caches for a second, and
``GET /seckill/<aid>/challenge``, the proof-of-work challenge, limited per user. The operator's
admission factor is an activity's lever: ``seckill.web.operator.activities``."""

from __future__ import annotations

import orjson
from flask import Blueprint, Response

from edge.chain import USER
from edge.views import filters, passage
from seckill.domain import errors
from seckill.domain.activities import Activity
from seckill.operator import activities, levers
from seckill.web.current import services as _services
from seckill.web.limits import ColdLimits

STATE_MAX_AGE = 1  # seconds: nginx (and any cache on the way) may keep a state this long


def _queued(aid: str) -> Activity:
    return levers.queued(activities.find(_services(), aid))


def blueprint(limits: ColdLimits) -> Blueprint:
    """The admission routes: the public queue state and the challenge."""
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

    return bp

