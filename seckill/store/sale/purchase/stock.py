"""The stock decision: one EVALSHA of ``lua/purchase.lua`` per purchase (``lua/grab.lua`` for a
red-envelope grab), nothing else.

Failure behaviour (fail closed): if the script's answer was not read (connection refused,
timeout, pool exhausted), the purchase answers 503 ``unavailable``. The decision may or may not
have been taken; the client resolves it with ``GET /seckill/<aid>/order``. The purchase is never
retried here: a retried EVALSHA is a second purchase attempt. (The two exceptions are safe by
construction: NOSCRIPT means the script did not run; ``uninitialized`` means it changed
nothing.) How a script is run, durably: ``seckill.store.plumbing.writes``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import PACKETS, STOCK
from seckill.domain.clock import iso_from_ms
from seckill.domain.orders import Purchase
from seckill.domain.people import script_buyer
from seckill.domain.variants import Items, encode_items
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import LOST, DurableRunner, FollowUp
from seckill.store.sale.purchase.borrowing import INCONSISTENT, ShardedPurchases

log = logging.getLogger(__name__)

EXPIRED = ("your purchase reached the stock too late to be decided (past its deadline): nothing "
           "was bought; you may try again")


class Purchases:
    """The purchase decision on Redis: one script (and the durability wait) per purchase."""

    def __init__(self, runner: DurableRunner, keys: KeySpace, scripts: Scripts,
                 sharded: ShardedPurchases, rates: Sequence[tuple[int, int]] = ()) -> None:
        self.runner = runner
        self._run = runner.run  # bound once: the hot path pays no extra lookup
        self.keys = keys
        self.scripts = scripts
        self.sharded = sharded
        # The per-user purchase limit, (limit, window ms) per rate, counted by the purchase
        # script itself (lua/include/rate_limit.lua): the purchase stays one round trip.
        self.rates = tuple(rates)
        self._inconsistent: set[str] = set()  # activities already logged as inconsistent

    def purchase(self, aid: str, uid: str, quantity: int, kind: str = STOCK,
                 shards: int = 1, window: int = 0, then: FollowUp | None = None,
                 buyer: str | None = None, deadline_ms: int = 0) -> Purchase:
        """Buy units (``lua/purchase.lua``) or, for a packets activity, grab one packet
        (``lua/grab.lua``). ``kind`` is what the caller's copy of the activity says; each script
        checks it, and a copy that was wrong costs one more round trip, never a wrong sale.
        ``shards`` (fixed at creation): a sharded activity buys on the buyer's home part
        (``seckill.store.sale.purchase.borrowing``); ``remaining`` is then that part's, not the
        whole's.
        ``window`` (a payment window, seconds; fixed at creation): the scripts get its keys,
        and the order is held until paid (``seckill.store.sale.orders.payments``). ``buyer``: who
        buys, when not ``uid`` (a person-limited activity's person key, seckill/domain/
        people.py); the rate limit still counts the account. ``deadline_ms`` (epoch ms, 0:
        none): past it on Redis's clock the script decides nothing (503 ``expired``)."""
        if shards > 1:
            return _outcome(self._checked(aid, self.sharded.purchase(
                aid, uid, quantity, shards, self.rates, window, buyer=buyer,
                deadline_ms=deadline_ms)), quantity, False)
        args: list[Any] = [uid if buyer is None else script_buyer(uid, buyer), quantity, aid,
                           deadline_ms]
        rate_keys = [self.keys.rate(aid, "purchase", uid, window) for _, window in self.rates]
        rate_args = [n for rate in self.rates for n in rate]
        restored = False
        reply: Any = None
        for _ in range(4):  # at most one rebuild (or migration), one change of script, keys
            held = self.keys.payment_keys(aid) if window else []
            if kind == PACKETS:
                keys = self.keys.grab_keys(aid) + held
                reply = self._run(self.scripts.grab, keys + rate_keys, args + rate_args, then)
            else:
                keys = self.keys.activity_keys(aid) + held
                reply = self._run(self.scripts.purchase, keys + rate_keys, args + rate_args,
                                  then)
            rate_keys, rate_args = [], []  # a retry of this attempt is not counted again
            if reply[0] in LOST and not restored:
                self.runner.restore(aid)  # a meta hash from before the unlimited flag: migrated
                restored = True
            elif reply[0] == "wrong_kind" and str(reply[1]) != kind:
                kind = str(reply[1])
            elif reply[0] == "payment_keys" and not window:
                window = 1  # this process's copy did not know the window: pass its keys
            else:
                break
        return _outcome(self._checked(aid, reply), quantity, kind == PACKETS)

    def purchase_items(self, aid: str, uid: str, items: Items, window: int = 0,
                       then: FollowUp | None = None, argv_user: str | None = None,
                       deadline_ms: int = 0) -> Purchase:
        """Buy ``items`` of an activity with variants (never sharded, never packets): the same
        one EVALSHA of ``lua/purchase.lua`` as :meth:`purchase`, all or nothing, with the items
        in the quantity's place and the activity's items hash as KEYS[4]. ``argv_user``: the
        buyer as the script reads it, when not ``uid`` (a person-limited activity's)."""
        quantity = items[0][1] if len(items) == 1 else sum(n for _, n in items)
        args: list[Any] = [argv_user or uid, encode_items(items), aid, deadline_ms]
        rate_keys = [self.keys.rate(aid, "purchase", uid, window) for _, window in self.rates]
        rate_args = [n for rate in self.rates for n in rate]
        restored = False
        reply: Any = None
        for _ in range(3):  # at most one rebuild, one change of keys
            keys = self.keys.variant_purchase_keys(aid) + (
                self.keys.payment_keys(aid) if window else [])
            reply = self._run(self.scripts.purchase, keys + rate_keys, args + rate_args, then)
            rate_keys, rate_args = [], []  # a retry of this attempt is not counted again
            if reply[0] in LOST and not restored:
                self.runner.restore(aid)
                restored = True
            elif reply[0] == "payment_keys" and not window:
                window = 1
            else:
                break
        reply = self._checked(aid, reply)
        if reply[0] == "ok":  # {"ok", order_id, remaining[, pay_by]}: never unlimited
            return Purchase(str(reply[1]), quantity, int(reply[2]), None,
                            int(reply[3]) if len(reply) > 3 else None, items)
        refusal = _variant_refusal(reply)
        if refusal is not None:
            raise refusal
        return _outcome(reply, quantity, False)

    def _checked(self, aid: str, reply: Any) -> Any:
        """The script's reply, unless its counters disagree (``lua/purchase.lua``): then
        503 ``inconsistent``, logged once per activity in this process."""
        if reply[0] != "inconsistent":
            return reply
        if aid not in self._inconsistent:
            self._inconsistent.add(aid)
            log.error("activity %s: its stock counters disagree (%s); every purchase is refused "
                      "until `seckill reconcile %s --repair` makes them agree with the "
                      "database", aid, " ".join(str(v) for v in reply[1:]), aid)
        raise errors.Unavailable(INCONSISTENT, detail="inconsistent")


