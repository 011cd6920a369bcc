"""The operator's blocks over HTTP: ``POST /admin/blocks``, ``GET /admin/blocks`` (paginated as
``GET /admin/activities``) and ``DELETE /admin/blocks/<user|person>/<id>[?activity=<aid>]``.
The actions are ``seckill.operator.blocks``'; a view reads the request and renders the answer."""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, request

import edge
from seckill.domain import errors
from seckill.domain.blocks import PERSON, USER
from seckill.operator import blocks
from seckill.web.body import json_body, read_body
from seckill.web.current import operator, services
from seckill.web.limits import ColdLimits

DEFAULT_PAGE = 50
_LIMIT = re.compile(r"[0-9]{1,6}", re.ASCII)


def _page_query() -> tuple[int, int]:
    raw = request.args.get("limit", str(DEFAULT_PAGE))
    if _LIMIT.fullmatch(raw) is None or not 1 <= int(raw) <= blocks.MAX_PAGE:
        raise errors.BadRequest(f"limit must be an integer in 1..{blocks.MAX_PAGE}",
                                field="limit")
    return blocks.checked_cursor(request.args.get("cursor")), int(raw)


def blueprint(limits: ColdLimits) -> Blueprint:
    """The operator's block, list and lift, on the operator's rate."""
    bp = Blueprint("blocks", __name__)
    limits.operator(bp)

    @bp.post("/admin/blocks")
    @edge.filters(edge.ADMIN)
    def create_block() -> tuple[dict[str, Any], int]:
        wanted = blocks.new_block(json_body(read_body(request.environ), False),
                                  services().settings.person_canon)
        return blocks.block(services(), wanted, by=operator()).body(), 201

    @bp.get("/admin/blocks")
    @edge.filters(edge.ADMIN)
    def list_blocks() -> dict[str, Any]:
        after, limit = _page_query()
        found, following = blocks.page(services(), after, limit)
        body: dict[str, Any] = {"blocks": [b.body() for b in found]}
        if following is not None:
            body["next"] = str(following)
        return body

    # One route per kind, so that each documents its own id (another kind: 404 not_found).
    @bp.delete("/admin/blocks/user/<uid>")
    @edge.filters(edge.ADMIN)
    def lift_user_block(uid: str) -> dict[str, Any]:
        return _lift(USER, uid)

    @bp.delete("/admin/blocks/person/<pid>")
    @edge.filters(edge.ADMIN)
    def lift_person_block(pid: str) -> dict[str, Any]:
        return _lift(PERSON, pid)

    return bp


def _lift(kind: str, subject: str) -> dict[str, Any]:
    """Lift the block on ``subject`` named by the path and the ``activity`` query."""
    found = services()
    named = blocks.target(kind, subject, request.args.get("activity"),
                          found.settings.person_canon)
    return blocks.unblock(found, *named, by=operator()).body()
