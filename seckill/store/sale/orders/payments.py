"""The payment window: a purchase holds its units until paid; an unpaid hold goes back on sale.

An activity created with ``payment_window`` (seconds) has, next to its keys (same hash tag, so
on one cluster slot; on a sharded activity, per part), a sorted set of held orders scored by
their pay_by and a hash of each order's payment (``lua/include/payment_hold.lua``). Two
scripts decide, atomically on those keys, so a payment and an expiry racing for one order are
serialized by Redis and exactly one wins:

- ``lua/pay.lua`` (``POST /admin/orders/<order_id>/pay``, ``seckill order pay``): pays a held
  order before its pay_by; idempotent per payment reference.
- ``lua/expire.lua`` (``seckill.worker.expiry``, run by every orders worker): expires the held
  orders whose pay_by has passed, returning their units (or packet) and queueing a cancel
  entry for the database, in one step per batch.

Deadlines are Redis data (AOF), never a process's timer: a killed or restarted expirer loses
nothing, and any number of them may run (an order leaves the set in the step that expires it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import PACKETS
from seckill.domain.entries import PAYMENT_REF
from seckill.domain.orders import (
    CANCELLED,
    DUE,
    EXPIRED,
    PAID,
    OrderStatus,
    activity_of_order,
)
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.orders.orders import Orders
from seckill.store.sale.purchase.part_counts import Parts

log = logging.getLogger(__name__)


def _differs(paid: tuple[int | None, str | None],
             owed: tuple[int | None, str | None]) -> bool:
    """Whether a payment's (amount, currency) contradicts what the order costs; what either
    side does not say is not compared (ISO 4217 codes, whatever their case)."""
    amount, currency = paid
    due_amount, due_currency = owed
    return (amount is not None and due_amount is not None and amount != due_amount) or (
        currency is not None and due_currency is not None
        and currency.upper() != due_currency.upper())


@dataclasses.dataclass(eq=False)
class Payments:
    """Payments of held orders, and what an order's payment is, for the gateway."""

    client: Client
    keys: KeySpace
    scripts: Scripts
    book: OrderBook
    runner: DurableRunner  # pay.lua with the durability wait, as a purchase
    parts: Parts
    orders: Orders  # where an order is found (database, or its stream)
    # activity id -> its payment window (fixed)
    _windows: dict[str, int] = dataclasses.field(default_factory=dict, init=False, repr=False)

    def window(self, aid: str) -> int:
        """The activity's payment window in seconds (0: none), from Redis or the database;
        UnknownOrder-style callers check the activity exists first."""
        known = self._windows.get(aid)
        if known is not None:
            return known
        raw = self.client.hget(self.keys.meta(aid), "payment_window")
        exists = raw is not None or bool(self.client.exists(self.keys.meta(aid)))
        if exists:
            window = int(raw or 0)
        else:
            activity = self.book.load_activity(aid)
            window = 0 if activity is None else activity.payment_window
        self._windows[aid] = window
        return window

    def pay(self, order_id: str, ref: Any, amount: int | None = None,
            currency: str | None = None, operator: str | None = None) -> dict[str, Any]:
        """Pay a held order (``amount``: what the payment provider charged, cents, kept with
        the payment when given; ``operator``: who records it by hand, named by its
        order.paid); the 200 body, or the refusal raised. A due order's payment
        whose amount or currency differs from the order's leaves it due: the body is then
        ``payment_mismatch`` with the order's ``amount`` and ``currency`` (each when known)."""
        if not isinstance(ref, str) or PAYMENT_REF.fullmatch(ref) is None:
            raise errors.BadRequest("payment_ref must be 1..128 characters of "
                                    "[A-Za-z0-9_.:/=+-]", field="payment_ref")
        aid = activity_of_order(order_id)
        if aid is None:
            raise errors.UnknownOrder(order_id=order_id[:120])
        if not self.window(aid):
            self.orders.find(order_id, aid)
            raise errors.NoPaymentWindow(order_id=order_id)
        tag = self.parts.order_tag(aid, order_id)
        if amount is not None or currency is not None:
            expected = self._owed(aid, tag, order_id)
            if expected is not None and _differs((amount, currency), expected):
                body: dict[str, Any] = {"status": "payment_mismatch", "order_id": order_id,
                                        "payment_ref": ref}
                for name, value in zip(("amount", "currency"), expected, strict=True):
                    if value is not None:
                        body[name] = value
                return body
        reply = self.runner.run_restoring(aid, self.scripts.pay, self.keys.pay_keys(tag),
                                          [order_id, ref, aid,
                                           "" if amount is None else str(amount),
                                           operator or ""])
        outcome = reply[0]
        if outcome == "paid":
            return {"status": "paid", "order_id": order_id, "payment_ref": str(reply[1])}
        if outcome == "already_paid":
            raise errors.AlreadyPaid(order_id=order_id, payment_ref=str(reply[1]))
        if outcome == "payment_expired":
            raise errors.PaymentExpired(order_id=order_id, pay_by=int(reply[1]))
        if outcome == "unknown":  # not held here: cancelled while due, or no such order
            uid, _, status = self.orders.find(order_id, aid)
            latest = self.client.hget(self.keys.cancelled(tag), uid)
            if status == CANCELLED or (latest is not None and str(latest) == order_id):
                raise errors.AlreadyCancelled(order_id=order_id)
            raise errors.UnknownOrder(order_id=order_id)
        raise errors.SeckillError(f"unexpected script reply {outcome!r}")

    def _owed(self, aid: str, tag: str, order_id: str) -> tuple[int | None, str | None] | None:
        """What a due order costs: (cents, currency), each None when not known (no price);
        None when the order is not due here (pay.lua then tells what it is).

        Read before pay.lua, not in it: an order's quantity and packet never change, and its
        price is the activity's (one for all its variants) when the payment arrives."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.meta(aid), "kind", "price_amount", "price_currency")
        pipe.hget(self.keys.payments(tag), order_id)
        (kind, price, currency), record = pipe.execute()
        fields = str(record).split("|") if record is not None else []
        if len(fields) != 3 or fields[0] != DUE:
            return None
        if kind == PACKETS:  # the packet's own amount, in the price's currency if any
            packet = self.client.hget(self.keys.amounts(aid), fields[2])
            return (None if packet is None else int(packet)), currency
        return (None if price is None else int(price) * int(fields[1])), currency

    def annotate(self, aid: str, status: OrderStatus) -> OrderStatus:
        """A buyer's order status with its payment (``due``, ``paid``, ``expired``) and pay_by,
        when the activity has a payment window."""
        if status.order_id is None or not self.window(aid):
            return status
        tag = self.parts.order_tag(aid, status.order_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.payments(tag), status.order_id)
        pipe.zscore(self.keys.holds(tag), status.order_id)
        record, score = pipe.execute()
        if record is None:
            return status  # cancelled by an operator while due: no payment to tell
        fields = str(record).split("|")
        state = fields[0]
        # due: the hold's score; paid: "paid|<ms>|<pay_by>|..."; expired: "expired|<pay_by>|..."
        raw = score if state == DUE else fields[2] if state == PAID else fields[1]
        pay_by = int(float(raw)) if raw is not None else None
        # An expired hold's order is cancelled (lua/expire.lua does both at once); a status
        # read just before the expiry ran says it is live: never "confirmed, expired".
        live = status.status if state != EXPIRED else CANCELLED
        return OrderStatus(live, status.order_id, status.amount, state, pay_by or None)

    def counts(self, aid: str) -> dict[str, int] | None:
        """``{"due", "paid", "expired"}`` over the activity's parts; None without a window."""
        return self.counts_all([aid])[0]

    def counts_all(self, aids: Sequence[str]) -> list[dict[str, int] | None]:
        """Each activity's :meth:`counts`, read in one round trip whatever their number."""
        self._windows_of(aids)
        pipe = self.client.pipeline(transaction=False)
        asked = []
        for aid in aids:
            tags = self.parts.tags(aid) if self.window(aid) else ()
            for tag in tags:
                pipe.zcard(self.keys.holds(tag))
                pipe.hmget(self.keys.meta(tag), "paid", "expired")
            asked.append(len(tags))
        replies = pipe.execute() if any(asked) else []
        found: list[dict[str, int] | None] = []
        for parts in asked:
            mine, replies = replies[:2 * parts], replies[2 * parts:]
            found.append({"due": sum(int(n) for n in mine[0::2]),
                          "paid": sum(int(p or 0) for p, _ in mine[1::2]),
                          "expired": sum(int(e or 0) for _, e in mine[1::2])} if parts else None)
        return found

    def _windows_of(self, aids: Sequence[str]) -> None:
        """Remember the windows of ``aids`` that Redis holds, asked in one round trip
        (:meth:`window` then answers; one Redis lost, from the database)."""
        unknown = [aid for aid in dict.fromkeys(aids) if aid not in self._windows]
        if len(unknown) < 2:
            return
        pipe = self.client.pipeline(transaction=False)
        for aid in unknown:
            pipe.hget(self.keys.meta(aid), "payment_window")
            pipe.exists(self.keys.meta(aid))
        replies = pipe.execute()
        for aid, raw, exists in zip(unknown, replies[0::2], replies[1::2], strict=True):
            if raw is not None or exists:
                self._windows[aid] = int(raw or 0)
