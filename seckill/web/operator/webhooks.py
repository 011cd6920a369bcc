"""The operator's webhook endpoints over HTTP: ``POST /admin/webhooks``,
``GET /admin/webhooks`` (paginated as ``GET /admin/activities``; each endpoint with its summary,
which the console shows), ``DELETE /admin/webhooks/<id>``, ``GET /admin/webhooks/<id>/deliveries``
and ``POST /admin/webhooks/<id>/replay``. The actions are ``seckill.operator.webhooks``'; a
view reads the request and renders the answer."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, request

import edge
from seckill.domain import errors
from seckill.domain.clock import iso_from_ms
from seckill.operator import webhooks
from seckill.web.body import json_body, read_body
from seckill.web.current import operator, services
from seckill.web.limits import ColdLimits

DEFAULT_PAGE = 50
_LIMIT = re.compile(r"[0-9]{1,6}", re.ASCII)


def _limit() -> int:
    raw = request.args.get("limit", str(DEFAULT_PAGE))
    if _LIMIT.fullmatch(raw) is None or not 1 <= int(raw) <= webhooks.MAX_PAGE:
        raise errors.BadRequest(f"limit must be an integer in 1..{webhooks.MAX_PAGE}",
                                field="limit")
    return int(raw)


def blueprint(limits: ColdLimits) -> Blueprint:
    """The operator's endpoints, their deliveries and replays, on the operator's rate."""
    bp = Blueprint("webhooks", __name__)
    limits.operator(bp)

    @bp.post("/admin/webhooks")
    @edge.filters(edge.ADMIN)
    def create_webhook() -> tuple[dict[str, Any], int]:
        url, events, secret = webhooks.new_endpoint(json_body(read_body(request.environ),
                                                              False))
        made = webhooks.register(services(), url, events, secret, by=operator())
        return made.body(with_secret=True), 201

    @bp.get("/admin/webhooks")
    @edge.filters(edge.ADMIN)
    def list_webhooks() -> dict[str, Any]:
        limit = _limit()
        found, following = webhooks.page(services(),
                                         webhooks.checked_cursor(request.args.get("cursor")),
                                         limit)
        body: dict[str, Any] = {"webhooks": [e.body() for e in found]}
        if following is not None:
            body["next"] = following
        return body

    @bp.delete("/admin/webhooks/<endpoint_id>")
    @edge.filters(edge.ADMIN)
    def remove_webhook(endpoint_id: str) -> dict[str, Any]:
        return webhooks.remove(services(), endpoint_id, by=operator()).body()

    @bp.get("/admin/webhooks/<endpoint_id>/deliveries")
    @edge.filters(edge.ADMIN)
    def list_deliveries(endpoint_id: str) -> dict[str, Any]:
        status = webhooks.checked_status(request.args.get("status"))
        limit = _limit()
        after = webhooks.checked_seq(request.args.get("cursor"))
        found, following = webhooks.deliveries(services(), endpoint_id, status, after, limit)
        body: dict[str, Any] = {"deliveries": found}
        if following is not None:
            body["next"] = str(following)
        return body

    @bp.post("/admin/webhooks/<endpoint_id>/replay")
    @edge.filters(edge.ADMIN)
    def replay(endpoint_id: str) -> dict[str, Any]:
        webhooks.checked_id(endpoint_id)  # an id no endpoint has: 404 before the body's 400
        since = webhooks.since_of(json_body(read_body(request.environ), False))
        count = webhooks.replay(services(), endpoint_id, since, by=operator())
        return {"id": endpoint_id, "since": iso_from_ms(since), "replayed": count}

    return bp
