"""Sold-out flags per variant: when the purchase script says a variant has no
unit left, this process remembers it, with the activity's buyers, and answers the next
purchases of that variant itself, with no Redis call: 409 ``already_purchased`` (their order
id) to a buyer, 409 ``variant_sold_out`` (``remaining: 0``) to anyone else. The whole
activity's flag is :class:`seckill.store.sale.purchase.soldout.SoldOutBoard`'s own, unchanged: the
activity's ``remaining`` is its variants' sum, so it goes up only when every variant is gone.

Kept honest the board's way, by the board's threads: a unit that comes back to a variant
(a cancel, an expired hold, a restock) is announced on the stock-returned channel, and the
board drops the activity's variant flags with its own (``clear``); every ``SECKILL_SOLD_OUT_TTL``
its background check reads each flagged variant's ``remaining`` and ``returned`` (bumped
by every return: a unit cancelled and sold again within a check is still seen) and drops the
flags that changed. While that check is not vouched for, no variant flag answers: the
purchase goes to the script, which is always right. Sales of other variants change nothing
here: a variant's units only come back by a return.

What a flag may say that the script would not: a buyer whose purchase (of other variants) was
decided in another process after the flag went up, and who then asks for the flagged variant,
hears ``variant_sold_out`` rather than ``already_purchased`` (their order stands; the order
status tells it); this process's own purchases join the flags' winners at once
(:meth:`VariantFlags.note_buyer`). A buyer whose hold expired unpaid hears
``variant_sold_out`` rather than ``hold_expired``, as the activity's flag answers them
``sold_out``. And while this process's copy of the activity has no unit left, no variant flag
answers (``SaleState.purchase_items``): the answer is then the activity's ``sold_out``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

import redis

from seckill.domain import errors
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.sale.activity.meta import variant_field

log = logging.getLogger(__name__)

State = tuple[str | None, ...]


class _Flag:
    """One variant's flag: the fields it stands for (its remaining, returned), the
    activity's buyers when it was raised (None: too many to hold), and whether a request
    consulted it since the last check."""

    __slots__ = ("state", "used", "winners")

    def __init__(self, state: State, winners: dict[str, str] | None) -> None:
        self.state = state
        self.winners = winners
        self.used = True


class VariantFlags:
    """This process's sold-out flags of variants, keyed by (activity, variant)."""

    def __init__(self, client: Client, keys: KeySpace, max_winners: int) -> None:
        self.client = client
        self.keys = keys
        self.max_winners = max_winners
        self._flags: dict[tuple[str, str], _Flag] = {}
        self._clears = 0
        self._marking: set[tuple[str, str]] = set()
        self._marking_lock = threading.Lock()

    def refusal(self, aid: str, buyer: str, items: Iterable[tuple[str, int]]
                ) -> errors.SeckillError | None:
        """The answer to a purchase of ``items`` (variant, units) when one of their variants
        is flagged, else None."""
        if not self._flags:
            return None
        for vid, _ in items:
            flag = self._flags.get((aid, vid))
            if flag is None or flag.winners is None:
                continue
            flag.used = True
            won = flag.winners.get(buyer)
            if won is not None:
                return errors.AlreadyPurchased(order_id=won)
            return errors.VariantSoldOut(variant=vid, remaining=0)
        return None

    def mark(self, aid: str, vid: str) -> None:
        """The script said the variant has no unit left: flag it, with the activity's buyers
        read in the same MULTI as the variant's state (if they are few enough)."""
        key = (aid, vid)
        if key in self._flags:
            return
        with self._marking_lock:
            if key in self._marking:
                return  # another request is reading it now
            self._marking.add(key)
        clears = self._clears
        try:
            buyers = self.keys.buyers(aid)
            few = int(self.client.hlen(buyers)) <= self.max_winners
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self.keys.meta(aid), self._fields(vid))
            if few:
                pipe.hgetall(buyers)
            replies = pipe.execute()
        except redis.RedisError as exc:
            log.warning("no sold-out flag for variant %s of %s (%s: %s)", vid, aid,
                        type(exc).__name__, exc)
            return
        finally:
            self._marking.discard(key)
        state = tuple(replies[0])
        winners = ({uid: split_buyer_entry(value)[0] for uid, value in replies[1].items()}
                   if few else None)
        if state[0] == "0" and clears == self._clears:
            self._flags[key] = _Flag(state, winners)

    def note_buyer(self, aid: str, buyer: str, order_id: str) -> None:
        """A purchase in this process: its buyer joins the winners of ``aid``'s flags (a
        buyer of another variant who then asks for a flagged one learns their order)."""
        if not self._flags:
            return
        for (flagged, _), flag in list(self._flags.items()):
            if flagged == aid and flag.winners is not None:
                flag.winners[buyer] = order_id

    def clear(self, aid: str | None = None) -> None:
        """Drop the flags of ``aid``'s variants (of every activity: None)."""
        self._clears += 1
        if aid is None:
            self._flags.clear()
            return
        for key in [k for k in self._flags if k[0] == aid]:
            self._flags.pop(key, None)

    def check(self, client: Client) -> None:
        """Verify every flag (one round trip): drop those whose variant changed, and those no
        request consulted since the last check (a flag is cheap to raise again)."""
        flags = list(self._flags.items())
        if not flags:
            return
        pipe = client.pipeline(transaction=False)
        for (aid, vid), _ in flags:
            pipe.hmget(self.keys.meta(aid), self._fields(vid))
        for ((aid, vid), flag), state in zip(flags, pipe.execute(), strict=True):
            stale = tuple(state) != flag.state or not flag.used
            flag.used = False
            if stale and self._flags.get((aid, vid)) is flag:
                self._flags.pop((aid, vid), None)

    @staticmethod
    def _fields(vid: str) -> list[str]:
        return [variant_field(vid, "remaining"), variant_field(vid, "returned")]

    def flagged(self) -> dict[tuple[str, str], Any]:
        """The flags held now (tests and the operator's curiosity)."""
        return dict(self._flags)