def _variant_refusal(reply: list[Any]) -> errors.SeckillError | None:
    """The refusals only a purchase of variants can get (None for any other reply)."""
    kind = reply[0]
    if kind == "unknown_variant":
        return errors.UnknownVariant(variant=str(reply[1]))
    if kind == "variant_sold_out":
        return errors.VariantSoldOut(variant=str(reply[1]), remaining=max(0, int(reply[2])))
    if kind == "variant_required":
        return errors.BadRequest('this activity has variants: say which, {"variant": "<id>"} '
                                 'or {"items": [...]}', field="variant")
    if kind == "no_variants":
        return errors.BadRequest("this activity has no variants", field="variant")
    if kind == "bad_quantity":
        return errors.BadRequest(f"at most {int(reply[1])} units in all, one entry per variant, "
                                 "each of 1 or more", field="items")
    return None


def _outcome(reply: list[Any], quantity: int, packets: bool) -> Purchase:
    kind = reply[0]
    if kind == "ok":
        remaining = int(reply[2])
        amount = int(reply[3]) if packets else None
        tail = reply[4:] if packets else reply[3:]  # pay_by, with a payment window
        return Purchase(str(reply[1]), quantity, None if remaining < 0 else remaining, amount,
                        int(tail[0]) if tail else None)
    if kind == "already_purchased":
        order_id = split_buyer_entry(str(reply[1]))[0]
        if len(reply) > 2 and reply[2] is not None:
            raise errors.AlreadyPurchased(order_id=order_id, amount=int(reply[2]))
        raise errors.AlreadyPurchased(order_id=order_id)
    if kind == "sold_out":
        raise errors.SoldOut()
    if kind == "rate_limited":
        raise errors.RateLimited.after_ms(int(reply[1]))
    if kind == "expired":
        raise errors.Unavailable(EXPIRED, detail="expired")
    if kind == "insufficient_stock":
        raise errors.InsufficientStock(remaining=int(reply[1]))
    if kind == "not_started":
        raise errors.NotStarted(starts_at=iso_from_ms(int(reply[1])), now_ms=int(reply[2]))
    if kind == "ended":
        raise errors.Ended()
    if kind == "paused":
        raise errors.Paused()
    if kind == "bad_quantity":
        raise errors.BadRequest(
            f"quantity must be an integer in 1..{int(reply[1])}", field="quantity"
        )
    if kind == "uninitialized":
        raise errors.Uninitialized()
    if kind == "in_progress":
        raise errors.PurchaseInProgress()
    if kind == "hold_expired":
        raise errors.HoldExpired(order_id=str(reply[1]))
    raise errors.SeckillError(f"unexpected script reply {kind!r}")
