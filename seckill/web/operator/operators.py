"""Named operators over HTTP: ``GET /admin/whoami`` (who the token is: the console shows it and
hides what the role cannot do), and the admin's ``GET /admin/operators``,
``POST /admin/operators`` (201 with the token, shown this once) and
``DELETE /admin/operators/<name>``. The actions are ``seckill.operator.operators``'; a view reads
the request and renders the answer."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

import edge
from seckill.operator import operators
from seckill.web.body import json_body, read_body
from seckill.web.current import operator, services
from seckill.web.limits import ColdLimits


def blueprint(limits: ColdLimits) -> Blueprint:
    """Who is calling (not counted), and the admin's operators (on the operator's rate)."""
    bp = Blueprint("operators", __name__)

    @bp.get("/admin/whoami")
    @edge.filters(edge.ADMIN)
    def whoami() -> dict[str, Any]:
        who = operator()
        return {"name": who.name, "role": who.role}

    @bp.get("/admin/operators")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def list_operators() -> dict[str, Any]:
        return {"operators": [o.body() for o in operators.listed(services())]}

    @bp.post("/admin/operators")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def add_operator() -> tuple[dict[str, Any], int]:
        name, role = operators.new_operator(json_body(read_body(request.environ), False))
        made, token = operators.add(services(), name, role, by=operator())
        return {**made.body(), "token": token}, 201

    @bp.delete("/admin/operators/<name>")
    @edge.filters(edge.ADMIN)
    @limits.operator_call
    def revoke_operator(name: str) -> dict[str, Any]:
        return operators.revoke(services(), operators.checked_name(name),
                                by=operator()).body()

    return bp
