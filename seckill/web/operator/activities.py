"""The operator's activities, every ``/admin/activities`` route: the list (``GET``), one
activity (``GET``, ``PATCH`` the edit of what the sale page shows), the create (``POST``),
``POST .../stock``, ``GET .../stats``, the sale-day levers ``POST .../pause``, ``.../resume``,
``.../end`` and the admission factor ``POST .../admission``. The actions are
``seckill.operator``'s; a view reads the request and renders the answer.

Only the create, the stock and the stats count against ``SECKILL_ADMIN_RATE``'s shared
budget (``limits.operator_call``): the list, the edit and the levers stay outside it, so an
operator who spent it can still stop a sale. Each lever answers with the activity as it is
after the change; every gateway process follows it within a second
(``seckill.store.sale.activity.controls``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from flask import Blueprint, request

import edge
from seckill.domain import errors
from seckill.domain.activities import CONSOLE_STATES, Activity, is_activity_id, now_ms
from seckill.operator import activities, levers
from seckill.operator.activities import MAX_PAGE
from seckill.web.body import json_body, read_body, request_arrival_ms
from seckill.web.current import operator, services
from seckill.web.limits import ColdLimits

DEFAULT_PAGE = 50
# ASCII digits only: str.isdigit() takes "²" (then int() raises), int() takes the
# Arabic-Indic digit one as 1.
_LIMIT = re.compile(r"[0-9]{1,6}", re.ASCII)


def _query() -> tuple[str | None, int, str | None]:
    args = request.args
    state = args.get("state")
    if state is not None and state not in CONSOLE_STATES:
        raise errors.BadRequest(f"state must be one of {', '.join(CONSOLE_STATES)}",
                                field="state")
    raw = args.get("limit", str(DEFAULT_PAGE))
    if _LIMIT.fullmatch(raw) is None or not 1 <= int(raw) <= MAX_PAGE:
        raise errors.BadRequest(f"limit must be an integer in 1..{MAX_PAGE}", field="limit")
    cursor = args.get("cursor")
    if cursor is not None and not is_activity_id(cursor):
        raise errors.BadRequest("cursor must be the 'next' of an earlier page", field="cursor")
    return cursor, int(raw), state


def _body() -> Any:
    return json_body(read_body(request.environ), False)


def _sent_ms() -> int:
    """When the operator's command arrived (nginx's stamp, or now): of two levers on one
    activity, the later sent stands, whichever is run last."""
    return request_arrival_ms(request.headers.get("X-Request-Start"), now_ms())


def _queued(aid: str) -> Activity:
    return levers.queued(activities.find(services(), aid))


def blueprint(limits: ColdLimits) -> Blueprint:
    """The operator's activities: the list, the create, stock, stats, edit and levers."""
    bp = Blueprint("activities", __name__)

    @bp.get("/admin/activities")
    @edge.filters(edge.ADMIN)
    def list_activities() -> dict[str, Any]:
        cursor, limit, state = _query()
        found, following = activities.page(services(), cursor, limit, state)
        at = now_ms()
        body: dict[str, Any] = {"activities": [a.listed(at) for a in found]}
        if following is not None:
            body["next"] = following
        return body

    @bp.post("/admin/activities")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def create_activity() -> tuple[dict[str, Any], int]:
        activity = activities.new_activity(_body())
        return activities.create(services(), activity, by=operator()).public(now_ms()), 201

    @bp.get("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def show(aid: str) -> dict[str, Any]:
        return activities.current(services(), aid).listed(now_ms())

    @bp.patch("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def edit(aid: str) -> dict[str, Any]:
        found = services()
        activity = activities.find(found, aid)
        return activities.edit(found, activity, _body(), by=operator()).public(now_ms())

    @bp.post("/admin/activities/<aid>/stock")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def restock(aid: str) -> dict[str, Any]:
        found = services()
        activity = activities.find(found, aid)
        body = _body()
        if not isinstance(body, dict) or "add" not in body or set(body) - {"add", "variant"}:
            raise errors.BadRequest('the body must be {"add": <integer>}, with "variant": '
                                    '"<id>" on an activity with variants')
        if activity.variants or "variant" in body:
            return activities.restock_variant(found, activity, body["add"], body.get("variant"),
                                              by=operator()).public(now_ms())
        return activities.restock(found, activity, body["add"], by=operator()).public(now_ms())

    @bp.get("/admin/activities/<aid>/stats")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def stats(aid: str) -> dict[str, Any]:
        if not is_activity_id(aid):
            raise errors.UnknownActivity(activity=aid[:80])
        found = services()
        stats = found.stats.of(aid)
        if stats is None:
            raise errors.UnknownActivity(activity=aid)
        payments = found.payments.counts(aid)
        return (stats if payments is None else dataclasses.replace(stats, payments=payments)).body()

    @bp.post("/admin/activities/<aid>/pause")
    @edge.filters(edge.ADMIN)
    def pause(aid: str) -> dict[str, Any]:
        found = services()
        return levers.pause(found, activities.find(found, aid), _sent_ms(),
                            by=operator()).public(now_ms())

    @bp.post("/admin/activities/<aid>/resume")
    @edge.filters(edge.ADMIN)
    def resume(aid: str) -> dict[str, Any]:
        found = services()
        return levers.resume(found, activities.find(found, aid), _sent_ms(),
                             by=operator()).public(now_ms())

    @bp.post("/admin/activities/<aid>/end")
    @edge.filters(edge.ADMIN)
    def end(aid: str) -> dict[str, Any]:
        found = services()
        return levers.end(found, activities.find(found, aid), _sent_ms(),
                          by=operator()).public(now_ms())

    @bp.post("/admin/activities/<aid>/admission")
    @edge.filters(edge.ADMIN)
    def admission_factor(aid: str) -> dict[str, Any]:
        activity = _queued(aid)
        factor = levers.parse_factor(_body())
        return levers.set_admission_factor(services(), activity, factor,
                                           by=operator()).public(now_ms())

    return bp
