"""An activity's numbers for the operator (``GET /admin/activities/<aid>/stats``): its stock
from Redis (summed over the parts of a sharded one), its orders from the database."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from seckill.domain.activities import PACKETS
from seckill.domain.orders import Stats
from seckill.domain.variants import stats_body
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.meta import variants_from_meta
from seckill.store.sale.parts import Parts
from seckill.store.sale.sharded import ShardedPurchases, numbers


@dataclasses.dataclass(eq=False)
class StockStats:
    """Each activity's numbers: stock, buyers and orders."""

    client: Client
    keys: KeySpace
    book: OrderBook
    parts: Parts
    sharded: ShardedPurchases
    ensure: Callable[[str], bool]  # rebuilds what Redis lost (``Restorer.ensure``)

    def of(self, aid: str) -> Stats | None:
        """An activity's numbers, from Redis and the database; None if the activity is unknown."""
        shards = self.parts.count(aid)
        if shards > 1:
            parts = self.sharded.parts(self.client, aid, shards)
            if any(part[0] is None for part in parts):
                if not self.ensure(aid):
                    return None
                parts = self.sharded.parts(self.client, aid, shards)
            total, sold, buyers = numbers(parts)
            counts = self.book.counts(aid)
            return Stats(
                total=None if total < 0 else total,
                remaining=None if total < 0 else total - sold,
                sold=sold, buyers=buyers, pending=max(0, buyers - counts["confirmed"]),
                confirmed=counts["confirmed"], cancelled=counts["cancelled"],
            )
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.meta(aid), "total", "remaining", "sold", "kind", "amount",
                   "amount_given", "unlimited")
        pipe.hlen(self.keys.buyers(aid))
        pipe.hget(self.keys.meta(aid), "variants")
        (total_raw, remaining_raw, sold_raw, kind, amount, given, flag), buyers, listed = (
            pipe.execute())
        variants = None
        if listed:
            # The activity's counters and its variants from one reading: read apart, a
            # purchase between the two made one answer disagree with itself by a unit.
            fields: Any = self.client.hgetall(self.keys.meta(aid))
            total_raw, remaining_raw, sold_raw = (
                fields.get("total"), fields.get("remaining"), fields.get("sold"))
            variants = stats_body(variants_from_meta(fields)) if total_raw is not None else None
        if total_raw is None:
            if not self.ensure(aid):
                return None
            return self.of(aid)
        unlimited = flag == "1"  # only the flag says so, never a counter
        counts = self.book.counts(aid)
        return Stats(
            total=None if unlimited else int(total_raw),
            remaining=None if unlimited else int(remaining_raw),
            sold=int(sold_raw or 0),
            buyers=int(buyers),
            pending=max(0, int(buyers) - counts["confirmed"]),
            confirmed=counts["confirmed"],
            cancelled=counts["cancelled"],
            amount=int(amount) if kind == PACKETS and amount is not None else None,
            amount_given=int(given or 0) if kind == PACKETS else None,
            variants=variants,
        )
