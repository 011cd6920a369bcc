"""Orders in the sale's words: an order row, a stored order, what an order id says."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from seckill.domain.variants import Items, items_body

# An order's status in the database ("pending" is Redis's: decided, not stored yet).
CONFIRMED = "confirmed"
CANCELLED = "cancelled"
PENDING = "pending"
# An order's payment, when its activity has a payment window.
DUE = "due"
PAID = "paid"
EXPIRED = "expired"

# A buyer's order as one side (Redis, the database) tells it: (status, order id).
Told = tuple[str, str | None]
NO_ORDER: Told = ("none", None)


@dataclasses.dataclass(frozen=True, slots=True)
class OrderRow:
    """A decided purchase as the worker stores it: one row of the orders table."""

    order_id: str
    activity_id: str
    user_id: str
    quantity: int
    created_ms: int
    amount: int | None = None  # a packet's amount, cents (packets activities)
    pay_by: int | None = None  # with a payment window: the deadline, epoch ms
    items: Items | None = None  # an activity with variants: the units of each variant
    # limit_by person: user_id is the person's key, this the account that bought
    account: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class StoredOrder:
    """An order as the database holds it, with its status (confirmed or cancelled)."""

    order_id: str
    activity_id: str
    user_id: str
    quantity: int
    status: str
    amount: int | None = None
    payment: str | None = None  # due, paid or expired; None without a payment window
    pay_by: int | None = None
    payment_ref: str | None = None
    paid_ms: int | None = None
    items: Items | None = None  # an activity with variants: the units of each variant


@dataclasses.dataclass(frozen=True, slots=True)
class Purchase:
    """A successful purchase (or grab): the new order, and the stock left."""

    order_id: str
    quantity: int
    remaining: int | None  # None: unlimited
    amount: int | None = None  # the packet grabbed, cents (packets activities)
    pay_by: int | None = None  # with a payment window: pay by then (epoch ms)
    items: Items | None = None  # an activity with variants: what was bought of each

    def body(self) -> dict[str, Any]:
        """The purchase's 200 response body."""
        body: dict[str, Any] = {
            "status": "ok", "order_id": self.order_id, "quantity": self.quantity,
        }
        if self.amount is not None:
            body["amount"] = self.amount
        if self.pay_by is not None:
            body["pay_by"] = self.pay_by
        if self.items is not None:
            body["items"] = items_body(self.items)
        return body


@dataclasses.dataclass(frozen=True, slots=True)
class OrderStatus:
    """A buyer's order on one activity: none, pending, confirmed or cancelled."""

    status: str
    order_id: str | None = None
    amount: int | None = None
    payment: str | None = None  # due, paid or expired (a payment window's order)
    pay_by: int | None = None
    items: Items | None = None  # an activity with variants: the order's units of each

    def body(self) -> dict[str, Any]:
        """The order-status response body."""
        body: dict[str, Any] = {"status": self.status}
        if self.order_id is not None:
            body["order_id"] = self.order_id
        if self.amount is not None:
            body["amount"] = self.amount
        if self.payment is not None:
            body["payment"] = self.payment
        if self.pay_by is not None:
            body["pay_by"] = self.pay_by
        if self.items is not None:
            body["items"] = items_body(self.items)
        return body


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """An activity's numbers for the operator: stock, buyers, and orders by status."""

    total: int | None
    remaining: int | None
    sold: int
    buyers: int
    pending: int
    confirmed: int
    cancelled: int
    amount: int | None = None  # packets: the amount split, and how much of it is grabbed
    amount_given: int | None = None
    # With a payment window: {"due", "paid", "expired"} order counts.
    payments: dict[str, int] | None = None
    # With variants: {vid: {"total", "remaining", "sold"}}.
    variants: dict[str, dict[str, int]] | None = None

    def body(self) -> dict[str, Any]:
        """The stats response body (for packets, with the amount given and the amount left)."""
        body: dict[str, Any] = {
            "total": self.total,
            "remaining": self.remaining,
            "sold": self.sold,
            "buyers": self.buyers,
            "orders": {
                "pending": self.pending,
                "confirmed": self.confirmed,
                "cancelled": self.cancelled,
            },
        }
        if self.amount is not None and self.amount_given is not None:
            body["amount_given"] = self.amount_given
            body["amount_left"] = self.amount - self.amount_given
        if self.payments is not None:
            body["payments"] = self.payments
        if self.variants is not None:
            body["variants"] = self.variants
        return body


# ASCII digits only: str.isdigit() takes "²", which int() then refuses (a 500 on pay).
_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def activity_of_order(order_id: str) -> str | None:
    """Order ids are ``<aid>-<13-digit ms>-<seq>``; the activity id may itself contain ``-``."""
    parts = order_id.rsplit("-", 2)
    if len(parts) != 3 or not _DIGITS.fullmatch(parts[1]) or not _DIGITS.fullmatch(parts[2]):
        return None
    return parts[0]


def order_seq(order_id: str) -> int:
    """The sequence number that ends an order id (0 if it ends in none)."""
    tail = order_id.rsplit("-", 1)[-1]
    return int(tail) if _DIGITS.fullmatch(tail) else 0


def live_and_cancelled(
    stored: Iterable[StoredOrder],
) -> tuple[dict[str, StoredOrder], dict[str, StoredOrder]]:
    """Per user: their live (confirmed) order, and their latest cancelled one."""
    live: dict[str, StoredOrder] = {}
    cancelled: dict[str, StoredOrder] = {}
    for order in stored:
        if order.status == CONFIRMED:
            live[order.user_id] = order
        else:
            cancelled[order.user_id] = order
    return live, cancelled


def told_by_database(stored: Iterable[StoredOrder]) -> dict[str, Told]:
    """Each buyer's order as the database tells it: their live order, else their latest
    cancelled one."""
    live, cancelled = live_and_cancelled(stored)
    told: dict[str, Told] = {u: (CANCELLED, o.order_id) for u, o in cancelled.items()}
    told.update({u: (CONFIRMED, o.order_id) for u, o in live.items()})
    return told


def disagree(in_redis: Told, in_database: Told, in_flight: set[str]) -> bool:
    """Whether the two tell a buyer's order differently, leaving out the orders whose purchase
    or cancellation is still on its way through the stream (``in_flight``)."""
    return in_redis != in_database and not {in_redis[1], in_database[1]} & in_flight


def told_body(told: Told) -> dict[str, str]:
    """A buyer's order as one side tells it, as JSON: ``{"status", "order_id"}``."""
    status, order_id = told
    return {"status": status} if order_id is None else {"status": status, "order_id": order_id}
