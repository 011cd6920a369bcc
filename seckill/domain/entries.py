"""What an order stream entry may be: a purchase (an order row), a cancellation (an
operator's, or a payment window's expiry) or a payment.

Anything else is poison: the worker dead-letters it with the reason instead of retrying it
forever. The checks mirror the database columns, so that a bad entry is refused here and never
turns into a database error that would stall a whole batch.
"""

from __future__ import annotations

import dataclasses
import re

from seckill.domain.activities import MAX_PER_USER, PACKETS, STOCK, USER_ID
from seckill.domain.operators import ACTOR
from seckill.domain.orders import OrderRow, activity_of_order
from seckill.domain.packets import MAX_AMOUNT
from seckill.domain.people import PERSON_KEY
from seckill.domain.variants import Items, decode_items

MAX_ORDER_ID = 100  # the order id column's length
MAX_TS_MS = 2**63 - 1  # a BIGINT


class Poison(ValueError):
    """An entry that can never become an order."""


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    """A cancellation entry: the order cancelled, and when (epoch ms)."""

    order_id: str
    at_ms: int
    expired: bool = False  # the payment window ran out (lua/expire.lua)
    operator: str | None = None  # the operator who cancelled it (lua/cancel.lua)


@dataclasses.dataclass(frozen=True, slots=True)
class Paid:
    """A payment entry (lua/pay.lua): the order paid, with what reference, and when."""

    order_id: str
    at_ms: int
    ref: str
    amount: int | None = None  # what the payment provider says it charged, cents (optional)
    operator: str | None = None  # the operator who recorded it by hand (else the provider)


PAYMENT_REF = re.compile(r"[A-Za-z0-9_.:/=+-]{1,128}")
MAX_PAID_AMOUNT = 2**53 - 1  # a payment's amount, cents: exact in every JSON reader


def parse_entry(stream_aid: str, fields: dict[str, str]) -> OrderRow | Cancel | Paid:
    """Turn a stream entry into an order row or a cancellation; raise Poison if it is neither."""
    kind = fields.get("type", "purchase")
    order_id = fields.get("order_id", "")
    if len(order_id) > MAX_ORDER_ID:
        raise Poison(f"order id longer than {MAX_ORDER_ID} characters")
    if activity_of_order(order_id) != stream_aid or fields.get("activity") != stream_aid:
        raise Poison(f"order id {order_id[:120]!r} does not belong to activity {stream_aid!r}")
    try:
        at_ms = int(fields.get("ts", ""))
    except ValueError:
        raise Poison("ts is not an integer") from None
    # Values no column can hold would make the database (or the driver) refuse the whole
    # batch; refuse the entry itself instead.
    if not 0 <= at_ms <= MAX_TS_MS:
        raise Poison(f"ts {str(at_ms)[:40]} is out of range")
    if kind == "cancel":
        return Cancel(order_id, at_ms, fields.get("reason") == "expired", _operator(fields))
    if kind == "paid":
        ref = fields.get("ref", "")
        if PAYMENT_REF.fullmatch(ref) is None:
            raise Poison(f"payment ref {ref[:80]!r} is not a valid reference")
        return Paid(order_id, at_ms, ref, _paid_amount(fields), _operator(fields))
    if kind != "purchase":
        raise Poison(f"unknown entry type {kind[:40]!r}")
    user = fields.get("user", "")
    account = fields.get("account")
    if account is not None:  # limit_by person: the buyer is the person's key, bought by account
        if PERSON_KEY.fullmatch(user) is None:
            raise Poison(f"user {user[:80]!r} is not a person's key")
        if USER_ID.fullmatch(account) is None:
            raise Poison(f"account {account[:80]!r} is not a valid user id")
    elif USER_ID.fullmatch(user) is None:
        raise Poison(f"user {user[:80]!r} is not a valid user id")
    try:
        quantity = int(fields.get("quantity", ""))
    except ValueError:
        raise Poison("quantity is not an integer") from None
    if not 1 <= quantity <= MAX_PER_USER:
        raise Poison(f"quantity {str(quantity)[:40]} is not in 1..{MAX_PER_USER}")
    pay_by = None
    if "pay_by" in fields:
        try:
            pay_by = int(fields["pay_by"])
        except ValueError:
            raise Poison("pay_by is not an integer") from None
        if not 0 <= pay_by <= MAX_TS_MS:
            raise Poison(f"pay_by {str(pay_by)[:40]} is out of range")
    return OrderRow(order_id, stream_aid, user, quantity, at_ms, _amount(fields, quantity),
                    pay_by, items=_items(fields, quantity), account=account)


def _operator(fields: dict[str, str]) -> str | None:
    """The operator who made a cancellation or a payment by hand, when one did."""
    found = fields.get("operator")
    if found is not None and ACTOR.fullmatch(found) is None:
        raise Poison(f"operator {found[:80]!r} is not an operator's name")
    return found


def _paid_amount(fields: dict[str, str]) -> int | None:
    """A payment's amount (cents), when the payment provider gave one."""
    raw = fields.get("amount")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_PAID_AMOUNT:
        raise Poison(f"paid amount {raw[:40]!r} is not an integer in 0..{MAX_PAID_AMOUNT}")
    return int(raw)


def _items(fields: dict[str, str], quantity: int) -> Items | None:
    """An order of an activity with variants: its items, whose units add up to its quantity."""
    raw = fields.get("items")
    if raw is None:
        return None
    try:
        items = decode_items(raw)
    except ValueError as exc:
        raise Poison(str(exc)) from None
    if sum(n for _, n in items) != quantity:
        raise Poison(f"items {raw[:80]!r} do not add up to the quantity {quantity}")
    return items


def _amount(fields: dict[str, str], quantity: int) -> int | None:
    """A grab's packet amount: required (and >= 1 cent) for packets, optional otherwise."""
    kind = fields.get("kind", STOCK)
    if kind not in (STOCK, PACKETS):
        raise Poison(f"unknown activity kind {kind[:40]!r}")
    raw = fields.get("amount")
    if raw is None:
        if kind == PACKETS:
            raise Poison("a grabbed packet without an amount")
        return None
    try:
        amount = int(raw)
    except ValueError:
        raise Poison("amount is not an integer") from None
    if not 1 <= amount <= MAX_AMOUNT:
        raise Poison(f"amount {str(amount)[:40]} is not in 1..{MAX_AMOUNT}")
    if kind == PACKETS and quantity != 1:
        raise Poison("a grab is of exactly one packet")
    return amount
