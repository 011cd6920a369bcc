"""How many parts each activity's stock is split into (fixed at creation), and which part
holds a buyer's or an order's keys: asked of Redis once per activity, then remembered."""

from __future__ import annotations

from collections.abc import Sequence

from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags
from seckill.store.sale.activity.recovery import part_of_order


class Parts:
    """Each activity's number of parts, from Redis or the database, remembered."""

    def __init__(self, client: Client, keys: KeySpace, book: OrderBook) -> None:
        self.client = client
        self.keys = keys
        self.book = book
        self._shards: dict[str, int] = {}  # activity id -> its number of parts (fixed)

    def count(self, aid: str) -> int:
        """The activity's number of parts (1: unsharded), from Redis or the database."""
        known = self._shards.get(aid)
        if known is not None:
            return known
        raw = self.client.hget(self.keys.meta(aid), "shards")
        if raw is None:
            activity = self.book.load_activity(aid)
            if activity is None:
                return 1  # unknown here: the caller finds out
            count = activity.shards
        else:
            count = int(raw)
        self._shards[aid] = count
        return count

    def count_all(self, aids: Sequence[str]) -> list[int]:
        """Each activity's number of parts (:meth:`count`), those not yet remembered asked of
        Redis in one round trip."""
        unknown = [aid for aid in dict.fromkeys(aids) if aid not in self._shards]
        if len(unknown) > 1:
            pipe = self.client.pipeline(transaction=False)
            for aid in unknown:
                pipe.hget(self.keys.meta(aid), "shards")
            replies = pipe.execute()
            for aid, raw in zip(unknown, replies, strict=True):
                if raw is not None:
                    self._shards[aid] = int(raw)
        return [self.count(aid) for aid in aids]  # Redis lost one: the database says

    def sharded(self, aid: str) -> bool:
        """Whether the activity's stock is split into parts."""
        return self.count(aid) > 1

    def tags(self, aid: str) -> tuple[str, ...]:
        """The hash tags of the activity's parts, part 0 (the activity's own) first."""
        return part_tags(aid, self.count(aid))

    def home_tag(self, aid: str, uid: str) -> str:
        """The hash tag of the part holding ``uid``'s order (the activity's own: unsharded)."""
        shards = self.count(aid)
        return part_tags(aid, shards)[home_part(uid, shards)]

    def order_tag(self, aid: str, order_id: str) -> str:
        """The hash tag an order (and its payment) lives under: its activity's, or its part's."""
        shards = self.count(aid)
        return part_tags(aid, shards)[part_of_order(order_id, shards)]
