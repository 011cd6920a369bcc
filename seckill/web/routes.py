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
``service.py``                 service       ``/healthz``, ``/metrics``, ``/openapi.json``
=============================  ============  ===============================================

"per user": ``SECKILL_STATUS_RATE``; "operator budget": ``SECKILL_ADMIN_RATE``, one budget
shared by every counted route (``seckill.web.limits``). An endpoint's name,
``<blueprint>.<view>``, is the ``endpoint`` label of ``seckill_requests_total``."""

from __future__ import annotations

from flask import Flask

from seckill.web import service
from seckill.web.limits import ColdLimits
from seckill.web.operator import activities, blocks, console, orders, webhooks
from seckill.web.public import admission, payments, sale


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
