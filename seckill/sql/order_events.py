"""An order's event: the columns it is made of, its ``data``, and the compact layout a
worker batch's outbox row keeps it in (:func:`order_values`).

Two modules use it: the order book (``seckill/sql/book.py``), whose transactions write the
events, and the outbox (``seckill/sql/outbox.py``), which stores a batch's events as their
values and makes their data back from them with the same function (:func:`data_of_values`),
so the body sent is the same either way. It stands apart from the book because the book
writes through the outbox: the outbox cannot import the book.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from seckill.domain.events import Event, order_subject
from seckill.sql.schema import orders

# The columns an order's event is made of (RETURNING them from the UPDATE that changed it).
ORDER_COLUMNS = (orders.c.order_id, orders.c.activity_id, orders.c.user_id, orders.c.account,
                 orders.c.quantity, orders.c.status, orders.c.amount, orders.c.payment,
                 orders.c.pay_by, orders.c["items"], orders.c.changed_by)


def order_data(row: Mapping[Any, Any]) -> dict[str, Any]:
    """An order's event ``data`` from its row (a stored row, or one about to be inserted):
    its order status body plus ``activity``, ``user`` (the account that bought, for a
    person-limited activity) and ``quantity``."""
    return data_of_values(row["activity_id"], order_values(row))


_NO_OPTIONS = (None, None, None, None, None)


def order_values(row: Mapping[Any, Any]) -> list[Any]:
    """What an order's event ``data`` is made of, as a worker batch's outbox row keeps it
    (``seckill.sql.outbox``; rows already written are read with this layout, so it only
    ever grows at its end): ``[order_id, user, quantity, status, amount, payment, pay_by,
    items, operator]`` as the row holds them (``items``: its JSON text; ``operator``: its
    ``changed_by``), the trailing nulls left out."""
    values = [row["order_id"], row["account"] or row["user_id"], row["quantity"],
              row["status"]]
    optional = (row["amount"], row["payment"], row["pay_by"], row["items"], row["changed_by"])
    if optional != _NO_OPTIONS:
        values.extend(optional)
        while values[-1] is None:
            values.pop()
    return values


def data_of_values(aid: str, values: Sequence[Any]) -> dict[str, Any]:
    """The ``data`` of an order of activity ``aid`` from its :func:`order_values`: what its
    order status says (the optional fields only when set), then ``activity``, ``user`` and
    ``quantity``, in this order (the keys' order is the body's), and ``operator`` when an
    operator made the order's last change by hand."""
    order_id, user, quantity, status, *optional = values
    data: dict[str, Any] = {"status": status, "order_id": order_id}
    operator = None
    if optional:
        amount, payment, pay_by, items, operator = (*optional, None, None, None, None)[:5]
        if amount is not None:
            data["amount"] = int(amount)
        if payment is not None:
            data["payment"] = payment
        if pay_by is not None:
            data["pay_by"] = int(pay_by)
        if items is not None:
            data["items"] = json.loads(items)
    data["activity"] = aid
    data["user"] = user
    data["quantity"] = int(quantity)
    if operator is not None:
        data["operator"] = operator
    return data


class OrderChange(NamedTuple):
    """An order's event as a worker batch makes it: the order's ``row`` (stored, or about to
    be inserted; not changed afterwards) rather than its data, which is made only if the
    event's body is (its batch's outbox row keeps the row's :func:`order_values`). Read as
    an :class:`Event` is (``type``, ``subject``, ``activity_id``, ``data``, ``at_ms``,
    ``dedupe``, ``body()``)."""

    type: str
    activity_id: str
    row: Mapping[Any, Any]
    at_ms: int
    dedupe: None = None

    @property
    def subject(self) -> str:
        """The order's subject."""
        return order_subject(self.row["order_id"])

    @property
    def data(self) -> dict[str, Any]:
        """The event's ``data`` (:func:`order_data`)."""
        return order_data(self.row)

    def event(self) -> Event:
        """The same event as an :class:`Event`."""
        return Event(self.type, self.subject, self.activity_id, self.data, self.at_ms)

    def body(self) -> bytes:
        """The JSON body sent (:meth:`Event.body`)."""
        return self.event().body()
