"""The operator's actions on one order: cancel it (its units go back on sale), pay it."""

from __future__ import annotations

import dataclasses
from typing import Any

from seckill.domain.operators import Operator
from seckill.domain.orders import activity_of_order
from seckill.operator import trail
from seckill.services import Services


@dataclasses.dataclass(frozen=True, slots=True)
class Cancelled:
    """A cancelled order and what its activity has left after it (None: unlimited)."""

    order_id: str
    remaining: int | None


def cancel(services: Services, order_id: str, *, by: Operator) -> Cancelled:
    """Cancel an order: its units go back on sale, its buyer may buy again; every process
    drops its sold-out flag. UnknownOrder or AlreadyCancelled otherwise."""
    with trail.action(by, "order.cancel", order=order_id[:120]):
        remaining = services.orders.cancel(order_id, by.name)
    aid = activity_of_order(order_id)
    if aid is not None:
        services.sale.returned(aid)
    return Cancelled(order_id=order_id, remaining=remaining)


def pay(services: Services, order_id: str, payment_ref: Any, *,
        by: Operator) -> dict[str, Any]:
    """Record a held order's payment (``payment_ref``: the idempotency key); the admin API's
    200 body, or the refusal raised."""
    with trail.action(by, "order.pay", order=order_id[:120]):
        paid: dict[str, Any] = services.payments.pay(order_id, payment_ref, operator=by.name)
    return paid
