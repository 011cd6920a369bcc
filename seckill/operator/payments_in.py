"""A payment provider's word that it charged for an order (``POST /payments/webhook``).

The provider has taken the money whatever the gateway answers, so a payment is never refused
for being late or doubled: it pays the held order when the order can take it (what
``POST /admin/orders/<id>/pay`` does, decided by ``lua/pay.lua`` in Redis, atomically against
``lua/expire.lua``), and otherwise leaves the order as it is and writes one
``order.refund_due`` event per payment reference to the outbox for the shop to refund:

- the hold expired (``payment_expired``: pay_by had passed when pay.lua ran, whether or not
  the expiry had run yet; the expiry then returns the units, and pay.lua never pays it);
- the order was already paid with another reference (``already_paid``: a double charge);
- the operator cancelled the order while it was due (``already_cancelled``): nothing is left
  to pay for, and the money was charged.

A payment of a due order whose ``amount`` (or ``currency``) differs from what the order costs
(the activity's price times quantity, or a packet's amount) does not pay it: the order stays due,
and one ``order.payment_mismatch`` per payment reference tells the shop both amounts. Without
a price the amount cannot be checked and pays as given (the shop's own price is the shop's to
check).

The answer is 200 only once the refund (or mismatch) is written (an outbox row, deduplicated
per order and reference, so the provider's retries make no second one); until the order is in
the database (the orders worker stores it within a second or so) it cannot be written, and the
answer is 503 so that the provider tries again.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from seckill.domain import errors
from seckill.domain.clock import now_ms
from seckill.domain.entries import MAX_PAID_AMOUNT, PAYMENT_REF
from seckill.services import Services
from seckill.sql import outbox

PAYMENT_SUCCEEDED = "payment.succeeded"  # the one event type acted on; others are ignored
PAYMENT_MISMATCH = "payment_mismatch"  # the answer's status: not paid, the shop is told
_CURRENCY = re.compile(r"[A-Za-z]{3}")  # compared with the price's code, whatever its case

# Refusals of pay.lua that mean: charged, and the order cannot take it.
_REFUND_DUE = (errors.PaymentExpired, errors.AlreadyPaid, errors.AlreadyCancelled)


class OrderNotStored(errors.Unavailable):
    """503: the order is not in the database yet, so its refund cannot be written yet."""

    default_message = ("the order is not stored yet, so its refund cannot be recorded; "
                       "deliver this payment again shortly")

    def headers(self) -> dict[str, str]:
        """``Retry-After: 2``: the orders worker stores an order within a second or so."""
        return {"Retry-After": "2"}


@dataclasses.dataclass(frozen=True, slots=True)
class Payment:
    """A ``payment.succeeded`` event's data: the order, the provider's reference, the amount
    and its currency."""

    order_id: str
    ref: str
    amount: int | None = None
    currency: str | None = None


def parse_payment(data: Any) -> Payment:
    """The ``data`` of a ``payment.succeeded`` event; BadRequest naming the field at fault."""
    if not isinstance(data, dict):
        raise errors.BadRequest('"data" must be an object: {"order_id", "payment_ref", '
                                '"amount"?}', field="data")
    order_id = data.get("order_id")
    if not isinstance(order_id, str) or not order_id:
        raise errors.BadRequest("data.order_id must be the order id, a string",
                                field="order_id")
    ref = data.get("payment_ref")
    if not isinstance(ref, str) or PAYMENT_REF.fullmatch(ref) is None:
        raise errors.BadRequest("data.payment_ref must be 1..128 characters of "
                                "[A-Za-z0-9_.:/=+-]", field="payment_ref")
    amount = data.get("amount")
    if amount is not None and (not isinstance(amount, int) or isinstance(amount, bool)
                               or not 0 <= amount <= MAX_PAID_AMOUNT):
        raise errors.BadRequest(f"data.amount, when given, must be an integer number of "
                                f"cents in 0..{MAX_PAID_AMOUNT}", field="amount")
    currency = data.get("currency")
    if currency is not None and (not isinstance(currency, str)
                                 or _CURRENCY.fullmatch(currency) is None):
        raise errors.BadRequest("data.currency, when given, must be an ISO 4217 code such as "
                                "EUR (any case)", field="currency")
    return Payment(order_id, ref, amount, currency)


def receive(services: Services, paid: Payment) -> dict[str, Any]:
    """Apply a provider's payment; the 200 body (``paid``, ``payment_mismatch`` with what the
    order costs, or ``refund_due`` with its reason), or the error raised (UnknownOrder,
    NoPaymentWindow, OrderNotStored, Unavailable)."""
    try:
        answer = services.payments.pay(paid.order_id, paid.ref, paid.amount, paid.currency)
    except _REFUND_DUE as refused:
        try:
            outbox.record_refund_due(services.engine, paid.order_id, paid.ref, paid.amount,
                                     now_ms())
        except errors.UnknownOrder:
            raise OrderNotStored(order_id=paid.order_id) from None
        return {"status": "refund_due", "order_id": paid.order_id, "payment_ref": paid.ref,
                "reason": refused.code}
    if answer["status"] == PAYMENT_MISMATCH:
        owed = (answer.get("amount"), answer.get("currency"))
        try:
            outbox.record_payment_mismatch(services.engine, paid.order_id, paid.ref,
                                           (paid.amount, paid.currency), owed, now_ms())
        except errors.UnknownOrder:
            raise OrderNotStored(order_id=paid.order_id) from None
    return answer
