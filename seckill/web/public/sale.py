"""The sale's public cold routes: ``GET /seckill/time``, ``GET /seckill/activities/<aid>`` (what
the sale page shows) and ``GET /seckill/<aid>/order`` (the buyer's order, limited per user by
``SECKILL_STATUS_RATE``). The blueprint keeps the name "user" with the hot routes
(``seckill.web.hot``): endpoint names such as ``user.order_status`` are the
``seckill_requests_total`` label values that dashboards and alerts name."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

import edge
from seckill.domain.activities import Activity, now_ms
from seckill.domain.people import buyer
from seckill.web.current import services
from seckill.web.limits import ColdLimits


def blueprint(limits: ColdLimits) -> Blueprint:
    """The clock, the activity's public view, and the buyer's order status."""
    bp = Blueprint("user", __name__)

    @bp.get("/seckill/time")
    def time_now() -> dict[str, Any]:
        return {"now_ms": now_ms()}

    @bp.get("/seckill/activities/<aid>")
    def activity(aid: str) -> dict[str, Any]:
        found: Activity = services().cache.require(aid)
        return found.public(now_ms())

    @bp.get("/seckill/<aid>/order")
    @edge.filters(edge.USER)
    @limits.per_user
    def order_status(aid: str) -> dict[str, Any]:
        found = services()
        activity = found.cache.require(aid)
        passage = edge.passage()
        # A person-limited activity's order is the person's, whichever account asks.
        who = buyer(activity, passage.require_uid(), passage.person)
        status = found.payments.annotate(aid, found.orders.order_status(aid, who))
        if activity.variants:  # which variant each unit is
            status = found.orders.with_items(aid, status)
        return status.body()

    return bp
