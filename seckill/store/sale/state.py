"""What this process knows of each sale, and the purchase that updates it.

It is the sale as the edge reads it (:class:`edge.sale.Sale`): the activity copies
(``seckill.store.sale.activity.cache``), the sold-out flags
(``seckill.store.sale.purchase.soldout``) and the per-user rate counters of the hot routes. And
it is where the hot routes buy: a purchase goes to the stock script, and its answer is folded
into the copy and the flag at once, with no extra round trip.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.commands.core import Script

from seckill import metrics
from seckill.config import Rate
from seckill.domain import errors
from seckill.domain.activities import Activity
from seckill.domain.orders import Purchase
from seckill.domain.people import buyer, script_buyer
from seckill.domain.variants import Items
from seckill.store.plumbing.connection import ScriptWire
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.storage import RefusalNotice, refuses_writes
from seckill.store.sale.activity.cache import ActivityCache
from seckill.store.sale.admission.queue import AdmissionQueue
from seckill.store.sale.purchase.soldout import SoldOutBoard
from seckill.store.sale.purchase.stock import Purchases

log = logging.getLogger(__name__)


class SaleState:
    """The sale in this process: what the edge asks, and the purchase."""

    def __init__(self, cache: ActivityCache, board: SoldOutBoard, purchases: Purchases,
                 wire: ScriptWire, keys: KeySpace, rate_script: Script, rates: tuple[Rate, ...],
                 queue: AdmissionQueue | None = None) -> None:
        self.cache = cache
        self.board = board
        self.purchases = purchases
        self.wire = wire
        self.keys = keys
        self.rate_script = rate_script
        self.rates = rates
        self._rate_args: list[int] = [n for rate in rates for n in rate]
        # A queue or draw activity's admissions (seckill.store.sale.admission.queue).
        self.queue = queue
        # The counters are writes: a full disk refuses every request's, for minutes.
        self._storage = RefusalNotice(log, "rate limits are not checked (fails open)")

    # -- what the edge reads ---------------------------------------------------------------

    def activity(self, aid: str) -> Activity:
        """This process's copy of the activity (loaded on first sight); 404 if none."""
        return self.cache.require(aid)

    def sold_out(self, aid: str) -> bool:
        """Sold out as far as this process knows: its copy says 0 left, or a flag is up."""
        copy = self.cache.get(aid)
        return (copy is not None and copy.remaining == 0) or self.board.is_flagged(aid)

    def purchase_refusal(self, aid: str, uid: str) -> errors.SeckillError | None:
        """The sold-out flag's answer to this buyer, when it has one."""
        return self.board.refusal(aid, uid)

    def over_rate(self, uid: str, endpoint: str) -> int | None:
        """Count a request on every rate in one EVALSHA (``lua/rate_limit.lua``); fails open.

        Rate limiting protects capacity, not correctness: when the counters cannot be reached
        the request goes on, counted in ``seckill_ratelimit_failures_total`` (the purchase
        needs the same Redis and fails closed on its own)."""
        keys = [self.keys.rate(uid, endpoint, uid, window) for _, window in self.rates]
        try:
            reply: Any = self.wire.run_script(self.rate_script, keys, self._rate_args)[0]
        except redis.RedisError as exc:
            metrics.RATELIMIT_FAILURES.inc()
            if refuses_writes(exc):
                self._storage.refused(exc)
            else:
                log.warning("rate limit not checked for %s (fails open): %s", uid, exc)
            return None
        self._storage.passed()
        return int(reply[1]) if reply[0] == "rate_limited" else None

    # -- the purchase ----------------------------------------------------------------------

    def purchase(self, activity: Activity, uid: str, quantity: int,
                 person: str | None = None, deadline_ms: int = 0) -> Purchase:
        """The script's decision on a purchase the edge let through, folded into this
        process's copy and flag; a refusal is raised as its ``errors`` exception. ``person``:
        the verified person behind ``uid``, who buys on a person-limited activity;
        ``deadline_ms``: the moment (epoch ms, 0: none) after which nothing is decided."""
        who = buyer(activity, uid, person)
        try:
            then = (self.queue.after_purchase(activity.id, who)
                    if activity.queued and self.queue is not None else None)
            bought = self.purchases.purchase(activity.id, uid, quantity, activity.kind,
                                             activity.shards, activity.payment_window, then,
                                             buyer=who, deadline_ms=deadline_ms)
        except errors.SoldOut:
            # A sharded activity says so only once every part was asked and had nothing.
            self.cache.note_remaining(activity.id, 0)
            self.board.mark(activity.id, activity.shards)
            raise
        if activity.shards == 1:
            self.cache.note_remaining(activity.id, bought.remaining)
        else:  # a sharded purchase tells one part's stock, not the whole's: count it off
            self.cache.note_sold(activity.id, bought.quantity)
        self.board.note_sale(activity.id)
        if bought.remaining == 0 or activity.shards > 1:
            # This copy may now say sold out with no flag raised anywhere: hear when units
            # come back (a cancel, a restock, an unpaid hold expiring), not a refresh later.
            self.board.ensure_listening(wait=False)
        return bought

    def purchase_items(self, activity: Activity, uid: str, items: Items,
                       person: str | None = None, deadline_ms: int = 0) -> Purchase:
        """A purchase of variants (``items``, checked against the copy's variants): a variant
        this process knows is gone is refused here (the board's flag, no Redis call), the
        rest is the script's one all-or-nothing decision, folded into the copy and the flags
        as :meth:`purchase` does."""
        who = buyer(activity, uid, person)
        # Only while this process's copy has units: with none left, the answer is the
        # activity's sold_out, the script's (which then raises the activity's own flag).
        refusal = activity.remaining and self.board.variant_refusal(activity.id, who, items)
        if refusal:
            raise refusal
        try:
            then = (self.queue.after_purchase(activity.id, who)
                    if activity.queued and self.queue is not None else None)
            bought = self.purchases.purchase_items(activity.id, uid, items,
                                                   activity.payment_window, then,
                                                   argv_user=script_buyer(uid, who),
                                                   deadline_ms=deadline_ms)
        except errors.SoldOut:
            self.cache.note_remaining(activity.id, 0)
            self.board.mark(activity.id)
            raise
        except errors.VariantSoldOut as refused:
            vid, left = str(refused.extra["variant"]), int(refused.extra["remaining"])
            self.cache.note_variants(activity.id, left=(vid, left))
            if left == 0:
                self.board.mark_variant(activity.id, vid)
            raise
        # The activity's units left, as for one item; its variants' are read again by the
        # next refresh (a second at most): rebuilding the copy here (7 dataclass copies) cost a
        # variant purchase about a tenth of its CPU in the gateway.
        self.cache.note_remaining(activity.id, bought.remaining)
        self.board.note_sale(activity.id)
        self.board.variants.note_buyer(activity.id, who, bought.order_id)
        if bought.remaining == 0:
            self.board.ensure_listening(wait=False)
        return bought

    def returned(self, aid: str) -> None:
        """Units of ``aid`` came back (cancel, restock): drop this process's flag and copy
        now; the other processes hear it by pub/sub."""
        self.board.clear(aid)
