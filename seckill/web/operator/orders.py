"""The operator's orders: ``POST /admin/orders/<id>/cancel`` (the units go back on sale) and
``POST /admin/orders/<id>/pay`` (a held order's payment, by its ``payment_ref``), both on
``SECKILL_ADMIN_RATE``'s shared budget. The actions are ``seckill.operator.orders``'; a view
reads the request and renders the answer."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

import edge
from seckill.domain import errors
from seckill.operator import orders
from seckill.web.body import json_body, read_body
from seckill.web.current import operator, services
from seckill.web.limits import ColdLimits


def blueprint(limits: ColdLimits) -> Blueprint:
    """The operator's cancel and pay, on the operator's rate."""
    bp = Blueprint("orders", __name__)
    limits.operator(bp)

    @bp.post("/admin/orders/<order_id>/cancel")
    @edge.filters(edge.ADMIN)
    def cancel_order(order_id: str) -> dict[str, Any]:
        cancelled = orders.cancel(services(), order_id, by=operator())
        return {"status": "cancelled", "order_id": cancelled.order_id}

    @bp.post("/admin/orders/<order_id>/pay")
    @edge.filters(edge.ADMIN)
    def pay_order(order_id: str) -> dict[str, Any]:
        body = json_body(read_body(request.environ), False)
        if not isinstance(body, dict) or set(body) != {"payment_ref"}:
            raise errors.BadRequest('the body must be {"payment_ref": <string>}')
        return orders.pay(services(), order_id, body["payment_ref"], by=operator())

    return bp
