"""Rebuilding an activity's Redis state from the database when Redis has lost it.

Redis can come back empty (a FLUSHALL, a replica promoted with no data, a restart without its
AOF). The purchase script then answers ``uninitialized``, never "sold out" nor "unlimited", and
the gateway rebuilds the activity from the database, the source of truth. One gateway rebuilds,
under a lock; the others wait briefly or answer 503. Comparing the two without writing, and
repairing on demand: ``seckill.store.audit.reconcile``. What is rebuilt, and what can be lost:
docs/internals.md.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from typing import Any

from seckill.domain import errors, packets
from seckill.domain.activities import PACKETS, Activity
from seckill.domain.clock import now_ms
from seckill.domain.orders import (
    CONFIRMED,
    DUE,
    EXPIRED,
    PAID,
    StoredOrder,
    live_and_cancelled,
    order_seq,
)
from seckill.domain.variants import encode_items, with_sold
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import CONFIRMED_SUFFIX, KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.activities import PART_FIELDS, ActivityStore
from seckill.store.sale.activity.meta import meta_fields, part_fields, set_field

log = logging.getLogger(__name__)

LOCK_TTL_MS = 15_000
CHUNK = 1000
# The orders worker's consumer group on every activity's stream (seckill/worker/).
ORDERS_GROUP = "orders-worker"


@dataclasses.dataclass(frozen=True)
class RebuildReport:
    """What a rebuild found in the database and wrote to Redis (or found already there)."""

    activity: str
    rebuilt: bool
    total: int | None
    remaining: int | None
    sold: int
    buyers: int
    cancelled: int
    amount_given: int | None = None

    def body(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return dataclasses.asdict(self)


class KnownActivities:
    """The ids the database knows, refreshed at most every ``refresh`` seconds, so that a flood
    of made-up activity ids never turns into database queries."""

    def __init__(self, book: OrderBook, refresh: float = 5.0) -> None:
        self.book = book
        self.refresh = refresh
        self._ids: set[str] = set()
        self._loaded_at = float("-inf")
        # Callers that arrive while the ids are being loaded wait for them: without the lock
        # they would see the old (at first empty) set and call a real activity unknown (404).
        self._lock = threading.Lock()

    def __contains__(self, aid: object) -> bool:
        if aid in self._ids:
            return True
        with self._lock:
            if aid not in self._ids and time.monotonic() - self._loaded_at >= self.refresh:
                self._loaded_at = time.monotonic()
                self._ids = self.book.activity_ids()
        return aid in self._ids


class Restorer:
    """Puts an activity's state back into Redis from the database, one gateway at a time."""

    def __init__(
        self, client: Client, keys: KeySpace, scripts: Scripts, book: OrderBook,
        wait_seconds: float = 3.0,
    ) -> None:
        self.known = KnownActivities(book)
        self.client = client
        self.keys = keys
        self.scripts = scripts
        self.book = book
        self.wait_seconds = wait_seconds

    def complete(self, aid: str) -> bool:
        """Whether Redis holds the activity, every part of it if it is sharded."""
        return self._held(aid)[0]

    def _held(self, aid: str) -> tuple[bool, bool]:
        """(whether Redis holds every part of the activity, whether each part it holds has
        the ``unlimited`` flag)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(self.keys.meta(aid))
        pipe.hget(self.keys.meta(aid), "shards")
        pipe.hexists(self.keys.meta(aid), "unlimited")
        exists, shards, flagged = pipe.execute()
        if not exists:
            return False, bool(flagged)
        if int(shards or 1) == 1:
            return True, bool(flagged)
        pipe = self.client.pipeline(transaction=False)
        for tag in part_tags(aid, int(shards)):
            pipe.exists(self.keys.meta(tag))
            pipe.hexists(self.keys.meta(tag), "unlimited")
        found = pipe.execute()
        held, flags = found[0::2], found[1::2]
        return all(held), all(f for h, f in zip(held, flags, strict=True) if h)

    def migrate(self, aid: str) -> bool:
        """Give the activity's meta hashes written before the ``unlimited`` flag their flag,
        as the database says (``total`` NULL: unlimited). Before the flag ``remaining -1``
        meant unlimited, and a limited activity whose counter a torn replay left at -1 looks
        the same: only the database can tell them apart. A limited one gets "0", and its
        counters are then judged by the scripts. Returns False if the database does not know
        the activity."""
        activity = self.book.load_activity(aid)
        if activity is None:
            return False
        flag = int(activity.total is None)
        marked = [tag for tag in part_tags(aid, activity.shards)
                  if self.scripts.migrate_unlimited(keys=[self.keys.meta(tag)], args=[flag])]
        if marked:
            log.warning("activity %s: %d meta hash(es) from before the unlimited flag given "
                        "unlimited=%d, as the database says (total %s)", aid, len(marked), flag,
                        "NULL" if activity.total is None else activity.total)
        return True

    def ensure(self, aid: str) -> bool:
        """Make sure the activity's state is in Redis. Returns False if the database does not
        know the activity either; raises Unavailable if another gateway's rebuild is taking
        too long."""
        complete, flagged = self._held(aid)
        if complete:
            if not flagged:  # a meta hash from before the unlimited flag: ask the database
                self.migrate(aid)
            return True
        if aid not in self.known:
            return False
        lock = self.keys.rebuild_lock(aid)
        token = secrets.token_hex(16)
        if self.client.set(lock, token, nx=True, px=LOCK_TTL_MS):
            try:
                # Another gateway may have rebuilt between our EXISTS and our SET: rebuilding
                # again would replace the buyers who bought since with the database's list.
                if not self.complete(aid):
                    self.rebuild(aid)
            finally:
                self.scripts.unlock(keys=[lock], args=[token])
            return True
        deadline = time.monotonic() + self.wait_seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self.complete(aid):
                return True
        raise errors.Uninitialized()

    def rebuild(self, aid: str) -> RebuildReport:
        """Write the activity's state from the database. Call with the lock held (or from the
        CLI, when the operator knows no gateway is serving it)."""
        activity = self.book.load_activity(aid)
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        if activity.sharded:
            return rebuild_parts(self.client, self.keys, self.scripts, activity,
                                 self.book.orders_of(aid))
        stored = self.book.orders_of(aid)
        live, cancelled = live_and_cancelled(stored)
        sold = sum(o.quantity for o in live.values())
        remaining: int | None = None
        if activity.total is not None:
            remaining = activity.total - sold
            if remaining < 0:
                log.error("activity %s: database holds %d units of %d; clamping remaining to 0",
                          aid, sold, activity.total)
                remaining = 0
        seq = max((order_seq(o.order_id) for o in stored), default=0)

        buyers_key, cancelled_key = self.keys.buyers(aid), self.keys.cancelled(aid)
        amounts_key, items_key = self.keys.amounts(aid), self.keys.items(aid)
        pipe = self.client.pipeline(transaction=False)
        for stale in (buyers_key, cancelled_key, amounts_key, *self.keys.payment_keys(aid),
                      items_key):
            pipe.delete(stale)  # one DEL each: a cluster pipeline refuses a DEL of several keys
        for chunk in _chunks([(u, o.order_id + CONFIRMED_SUFFIX) for u, o in live.items()]):
            pipe.hset(buyers_key, mapping=dict(chunk))
        cancelled_only = [(u, o.order_id) for u, o in cancelled.items() if u not in live]
        for chunk in _chunks(cancelled_only):
            pipe.hset(cancelled_key, mapping=dict(chunk))
        if activity.kind == PACKETS:
            grabbed = [(u, str(o.amount)) for u, o in live.items() if o.amount is not None]
            for chunk in _chunks(grabbed):
                pipe.hset(amounts_key, mapping=dict(chunk))
        paid, expired = restore_payments(pipe, self.keys, aid, stored)
        # Which variant each unit of every stored order is (a cancel or an expiry gives each
        # back to its own); the variants' counters follow from the live orders.
        for chunk in _chunks([(o.order_id, encode_items(o.items)) for o in stored if o.items]):
            pipe.hset(items_key, mapping=dict(chunk))
        pipe.execute()

        restored = dataclasses.replace(activity, remaining=remaining, variants=with_sold(
            activity.variants, (o.items for o in live.values())))
        fields = meta_fields(restored, now_ms())
        fields = set_field(set_field(fields, "sold", sold), "seq", seq)
        if activity.payment_window:
            fields = set_field(set_field(fields, "paid", paid), "expired", expired)
        # Meta last: until it exists every purchase answers "uninitialized", so nobody can buy
        # against a half-restored buyer list.
        given: int | None = None
        if activity.kind == PACKETS:
            unclaimed, given = unclaimed_packets(activity, list(live.values()))
            fields = set_field(set_field(fields, "remaining", len(unclaimed)),
                                "amount_given", given)
            remaining = len(unclaimed)
            store = ActivityStore(self.client, self.keys, self.scripts)
            created = store.publish_packets(activity, unclaimed, fields)
        else:
            created = bool(self.scripts.create_activity(keys=[self.keys.meta(aid)], args=fields))
        log.warning(
            "activity %s: Redis state %s from the database: remaining=%s sold=%d buyers=%d%s",
            aid, "rebuilt" if created else "was already present, left", remaining, sold,
            len(live), "" if given is None else f" amount_given={given}",
        )
        return RebuildReport(aid, bool(created), activity.total, remaining, sold, len(live),
                             len(cancelled_only), given)


def rebuild_parts(client: Client, keys: KeySpace, scripts: Scripts, activity: Activity,
                  stored: list[StoredOrder]) -> RebuildReport:
    """Write the parts of a sharded activity that Redis lost, from the database and the parts
    it still holds (those are left as they are: their buyers and pending orders are newer
    than the database's). A lost part gets its buyers' live orders from the database, the
    units the surviving parts lent to it (received now: its own record of them is gone), and
    a share of what the database's total leaves once the surviving parts' totals and the
    units in transit between them are counted. Its lent/borrowed counters are set so that the
    whole's total, sum(total + lent - borrowed), is the database's again."""
    aid, shards = activity.id, activity.shards
    tags = part_tags(aid, shards)
    pipe = client.pipeline(transaction=False)
    for tag in tags:
        pipe.hmget(keys.meta(tag), PART_FIELDS)
        pipe.hgetall(keys.transfers(tag))
    replies = pipe.execute()
    fields_of, transfers = replies[0::2], replies[1::2]
    lost = [j for j, found in enumerate(fields_of) if found[0] is None]
    live, cancelled = live_and_cancelled(stored)
    if not lost:
        return RebuildReport(aid, False, activity.total, None, 0, 0, 0)
    in_transit, delivered = _transfers(client, keys, tags, lost, transfers)
    homes = {uid: part_of_order(o.order_id, shards) for uid, o in live.items()}
    sold = {j: sum(o.quantity for u, o in live.items() if homes[u] == j) for j in lost}
    kept = [[int(v or 0) for v in fields_of[j]] for j in range(shards) if j not in lost]
    totals: dict[int, int | None] = dict.fromkeys(lost)
    left: int | None = None
    if activity.total is not None:
        # What the lost parts held together: the total less the surviving parts' totals and
        # the units in transit between them (what was lent to a lost part is in here).
        left = activity.total - sum(p[0] for p in kept) - in_transit - sum(sold.values())
        if left < 0:
            log.error("activity %s: the lost parts' buyers hold %d units more than the total "
                      "leaves them; their parts are rebuilt with none left", aid, -left)
            left = 0
        base, extra = divmod(left, len(lost))
        totals = {j: sold[j] + base + (1 if rank < extra else 0) for rank, j in enumerate(lost)}
        # The counters: sum(total + lent - borrowed) over every part is the database's total.
        net = activity.total - sum(p[0] + p[3] - p[4] for p in kept) - sum(
            t for t in totals.values() if t is not None)
    seqs = {j: j for j in lost}
    for order in stored:
        part = order_seq(order.order_id) % shards
        if part in seqs:
            seqs[part] = max(seqs[part], order_seq(order.order_id))
    now = now_ms()
    for j in sorted(lost, reverse=True):  # part 0 (the activity's own meta) last
        tag = tags[j]
        pipe = client.pipeline(transaction=False)
        for stale in (keys.buyers(tag), keys.cancelled(tag), keys.claims(tag),
                      keys.received(tag), keys.transfers(tag), *keys.payment_keys(tag)):
            pipe.delete(stale)
        mine = [(u, o.order_id + CONFIRMED_SUFFIX) for u, o in live.items() if homes[u] == j]
        for chunk in _chunks(mine):
            pipe.hset(keys.buyers(tag), mapping=dict(chunk))
        gone = [(u, o.order_id) for u, o in cancelled.items()
                if u not in live and part_of_order(o.order_id, shards) == j]
        for chunk in _chunks(gone):
            pipe.hset(keys.cancelled(tag), mapping=dict(chunk))
        paid, expired = restore_payments(
            pipe, keys, tag, [o for o in stored if part_of_order(o.order_id, shards) == j])
        for receipt, units in delivered.get(j, []):
            pipe.hset(keys.received(tag), receipt, units)
        pipe.execute()
        fields = part_fields(activity, j, totals[j], now)
        fields = set_field(set_field(fields, "sold", sold[j]), "seq", seqs[j])
        if activity.payment_window:
            fields = set_field(set_field(fields, "paid", paid), "expired", expired)
        total = totals[j]
        if total is not None:
            fields = set_field(fields, "remaining", total - sold[j])
            if j == lost[0]:
                fields = set_field(set_field(fields, "lent", max(net, 0)),
                                    "borrowed", max(-net, 0))
        scripts.create_activity(keys=[keys.meta(tag)], args=fields)
    log.warning("activity %s: parts %s rebuilt from the database: %s units left to them, "
                "%s in transit between the others", aid, lost, left, in_transit)
    return RebuildReport(aid, True, activity.total, left, sum(sold.values()),
                         sum(1 for u in live if homes[u] in sold), 0)


def _transfers(client: Client, keys: KeySpace, tags: tuple[str, ...], lost: list[int],
               transfers: list[dict[str, str]]
               ) -> tuple[int, dict[int, list[tuple[str, int]]]]:
    """What the surviving parts lent: the units in transit to another surviving part (not
    received there yet), and per lost part the receipts of what was lent to it (its
    ``received`` fields, "<claim id>@<donor part>", and units)."""
    index = {tag: j for j, tag in enumerate(tags)}
    records = [(f"{claim}@{j}", value.split("|")) for j, found in enumerate(transfers)
               if j not in lost for claim, value in found.items()]
    delivered: dict[int, list[tuple[str, int]]] = {}
    between = []
    for receipt, (units, home, _) in records:
        if index.get(home) in lost:
            delivered.setdefault(index[home], []).append((receipt, int(units)))
        else:
            between.append((receipt, home, int(units)))
    pipe = client.pipeline(transaction=False)
    for receipt, home, _ in between:
        pipe.hexists(keys.received(home), receipt)
    received = pipe.execute() if between else []
    in_transit = sum(units for (_, _, units), done in zip(between, received, strict=True)
                     if not done)
    return in_transit, delivered


def restore_payments(pipe: Any, keys: KeySpace, tag: str,
                     stored: list[StoredOrder]) -> tuple[int, int]:
    """Queue on ``pipe`` the payment window's state of ``stored`` (the orders of one activity,
    or of one part): each due order held again until its pay_by (one already past expires at
    the next expiry round), paid and expired records, and the buyers whose hold expired.
    Returns (orders paid, orders expired), the meta's counters."""
    paid = expired = 0
    for order in stored:
        rest = f"{order.quantity}|{order.user_id}"
        if order.payment == DUE and order.status == CONFIRMED and order.pay_by is not None:
            pipe.zadd(keys.holds(tag), {order.order_id: order.pay_by})
            pipe.hset(keys.payments(tag), order.order_id, f"due|{rest}")
        elif order.payment == PAID:
            pipe.hset(keys.payments(tag), order.order_id, f"paid|{order.paid_ms or 0}|"
                      f"{order.pay_by or 0}|{order.payment_ref or ''}|{rest}")
            paid += 1
        elif order.payment == EXPIRED:
            pipe.hset(keys.payments(tag), order.order_id, f"expired|{order.pay_by or 0}|{rest}")
            pipe.hset(keys.expired(tag), order.user_id, order.order_id)
            expired += 1
    return paid, expired


def part_of_order(order_id: str, shards: int) -> int:
    """The part an order was recorded on: its sequence number mod the number of parts."""
    return order_seq(order_id) % shards


def unclaimed_packets(activity: Activity, live: list[StoredOrder]) -> tuple[list[int], int]:
    """The packets no live grab holds, in the split's order, and the amount the grabs hold."""
    assert activity.amount is not None and activity.total is not None
    if activity.seed is None:
        raise errors.SeckillError("a packets activity without a seed cannot be rebuilt",
                                  activity=activity.id)
    split = packets.split(activity.amount, activity.total, activity.seed)
    held = [o.amount for o in live if o.amount is not None]
    if len(held) != len(live):
        log.error("activity %s: %d live grabs have no amount in the database",
                  activity.id, len(live) - len(held))
    left, unknown = packets.unclaimed(split, held)
    if unknown:
        log.error("activity %s: live grabs hold amounts the split does not have: %s",
                  activity.id, unknown[:20])
    return left, sum(held)


def _chunks(items: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]
