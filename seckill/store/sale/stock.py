"""The stock decision: one EVALSHA of ``lua/purchase.lua`` per purchase (``lua/grab.lua`` for a
red-envelope grab), nothing else.

Failure behaviour (fail closed): if the script's answer was not read (connection refused,
timeout, pool exhausted), the purchase answers 503 ``unavailable``. The decision may or may not
have been taken; the client resolves it with ``GET /seckill/<aid>/order``. The purchase is never
retried here: a retried EVALSHA is a second purchase attempt. (The two exceptions are safe by
construction: NOSCRIPT means the script did not run; ``uninitialized`` means it changed
nothing.)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL, PACKETS, STOCK
from seckill.domain.clock import iso_from_ms
from seckill.domain.orders import CANCELLED, OrderStatus, Purchase, Stats, activity_of_order
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client, ScriptWire, unavailable
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.shards import home_part, part_tags
from seckill.store.sale.recovery import Restorer
from seckill.store.sale.sharded import INCONSISTENT, ShardedPurchases, numbers, restock_refusal

log = logging.getLogger("seckill.stock")


@dataclasses.dataclass(frozen=True, slots=True)
class FollowUp:
    """A command sent after a purchase in the same send (a queue's "the buyer bought"), and
    what to do instead when it answers an error (e.g. NOSCRIPT)."""

    command: tuple[Any, ...]
    fallback: Callable[[], None]


class StockService:
    """The stock's decisions on Redis: purchases, order status, cancels, restocks, stats."""

    def __init__(
        self,
        client: Client,
        keys: KeySpace,
        scripts: Scripts,
        book: OrderBook,
        restorer: Restorer,
        durability: Durability,
        wire: ScriptWire,
        rates: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.client = client
        self.wire = wire  # the purchase's round trip (and a cancel's)
        self.keys = keys
        self.scripts = scripts
        self.book = book
        self.restorer = restorer
        self.durability = durability
        # The per-user purchase limit, (limit, window ms) per rate, counted by the purchase
        # script itself (lua/include/rate_limit.lua): the purchase stays one round trip.
        self.rates = tuple(rates)
        self.sharded = ShardedPurchases(self._run, keys, scripts, self._restore)
        self._shards: dict[str, int] = {}  # activity id -> its number of parts (fixed)
        self._inconsistent: set[str] = set()  # activities already logged as inconsistent

    # -- the decision ------------------------------------------------------------------

    def _run(self, script: Any, keys: list[str], args: list[Any],
             then: FollowUp | None = None) -> Any:
        """Run a writing script, followed on the same connection by the durability mode's
        wait (:meth:`Durability.commands`), in one round trip
        (:class:`seckill.store.plumbing.connection.Wire`). Returns the script's reply; raises
        Unavailable when the reply was not read or the write could not be confirmed on disk.
        ``then``: a command sent last in the same send (its own reply is its business: an
        error reply runs its fallback)."""
        try:
            after = self.durability.commands(self.client)
            replies = self.wire.run_script(script, keys, args, *after,
                                           *([then.command] if then else []))
            if then is not None and isinstance(replies.pop(), Exception):
                then.fallback()
            reply, *waited = replies
        except redis.RedisError as exc:
            raise unavailable(exc) from exc  # NOREPLICAS: refused, nothing decided
        if waited and _wrote(reply) and not self.durability.confirmed(waited[-1]):
            log.error("write not confirmed on disk (WAITAOF said %r)", waited[-1])
            raise errors.Unavailable(
                "the decision was taken but not confirmed on disk; check your order status "
                "before retrying", detail="durability",
            )
        return reply

    def purchase(self, aid: str, uid: str, quantity: int, kind: str = STOCK,
                 shards: int = 1, window: int = 0, then: FollowUp | None = None) -> Purchase:
        """Buy units (``lua/purchase.lua``) or, for a packets activity, grab one packet
        (``lua/grab.lua``). ``kind`` is what the caller's copy of the activity says; each script
        checks it, and a copy that was wrong costs one more round trip, never a wrong sale.
        ``shards`` (fixed at creation): a sharded activity buys on the buyer's home part
        (``seckill.store.sale.sharded``); ``remaining`` is then that part's, not the whole's.
        ``window`` (a payment window, seconds; fixed at creation): the scripts get its keys,
        and the order is held until paid (``seckill.store.sale.payments``)."""
        if shards > 1:
            return _outcome(self._checked(aid, self.sharded.purchase(
                aid, uid, quantity, shards, self.rates, window)), quantity, False)
        args: list[Any] = [uid, quantity, aid]
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
            if reply[0] in ("uninitialized", "unmigrated") and not restored:
                self._restore(aid)  # a meta hash from before the unlimited flag: migrated
                restored = True
            elif reply[0] == "wrong_kind" and str(reply[1]) != kind:
                kind = str(reply[1])
            elif reply[0] == "payment_keys" and not window:
                window = 1  # this process's copy did not know the window: pass its keys
            else:
                break
        return _outcome(self._checked(aid, reply), quantity, kind == PACKETS)

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

    def shards(self, aid: str) -> int:
        """The activity's number of parts (1: unsharded), from Redis or the database."""
        known = self._shards.get(aid)
        if known is not None:
            return known
        try:
            raw = self.client.hget(self.keys.meta(aid), "shards")
        except redis.RedisError as exc:
            raise unavailable(exc) from exc
        if raw is None:
            activity = self.book.load_activity(aid)
            if activity is None:
                return 1  # unknown here: the caller finds out
            count = activity.shards
        else:
            count = int(raw)
        self._shards[aid] = count
        return count

    def home_tag(self, aid: str, uid: str) -> str:
        """The hash tag of the part holding ``uid``'s order (the activity's own: unsharded)."""
        shards = self.shards(aid)
        return part_tags(aid, shards)[home_part(uid, shards)]

    def _restore(self, aid: str) -> None:
        try:
            if not self.restorer.ensure(aid):
                raise errors.UnknownActivity(activity=aid)
        except redis.RedisError as exc:
            raise unavailable(exc) from exc

    # -- order status and cancellation -------------------------------------------------

    def order_status(self, aid: str, uid: str, restore: bool = True) -> OrderStatus:
        """A buyer's order on an activity, from Redis (the activity rebuilt if Redis lost it)."""
        try:
            tag = self.home_tag(aid, uid)
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.keys.buyers(tag), uid)
            pipe.hget(self.keys.cancelled(tag), uid)
            pipe.exists(self.keys.meta(tag))
            pipe.hget(self.keys.amounts(tag), uid)
            live, cancelled, initialized, amount = pipe.execute()
        except redis.RedisError as exc:
            raise unavailable(exc) from exc
        if not initialized and restore:
            # Redis lost the activity: "none" would be a lie; rebuild, then answer.
            self._restore(aid)
            return self.order_status(aid, uid, restore=False)
        if live is not None:
            order_id, confirmed = split_buyer_entry(str(live))
            return OrderStatus("confirmed" if confirmed else "pending", order_id,
                               None if amount is None else int(amount))
        if cancelled is not None:
            return OrderStatus("cancelled", str(cancelled))
        return OrderStatus("none")

    def _find(self, order_id: str, aid: str) -> tuple[str, int, str | None]:
        """(user, quantity, database status) of an order, from the database or, while it is
        still pending, from its activity's stream."""
        stored = self.book.find_order(order_id)
        if stored is not None:
            return stored.user_id, stored.quantity, stored.status
        shards = self.shards(aid)
        for tag in part_tags(aid, shards):
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

    def cancel(self, order_id: str) -> int | None:
        """Cancel an order: stock back, buyer slot freed. Returns the new remaining stock."""
        aid = activity_of_order(order_id)
        if aid is None:
            raise errors.UnknownOrder(order_id=order_id[:120])
        try:
            uid, quantity, db_status = self._find(order_id, aid)
        except redis.RedisError as exc:
            raise unavailable(exc) from exc
        if db_status == CANCELLED:
            raise errors.AlreadyCancelled(order_id=order_id)
        # A sharded activity's order lives on its buyer's home part, and its units go back
        # there: that part's stock, whichever part they were borrowed from.
        keys, args = self.keys.cancel_keys(self.home_tag(aid, uid)), [order_id, uid, quantity, aid]
        reply = self._run(self.scripts.cancel, keys, args)
        if reply[0] in ("uninitialized", "unmigrated"):
            self._restore(aid)
            reply = self._run(self.scripts.cancel, keys, args)
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
        if outcome != "ok":
            raise errors.SeckillError(f"unexpected script reply {outcome!r}")
        # The database row may not exist yet (order still pending): the worker applies the
        # cancel event that follows the order on the stream. Both updates are idempotent.
        self.book.mark_cancelled(order_id)
        self.announce_stock_returned(aid)
        remaining = int(reply[1])
        if self.shards(aid) > 1:  # the home part's: the whole's is what the caller wants
            total, sold, _ = numbers(self.sharded.parts(self.client, aid, self.shards(aid)))
            remaining = total - sold if total >= 0 else -1
        return None if remaining < 0 else remaining

    def restock(self, aid: str, add: int) -> tuple[int, int]:
        """Add (or, negative, remove unsold) units. Returns (total, remaining).

        Redis decides atomically, the bounds included: never fewer units than are sold, never a
        total over ``MAX_TOTAL`` (what an activity may be created with). The database's total
        follows, so a rebuild from the database restores the new total.
        """
        shards = self.shards(aid)
        keys, args = [self.keys.meta(aid)], [add, MAX_TOTAL]
        reply: Any
        try:
            if shards > 1:
                self.sharded.restock(self.client, aid, add, shards)
                total, sold, _ = numbers(self.sharded.parts(self.client, aid, shards))
                reply = ["ok", total, total - sold]
            else:  # with the durability wait, as a purchase
                reply = self._run(self.scripts.restock, keys, args)
                if reply[0] in ("uninitialized", "unmigrated"):
                    self._restore(aid)
                    reply = self._run(self.scripts.restock, keys, args)
        except redis.RedisError as exc:
            raise unavailable(exc) from exc
        restock_refusal(reply, add)
        total, remaining = int(reply[1]), int(reply[2])
        self.book.set_total(aid, total)
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

    def stats(self, aid: str) -> Stats | None:
        """An activity's numbers, from Redis and the database; None if the activity is unknown."""
        shards = self.shards(aid)
        if shards > 1:
            parts = self.sharded.parts(self.client, aid, shards)
            if any(part[0] is None for part in parts):
                if not self.restorer.ensure(aid):
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
        (total_raw, remaining_raw, sold_raw, kind, amount, given, flag), buyers = pipe.execute()
        if total_raw is None:
            if not self.restorer.ensure(aid):
                return None
            return self.stats(aid)
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
        )


def _wrote(reply: Any) -> bool:
    """Whether a script's reply says it changed something (then it is confirmed on disk):
    a purchase, a cancel, a first payment (a repeated one answers with "again")."""
    return bool(reply) and (reply[0] == "ok" or (reply[0] == "paid" and len(reply) == 3))


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
