"""What a batch of the orders worker changes (``OrderBook.store``), and the events it writes.

A cancellation is an UPDATE that only moves ``confirmed`` to ``cancelled``, a payment one that
only moves ``due`` to ``paid`` (:func:`update_of`): a repeat matches no row, and RETURNING
tells the one transaction that changed the row, which writes its event. An update of an order
in the batch itself is folded into the row about to be inserted (:meth:`Batch.fold`): the row
goes in in its final state, and, if the insert actually stores it (:func:`insert_rows` says
which), its events are its order.created as it was decided, then each change in stream order
(:meth:`Batch.events`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from seckill.domain.entries import Cancel, Paid
from seckill.domain.events import ORDER_CANCELLED, ORDER_CREATED, ORDER_EXPIRED, ORDER_PAID
from seckill.domain.orders import CANCELLED, CONFIRMED, DUE, EXPIRED, PAID
from seckill.sql.order_events import OrderChange
from seckill.sql.schema import orders


def kind_of(entry: Cancel | Paid) -> str:
    """The event of the change an update makes."""
    if isinstance(entry, Paid):
        return ORDER_PAID
    return ORDER_EXPIRED if entry.expired else ORDER_CANCELLED


def update_of(entry: Cancel | Paid) -> Any:
    """The UPDATE a cancellation or a payment makes; a repeat matches no row."""
    if isinstance(entry, Paid):
        return (orders.update()
                .where(orders.c.order_id == entry.order_id, orders.c.payment == DUE)
                .values(payment=PAID, payment_ref=entry.ref, paid_ms=entry.at_ms,
                        paid_amount=entry.amount))
    values: dict[str, Any] = {"status": CANCELLED, "cancelled_ms": entry.at_ms}
    if entry.expired:
        values["payment"] = EXPIRED
    return (orders.update()
            .where(orders.c.order_id == entry.order_id, orders.c.status == CONFIRMED)
            .values(**values))


def insert_rows(conn: sa.Connection, insert: Any, values: dict[str, dict[str, Any]]) -> list[str]:
    """Insert a batch's rows (``values``: order id -> columns) with ``insert`` (which skips
    the rows it cannot store); the ids of the ones actually inserted, in order. SQLite: the
    plain executemany (RETURNING made SQLAlchemy fetch a row per order) and its count: all
    of them (most batches), none, or else the rows that took the last rowids (one writer,
    and a rowid table gives each new row the largest rowid + 1: the rows inserted now are
    the last ``count``). Elsewhere: RETURNING."""
    if conn.dialect.name != "sqlite":
        return [r[0] for r in conn.execute(insert.returning(orders.c.order_id),
                                           list(values.values()))]
    count = conn.execute(insert, list(values.values())).rowcount
    if count == len(values):
        return list(values)
    if count <= 0:
        return []
    return list(conn.execute(sa.text(
        f"SELECT order_id FROM {orders.name} WHERE rowid > "
        f"(SELECT max(rowid) FROM {orders.name}) - :count ORDER BY rowid"),
        {"count": count}).scalars())


def fold(row: dict[str, Any], entry: Cancel | Paid) -> bool:
    """Apply a cancellation or a payment to a row about to be inserted, as :func:`update_of`
    would once it is stored (the same conditions: a repeat changes nothing); whether it
    changed the row."""
    if isinstance(entry, Paid):
        if row["payment"] != DUE:
            return False
        row.update(payment=PAID, payment_ref=entry.ref, paid_ms=entry.at_ms,
                   paid_amount=entry.amount)
        return True
    if row["status"] != CONFIRMED:
        return False
    row.update(status=CANCELLED, cancelled_ms=entry.at_ms)
    if entry.expired:
        row["payment"] = EXPIRED
    return True


class Batch:
    """The rows of a batch about to be inserted (order id -> column values), with the
    updates folded into them; ``track``: keep what the events need (off for the bench)."""

    def __init__(self, values: dict[str, dict[str, Any]], track: bool) -> None:
        self.values = values
        self._track = track
        self._decided: dict[str, dict[str, Any]] = {}
        self._folded: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}

    def fold(self, updates: Sequence[Cancel | Paid]) -> None:
        """Fold the updates of the batch's own orders into their rows, in stream order."""
        for update in updates:
            row = self.values.get(update.order_id)
            if row is None:
                continue
            before = dict(row) if self._track else row
            if fold(row, update) and self._track:
                self._decided.setdefault(update.order_id, before)
                self._folded.setdefault(update.order_id, []).append(
                    (kind_of(update), update.at_ms, dict(row)))

    def events(
        self, changed: Sequence[tuple[str, int, Mapping[Any, Any]]], inserted: Sequence[str]
    ) -> tuple[list[OrderChange], dict[str, int]]:
        """The events of a batch: the updates that changed stored rows (``changed``: kind,
        when, the row after), then each inserted row's; and the confirmed units it changed
        per activity (for the sell-outs). Each event holds its row (:class:`OrderChange`:
        the outbox writes the row's values; no data dict is made per order)."""
        events = [OrderChange(kind, row["activity_id"], row, at) for kind, at, row in changed]
        units: dict[str, int] = {}
        for _, _, row in changed:
            if row["status"] == CANCELLED:
                aid = row["activity_id"]
                units[aid] = units.get(aid, 0) - int(row["quantity"])
        values, decided, folded = self.values, self._decided, self._folded
        add = events.append
        for order_id in inserted:  # hundreds a batch: kept lean
            row = values[order_id]
            aid = row["activity_id"]
            add(OrderChange(ORDER_CREATED, aid, decided.get(order_id, row) if decided else row,
                            row["created_ms"]))
            if folded and order_id in folded:
                events.extend(OrderChange(kind, aid, after, at)
                              for kind, at, after in folded[order_id])
            if row["status"] == CONFIRMED:
                units[aid] = units.get(aid, 0) + int(row["quantity"])
        return events, units
