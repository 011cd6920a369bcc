"""The operator's sale-day routes: the list of activities, pause, resume, end, and the edit
of what the sale page shows.

Each lever answers with the activity as it is after the change; every gateway process
follows it within a second (``seckill.store.sale.controls``)."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, current_app, request

import edge
from seckill.domain import errors
from seckill.domain.activities import (
    CONSOLE_STATES,
    Activity,
    is_activity_id,
    now_ms,
    parse_edit,
)
from seckill.services import Services
from seckill.store.sale.controls import MAX_PAGE
from seckill.web.body import json_body, read_body

DEFAULT_PAGE = 50
# ASCII digits only: str.isdigit() takes "²" (then int() raises), int() takes the
# Arabic-Indic digit one as 1.
_LIMIT = re.compile(r"[0-9]{1,6}", re.ASCII)


def _services() -> Services:
    found: Services = current_app.extensions["seckill"]
    return found


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


def blueprint() -> Blueprint:
    """The operator's list and levers."""
    bp = Blueprint("operator", __name__)

    @bp.get("/admin/activities")
    @edge.filters(edge.ADMIN)
    def list_activities() -> dict[str, Any]:
        cursor, limit, state = _query()
        found, following = _services().controls.page(cursor, limit, state)
        at = now_ms()
        body: dict[str, Any] = {"activities": [a.listed(at) for a in found]}
        if following is not None:
            body["next"] = following
        return body

    def _changed(aid: str, activity: Activity) -> dict[str, Any]:
        _services().cache.forget(aid)  # this process at once; the others on the announcement
        return activity.public(now_ms())

    @bp.post("/admin/activities/<aid>/pause")
    @edge.filters(edge.ADMIN)
    def pause(aid: str) -> dict[str, Any]:
        _services().cache.require(aid)
        return _changed(aid, _services().controls.set_paused(aid, True))

    @bp.post("/admin/activities/<aid>/resume")
    @edge.filters(edge.ADMIN)
    def resume(aid: str) -> dict[str, Any]:
        _services().cache.require(aid)
        return _changed(aid, _services().controls.set_paused(aid, False))

    @bp.get("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def show(aid: str) -> dict[str, Any]:
        _services().cache.require(aid)
        return _services().controls.current(aid).listed(now_ms())

    @bp.patch("/admin/activities/<aid>")
    @edge.filters(edge.ADMIN)
    def edit(aid: str) -> dict[str, Any]:
        _services().cache.require(aid)
        changes = parse_edit(json_body(read_body(request.environ), False))
        return _changed(aid, _services().controls.edit(aid, changes))

    @bp.post("/admin/activities/<aid>/end")
    @edge.filters(edge.ADMIN)
    def end(aid: str) -> dict[str, Any]:
        _services().cache.require(aid)
        return _changed(aid, _services().controls.end(aid))

    return bp
