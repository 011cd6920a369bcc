"""The events of the orders' changes, as :class:`seckill.sql.book.OrderBook`
writes them: in the transaction that changes the rows, one per change.

An order's event carries the order as the database holds it after the change (what its order
status says, plus ``activity``, ``user`` and ``quantity``). ``activity.sold_out`` is written by
the transaction whose stored confirmed orders reach the activity's total, when the activity's
``sold_out_ms`` says it was below it until then; a transaction that takes the count below the
total clears it. The count (``sold_units``) is kept by the same transactions, one conditional
UPDATE each, which locks the activity's row (PostgreSQL; SQLite has one writer): concurrent
writers add up, none misses a sell-out, none sends it twice, and no batch re-counts the
orders. A rehearsal's activity writes nothing (:class:`Rehearsals`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from seckill.domain.events import ACTIVITY_SOLD_OUT, Event, activity_subject, order_subject
from seckill.domain.orders import CONFIRMED
from seckill.sql.schema import activities, orders

# The columns an order's event is made of (RETURNING them from the UPDATE that changed it).
ORDER_COLUMNS = (orders.c.order_id, orders.c.activity_id, orders.c.user_id, orders.c.account,
                 orders.c.quantity, orders.c.status, orders.c.amount, orders.c.payment,
                 orders.c.pay_by, orders.c["items"])


def order_data(row: Mapping[Any, Any]) -> dict[str, Any]:
    """An order's event ``data`` from its row (a stored row, or one about to be inserted):
    its order status body plus ``activity``, ``user`` (the account that bought, for a
    person-limited activity) and ``quantity``."""
    return data_of_values(row["activity_id"], order_values(row))


_NO_OPTIONS = (None, None, None, None)


def order_values(row: Mapping[Any, Any]) -> list[Any]:
    """What an order's event ``data`` is made of, as a worker batch's outbox row keeps it
    (``seckill.sql.outbox``; rows already written are read with this layout, so it only
    ever grows at its end): ``[order_id, user, quantity, status, amount, payment, pay_by,
    items]`` as the row holds them (``items``: its JSON text), the trailing nulls left out."""
    values = [row["order_id"], row["account"] or row["user_id"], row["quantity"],
              row["status"]]
    optional = (row["amount"], row["payment"], row["pay_by"], row["items"])
    if optional != _NO_OPTIONS:
        values.extend(optional)
        while values[-1] is None:
            values.pop()
    return values


def data_of_values(aid: str, values: Sequence[Any]) -> dict[str, Any]:
    """The ``data`` of an order of activity ``aid`` from its :func:`order_values`: what its
    order status says (the optional fields only when set), then ``activity``, ``user`` and
    ``quantity``, in this order (the keys' order is the body's)."""
    order_id, user, quantity, status, *optional = values
    data: dict[str, Any] = {"status": status, "order_id": order_id}
    if optional:
        amount, payment, pay_by, items = (*optional, None, None, None)[:4]
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


class Rehearsals:
    """Which activities are rehearsals (they send nothing): read once per activity, as the
    flag never changes after the activity is created."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()

    def real(self, conn: sa.Connection, aids: Iterable[str]) -> set[str]:
        """The activities of ``aids`` that are not rehearsals (an activity the database does
        not know counts as real, and is asked again next time)."""
        wanted = set(aids)
        missing = [a for a in wanted if a not in self._known]
        if missing:
            found = {r[0]: bool(r[1]) for r in conn.execute(
                sa.select(activities.c.id, activities.c.rehearsal)
                .where(activities.c.id.in_(missing)))}
            with self._lock:
                self._known.update(found)
        return {a for a in wanted if not self._known.get(a, False)}


# Built once: every worker batch runs it, and building it is a visible part of a batch.
_COUNT = (activities.update().where(activities.c.id == sa.bindparam("aid"))
          .values(sold_units=activities.c.sold_units + sa.bindparam("delta"))
          .returning(activities.c.total, activities.c.sold_units, activities.c.sold_out_ms))


def sold_out_events(conn: sa.Connection, deltas: Mapping[str, int], at_ms: int) -> list[Event]:
    """After a change of the confirmed units of ``deltas``' activities (by these many; 0
    after a change of their totals), in the same transaction: count them (``sold_units``)
    and return the activity.sold_out of each activity whose count reached its total now,
    keeping ``sold_out_ms`` in step. One UPDATE per activity, in id order, which takes its
    row lock first (PostgreSQL; two writers lock in the same order): a concurrent writer
    waits, then adds to the count this one left, so neither misses nor doubles a sell-out."""
    found: list[Event] = []
    for aid in sorted(deltas):
        state = conn.execute(_COUNT, {"aid": aid, "delta": deltas[aid]}).first()
        if state is None or state.total is None:
            continue  # unknown, or unlimited: never sold out
        sold = state.sold_units
        if sold is None:  # not counted yet (an older database): count it, row locked
            sold = conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(orders.c.quantity), 0))
                .where(orders.c.activity_id == aid, orders.c.status == CONFIRMED)).scalar_one()
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_units=sold))
        total, sold = int(state.total), int(sold)
        if sold >= total and state.sold_out_ms is None:
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_out_ms=at_ms))
            found.append(Event(ACTIVITY_SOLD_OUT, activity_subject(aid), aid,
                               {"activity": aid, "total": total, "sold": sold}, at_ms))
        elif sold < total and state.sold_out_ms is not None:
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_out_ms=None))
    return found
