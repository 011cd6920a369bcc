"""``seckill order cancel|pay``: the operator's actions on one order, the actions of
``seckill.operator.orders`` the admin API calls too (``POST /admin/orders/<id>/cancel``,
``POST /admin/orders/<id>/pay``), printed as text. The store they use:
``seckill.ops.cli.store``."""

from __future__ import annotations

import argparse
import json

from seckill.domain import errors
from seckill.ops.cli.store import WRITE, actor, refused, store_services


def cmd_order_cancel(args: argparse.Namespace) -> int:
    """``seckill order cancel``: cancel an order (its stock goes back), print the result."""
    from seckill.operator import orders

    with store_services(WRITE) as services:
        try:
            cancelled = orders.cancel(services, args.order_id, by=actor())
        except (errors.UnknownOrder, errors.AlreadyCancelled) as exc:
            raise refused(exc) from None
    print(json.dumps({"status": "cancelled", "order_id": cancelled.order_id,
                      "remaining": cancelled.remaining}))
    return 0


def cmd_order_pay(args: argparse.Namespace) -> int:
    """``seckill order pay``: record a held order's payment, print it."""
    from seckill.operator import orders

    with store_services(WRITE) as services:
        try:
            paid = orders.pay(services, args.order_id, args.ref, by=actor())
        except errors.SeckillError as exc:
            if exc.status >= 500:
                raise
            raise refused(exc) from None
    print(json.dumps(paid))
    return 0
