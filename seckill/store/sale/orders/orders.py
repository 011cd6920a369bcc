"""A buyer's order on Redis: its status (``GET /seckill/<aid>/order``), finding it, and the
operator's cancel (``lua/cancel.lua``: stock back, buyer slot freed)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from seckill.domain import errors
from seckill.domain.orders import CANCELLED, OrderStatus, activity_of_order
from seckill.domain.variants import decode_items
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.purchase.borrowing import ShardedPurchases, numbers
from seckill.store.sale.purchase.part_counts import Parts

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Orders:
    """Buyers' orders on Redis: their status, where they are, and the operator's cancel."""

    client: Client
    keys: KeySpace
    scripts: Scripts
    book: OrderBook
    runner: DurableRunner  # cancel.lua with the durability wait, as a purchase
    parts: Parts
    sharded: ShardedPurchases
    # Tells every process that units came back (``Restocks.announce_stock_returned``).
    stock_returned: Callable[[str], None]

    def order_status(self, aid: str, uid: str, restore: bool = True) -> OrderStatus:
        """A buyer's order on an activity, from Redis (the activity rebuilt if Redis lost it)."""
        tag = self.parts.home_tag(aid, uid)
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.buyers(tag), uid)
        pipe.hget(self.keys.cancelled(tag), uid)
        pipe.exists(self.keys.meta(tag))
        pipe.hget(self.keys.amounts(tag), uid)
        live, cancelled, initialized, amount = pipe.execute()
        if not initialized and restore:
            # Redis lost the activity: "none" would be a lie; rebuild, then answer.
            self.runner.restore(aid)
            return self.order_status(aid, uid, restore=False)
        if live is not None:
            order_id, confirmed = split_buyer_entry(str(live))
            return OrderStatus("confirmed" if confirmed else "pending", order_id,
                               None if amount is None else int(amount))
        if cancelled is not None:
            return OrderStatus("cancelled", str(cancelled))
        return OrderStatus("none")

    def find(self, order_id: str, aid: str) -> tuple[str, int, str | None]:
        """(user, quantity, database status) of an order, from the database or, while it is
        still pending, from its activity's stream; UnknownOrder if neither has it."""
        stored = self.book.find_order(order_id)
        if stored is not None:
            return stored.user_id, stored.quantity, stored.status
        for tag in self.parts.tags(aid):
            found = self._find_in_stream(order_id, self.keys.orders(tag))
            if found is not None:
                return found
        raise errors.UnknownOrder(order_id=order_id)

    def _find_in_stream(self, order_id: str, stream: str) -> tuple[str, int, str | None] | None:
        start = "-"
        for _ in range(10_000):  # bounded: the pending backlog, 500 entries at a time
            entries: Any = self.client.xrange(stream, min=start, max="+", count=500)
            for _entry_id, fields in entries:
                if fields.get("order_id") == order_id and fields.get("type") == "purchase":
                    return str(fields["user"]), int(fields["quantity"]), None
            if len(entries) < 500:
                break
            start = "(" + str(entries[-1][0])
        return None

    def cancel(self, order_id: str, operator: str | None = None) -> int | None:
        """Cancel an order: stock back, buyer slot freed; its order.cancelled names
        ``operator``. Returns the new remaining stock."""
        aid = activity_of_order(order_id)
        if aid is None:
            raise errors.UnknownOrder(order_id=order_id[:120])
        uid, quantity, db_status = self.find(order_id, aid)
        if db_status == CANCELLED:
            raise errors.AlreadyCancelled(order_id=order_id)
        # A sharded activity's order lives on its buyer's home part, and its units go back
        # there: that part's stock, whichever part they were borrowed from.
        reply = self.runner.run_restoring(
            aid, self.scripts.cancel, self.keys.cancel_keys(self.parts.home_tag(aid, uid)),
            [order_id, uid, quantity, aid, operator or ""])
        outcome = reply[0]
        if outcome in ("already_cancelled", "not_live"):
            raise errors.AlreadyCancelled(order_id=order_id)
        if outcome == "inconsistent":
            log.error("refusing to cancel %s: remaining %s + %s would exceed total %s",
                      order_id, reply[1], quantity, reply[2])
            raise errors.SeckillError("cancelling would exceed the activity's total")
        if outcome == "no_amount":
            log.error("refusing to cancel %s: Redis does not know its packet's amount", order_id)
            raise errors.SeckillError("the grab's amount is unknown; run seckill reconcile")
        if outcome == "no_items":
            log.error("refusing to cancel %s: Redis does not know which variants its units "
                      "are", order_id)
            raise errors.SeckillError("the order's variants are unknown; run seckill reconcile")
        if outcome != "ok":
            raise errors.SeckillError(f"unexpected script reply {outcome!r}")
        # The database row may not exist yet (order still pending): the worker applies the
        # cancel event that follows the order on the stream. Both updates are idempotent.
        self.book.mark_cancelled(order_id, operator=operator)
        self.stock_returned(aid)
        remaining = int(reply[1])
        if self.parts.sharded(aid):  # the home part's: the whole's is what the caller wants
            total, sold, _ = numbers(self.sharded.parts(self.client, aid, self.parts.count(aid)))
            remaining = total - sold if total >= 0 else -1
        return None if remaining < 0 else remaining

    def with_items(self, aid: str, status: OrderStatus) -> OrderStatus:
        """``status`` with its order's items (an activity with variants): from the
        activity's items hash, else (a rebuilt activity's older order) from the database."""
        if status.order_id is None:
            return status
        raw = self.client.hget(self.keys.items(aid), status.order_id)
        if raw is not None:
            return dataclasses.replace(status, items=decode_items(str(raw)))
        stored = self.book.find_order(status.order_id)
        return status if stored is None else dataclasses.replace(status, items=stored.items)
