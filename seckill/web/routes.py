"""Which blueprint serves which cold route (the hot ones, the purchase URL, the purchase and
the queue's joins and polls: ``seckill.web.hot``). Each view is short: the edge and the
cold-route limits have already run, and the operator's actions are ``seckill.operator``'s.

=============================  ============  ===============================================
module                         blueprint     routes
=============================  ============  ===============================================
``public/sale.py``             user          ``/seckill/time``, ``/seckill/activities/<aid>``,
                                             ``/seckill/<aid>/order`` (per user)
``public/admission.py``        admission     ``/seckill/<aid>/queue/state``,
                                             ``/seckill/<aid>/challenge`` (per user)
``public/payments.py``         payments      ``POST /payments/webhook``
``operator/activities.py``     activities    ``/admin/activities...``: create, stock, stats
                                             (operator budget); list, show, edit, pause,
                                             resume, end, admission factor (not counted)
``operator/orders.py``         orders        ``/admin/orders/<id>/cancel``, ``.../pay``
                                             (operator budget)
``operator/blocks.py``         blocks        ``/admin/blocks...`` (operator budget)
``operator/webhooks.py``       webhooks      ``/admin/webhooks...`` (operator budget)
``operator/console.py``        console       ``/admin/``, ``/admin/console/...`` (not counted)
``operator/operators.py``      operators     ``/admin/operators...`` (operator budget),
                                             ``/admin/whoami`` (not counted)
``service.py``                 service       ``/healthz``, ``/metrics``, ``/openapi.json``
=============================  ============  ===============================================

"per user": ``SECKILL_STATUS_RATE``; "operator budget": ``SECKILL_ADMIN_RATE``, one budget
shared by every counted route (``seckill.web.limits``). An endpoint's name,
``<blueprint>.<view>``, is the ``endpoint`` label of ``seckill_requests_total``.

Every operator route needs a role (``seckill.domain.operators``: viewer < operator < admin),
the one table :data:`ROLES` below: ``edge.operators.RoleCheck`` refuses a lesser role with 403
``forbidden``, and :func:`register` refuses to start an app with an operator route missing
from it. ``GET /metrics`` takes any operator (and the scraper's token)."""

from __future__ import annotations

from types import MappingProxyType

from flask import Flask

from edge import ADMIN as OPERATOR_ROUTE
from seckill.domain.operators import ADMIN, OPERATOR, VIEWER
from seckill.web import service
from seckill.web.limits import ColdLimits
from seckill.web.operator import activities, blocks, console, operators, orders, webhooks
from seckill.web.public import admission, payments, sale

# Which role each operator route needs, and why.
ROLES = MappingProxyType({
    # viewer: reading what the sale is doing changes nothing and hands out nothing.
    "activities.list_activities": VIEWER,
    "activities.show": VIEWER,
    "activities.stats": VIEWER,
    "console.state": VIEWER,
    "blocks.list_blocks": VIEWER,
    "webhooks.list_webhooks": VIEWER,
    "webhooks.list_deliveries": VIEWER,
    "operators.whoami": VIEWER,
    # operator: the sale-day levers. Each is undone by another lever (pause/resume, a block
    # and its lift, a restock back) or is the end of a sale the operator runs, and none makes
    # money change hands.
    "activities.pause": OPERATOR,
    "activities.resume": OPERATOR,
    "activities.end": OPERATOR,
    "activities.restock": OPERATOR,
    "activities.admission_factor": OPERATOR,
    "orders.cancel_order": OPERATOR,  # the units go back on sale; a due payment is refunded
    "blocks.create_block": OPERATOR,
    "blocks.lift_user_block": OPERATOR,
    "blocks.lift_person_block": OPERATOR,
    "webhooks.replay": OPERATOR,  # sends again what the shop was already sent
    # admin: what changes the deployment or money. An activity's price and text (create,
    # edit); where the orders go (webhook endpoints, whose secrets sign them); marking an
    # order paid by hand, which says money arrived when no provider said so; who may do what.
    "activities.create_activity": ADMIN,
    "activities.edit": ADMIN,
    "orders.pay_order": ADMIN,
    "webhooks.create_webhook": ADMIN,
    "webhooks.remove_webhook": ADMIN,
    "operators.list_operators": ADMIN,  # who holds which right is an attacker's map
    "operators.add_operator": ADMIN,
    "operators.revoke_operator": ADMIN,
})


def register(app: Flask, limits: ColdLimits) -> None:
    """Add the public, operator and service routes to ``app``."""
    app.register_blueprint(sale.blueprint(limits))
    app.register_blueprint(activities.blueprint(limits))
    app.register_blueprint(orders.blueprint(limits))
    app.register_blueprint(service.blueprint(app.extensions["seckill"]))
    app.register_blueprint(admission.blueprint(limits))
    app.register_blueprint(console.blueprint())
    app.register_blueprint(blocks.blueprint(limits))
    app.register_blueprint(payments.blueprint(
        app.config["SECKILL_SETTINGS"].payment_webhook_secret))
    app.register_blueprint(webhooks.blueprint(limits))
    app.register_blueprint(operators.blueprint(limits))
    unlisted = sorted(endpoint for endpoint, view in app.view_functions.items()
                      if OPERATOR_ROUTE in getattr(view, "edge_filters", ())
                      and endpoint not in ROLES)
    if unlisted:  # a route added without its role: refuse to start rather than guess one
        raise RuntimeError(f"operator routes without a role in seckill.web.routes.ROLES: "
                           f"{', '.join(unlisted)}")
