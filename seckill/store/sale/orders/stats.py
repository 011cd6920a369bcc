"""An activity's numbers for the operator (``GET /admin/activities/<aid>/stats``): its stock
from Redis (summed over the parts of a sharded one), its orders from the database."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from seckill.domain.activities import PACKETS
from seckill.domain.orders import Stats
from seckill.domain.variants import stats_body
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.activity.meta import variants_from_meta
from seckill.store.sale.purchase.borrowing import ShardedPurchases, numbers, parts_of
from seckill.store.sale.purchase.part_counts import Parts


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
        return self.of_all([aid])[0]

    def of_all(self, aids: Sequence[str]) -> list[Stats | None]:
        """Each activity's numbers (:meth:`of`), read together whatever their number: one round
        trip (one more when some have variants) and one query. One Redis lost is rebuilt and
        read on its own."""
        shards = self.parts.count_all(aids)
        pipe = self.client.pipeline(transaction=False)
        sizes = []
        for aid, parts in zip(aids, shards, strict=True):
            if parts > 1:
                sizes.append(self.sharded.ask_parts(pipe, aid, parts))
                continue
            pipe.hmget(self.keys.meta(aid), _FIELDS)
            pipe.hlen(self.keys.buyers(aid))
            pipe.hget(self.keys.meta(aid), "variants")
            sizes.append(3)
        replies = pipe.execute()
        read: list[list[Any]] = []
        for size in sizes:
            read.append(replies[:size])
            replies = replies[size:]
        # An activity's counters and its variants from one reading: read apart, a purchase
        # between the two made one answer disagree with itself by a unit.
        listed = [i for i, (parts, one) in enumerate(zip(shards, read, strict=True))
                  if parts == 1 and one[2]]
        whole: dict[int, Any] = {}
        if listed:
            pipe = self.client.pipeline(transaction=False)
            for i in listed:
                pipe.hgetall(self.keys.meta(aids[i]))
            whole = dict(zip(listed, pipe.execute(), strict=True))
        counts = self.book.counts_of(aids)
        return [self._sharded(aid, parts, parts_of(one), counts[aid]) if parts > 1
                else self._whole(aid, one, whole.get(i), counts[aid])
                for i, (aid, parts, one) in enumerate(zip(aids, shards, read, strict=True))]

    def _sharded(self, aid: str, shards: int, parts: list[list[str | None]],
                 counts: dict[str, int]) -> Stats | None:
        if any(part[0] is None for part in parts):
            if not self.ensure(aid):
                return None
            parts = self.sharded.parts(self.client, aid, shards)
            counts = self.book.counts(aid)
        total, sold, buyers = numbers(parts)
        return Stats(
            total=None if total < 0 else total,
            remaining=None if total < 0 else total - sold,
            sold=sold, buyers=buyers, pending=max(0, buyers - counts["confirmed"]),
            confirmed=counts["confirmed"], cancelled=counts["cancelled"],
        )

    def _whole(self, aid: str, read: list[Any], fields: Any,
               counts: dict[str, int]) -> Stats | None:
        """An unsharded activity's numbers from its ``_FIELDS`` and buyer count, and its whole
        meta hash when it has variants (``fields``; None: it has none)."""
        (total_raw, remaining_raw, sold_raw, kind, amount, given, flag), buyers, _ = read
        variants = None
        if fields is not None:
            total_raw, remaining_raw, sold_raw = (
                fields.get("total"), fields.get("remaining"), fields.get("sold"))
            variants = stats_body(variants_from_meta(fields)) if total_raw is not None else None
        if total_raw is None:
            if not self.ensure(aid):
                return None
            return self.of(aid)
        unlimited = flag == "1"  # only the flag says so, never a counter
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


_FIELDS = ("total", "remaining", "sold", "kind", "amount", "amount_given", "unlimited")
