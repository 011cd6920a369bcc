"""The operator's restock (``lua/restock.lua``): units added, or unsold ones removed, decided
by Redis within the bounds; and the word to every process that units came back."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import redis

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.activity.levers import LeverRecords
from seckill.store.sale.purchase.borrowing import ShardedPurchases, numbers, restock_refusal
from seckill.store.sale.purchase.part_counts import Parts

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Restocks:
    """Restocks, and the announcement that units of an activity came back."""

    client: Client
    keys: KeySpace
    scripts: Scripts
    book: OrderBook
    runner: DurableRunner  # restock.lua with the durability wait (unsharded activities)
    parts: Parts
    sharded: ShardedPurchases
    levers: LeverRecords  # the database's total follows Redis's, in order

    def restock(self, aid: str, add: int) -> tuple[int, int]:
        """Add (or, negative, remove unsold) units. Returns (total, remaining).

        Redis decides atomically, the bounds included: never fewer units than are sold, never a
        total over ``MAX_TOTAL`` (what an activity may be created with). The database's total
        follows, so a rebuild from the database restores the new total.
        """
        shards = self.parts.count(aid)
        reply: Any
        if shards > 1:
            self.sharded.restock(self.client, aid, add, shards)
            total, sold, _ = numbers(self.sharded.parts(self.client, aid, shards))
            reply = ["ok", total, total - sold]
        else:  # with the durability wait, as a purchase
            reply = self.runner.run_restoring(aid, self.scripts.restock,
                                              [self.keys.meta(aid)], [add, MAX_TOTAL])
        restock_refusal(reply, add)
        total, remaining = int(reply[1]), int(reply[2])
        if add > 0:
            self.announce_stock_returned(aid)
        # The database's total follows Redis's, stamped in the order the restocks ran there:
        # a restock recorded late never writes back an older total.
        token = self.levers.mark(aid)
        recorded, version = self.levers.stamp_total(aid, shards)
        self.levers.record(aid, token, ("total", recorded, version))
        return total, remaining

    def restock_variant(self, aid: str, vid: str, add: int) -> tuple[int, int]:
        """Add (or, negative, remove unsold) units of one variant of an activity with
        variants (never sharded): the variant's total and remaining move with the activity's,
        in one ``lua/restock.lua`` call, within the same bounds (a removal: the variant's
        unsold units). The database's totals follow. Returns the activity's (total,
        remaining)."""
        reply = self.runner.run_restoring(aid, self.scripts.restock, [self.keys.meta(aid)],
                                          [add, MAX_TOTAL, vid])
        if reply[0] == "unknown_variant":
            raise errors.UnknownVariant(variant=vid)
        if reply[0] in ("variant_required", "no_variants"):
            raise errors.BadRequest("variant is required on an activity with variants, and "
                                    "only there", field="variant")
        restock_refusal(reply, add)
        total, remaining, variant_total = int(reply[1]), int(reply[2]), int(reply[3])
        self.book.set_variant_total(aid, vid, variant_total, total)
        if add > 0:
            self.announce_stock_returned(aid)
        return total, remaining

    def announce_stock_returned(self, aid: str) -> None:
        """Tell every process that units of ``aid`` came back (they drop its sold-out flag)."""
        self.sharded.forget(aid)
        try:
            self.client.publish(self.keys.stock_returned_channel(), aid)
        except redis.RedisError:
            log.warning("could not announce returned stock for %s; the background check of "
                        "sold-out flags finds it within SECKILL_SOLD_OUT_TTL", aid)
