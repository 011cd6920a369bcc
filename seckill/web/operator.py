"""The operator's sale-day routes: the list of activities, pause, resume, end, and the edit
of what the sale page shows. The actions are ``seckill.operator``'s; a view reads the request
and renders the answer.

Each lever answers with the activity as it is after the change; every gateway process
follows it within a second (``seckill.store.sale.controls``)."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, request

import edge
from seckill.domain import errors
from seckill.domain.activities import CONSOLE_STATES, is_activity_id, now_ms
from seckill.operator import activities, levers
from seckill.operator.activities import MAX_PAGE
from seckill.web.body import json_body, read_body, request_arrival_ms
from seckill.web.current import services

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


def _sent_ms() -> int:
    """When the operator's command arrived (nginx's stamp, or now): of two levers on one
    activity, the later sent stands, whichever is run last."""
    return request_arrival_ms(request.headers.get("X-Request-Start"), now_ms())


def blueprint() -> Blueprint:
    """The operator's list and levers."""
    bp = Blueprint("operator", __name__)

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

    @bp.post("/admin/activities/<aid>/pause")
    @edge.filters(edge.ADMIN)
    def pause(aid: str) -> dict[str, Any]:
        found = services()
        return levers.pause(found, activities.find(found, aid), _sent_ms()).public(now_ms())

    @bp.post("/admin/activities/<aid>/resume")
    @edge.filters(edge.ADMIN)
    def resume(aid: str) -> dict[str, Any]:
        found = services()
        return levers.resume(found, activities.find(found, aid), _sent_ms()).public(now_ms())

    @bp.get("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def show(aid: str) -> dict[str, Any]:
        return activities.current(services(), aid).listed(now_ms())

    @bp.patch("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def edit(aid: str) -> dict[str, Any]:
        found = services()
        activity = activities.find(found, aid)
        body = json_body(read_body(request.environ), False)
        return activities.edit(found, activity, body).public(now_ms())

    @bp.post("/admin/activities/<aid>/end")
    @edge.filters(edge.ADMIN)
    def end(aid: str) -> dict[str, Any]:
        found = services()
        return levers.end(found, activities.find(found, aid), _sent_ms()).public(now_ms())

    return bp
