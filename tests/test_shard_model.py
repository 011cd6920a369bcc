"""Sharded stock against a model: hypothesis drives the real Lua scripts (through the real
``ShardedPurchases`` driver) on the session Valkey and compares every answer with a small
whole-activity model.

The model knows the whole only: its total, who holds which order, the units held by claims a
crashed gateway left behind, and the units in transit between parts. It decides every
outcome; which part sells a unit is Redis's business, checked by the per-part invariants.
A step may be a purchase, a repeat, a cancel, a restock, a gateway dying mid-borrow (a claim
left, units in transit), time passing a claim's lease, a stale claim released, or a stranded
transfer delivered (what ``seckill reconcile --repair`` does).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from redis.commands.core import Script

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL, parse_new_activity
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import close_client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.purchase.borrowing import ShardedPurchases
from tests.support.timing import iso
from tests.support.valkey import connect

USERS = st.sampled_from([f"user{i}" for i in range(8)])
QUANTITY = st.integers(1, 3)
COUNTERS = ("total", "remaining", "held", "sold", "lent", "borrowed")
# purchase.lua's CLAIM_LEASE_MS is 10 s: a claim made this much older has outlived it.
LEASE_PASSED_MS = 11_000
UNAVAILABLE = "unavailable"  # ShardedPurchases raised errors.Unavailable


class Server:
    """The session Valkey's client, shared by every example (each has its own key prefix)."""

    client: redis.Redis
    scripts: Scripts


@pytest.fixture(autouse=True, scope="module")
def _session_valkey(valkey: EmbeddedValkey) -> Iterator[None]:
    Server.client = connect(valkey.url)
    Server.scripts = Scripts(Server.client)
    yield
    close_client(Server.client)


@dataclasses.dataclass
class Claim:
    held: int  # units the claim holds on the buyer's home part
    aged: bool  # older than the lease: the buyer's next purchase takes it over


class ShardModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.client, self.scripts = Server.client, Server.scripts
        self.keys = KeySpace(f"model{uuid.uuid4().hex[:12]}")
        self.aid = f"a{uuid.uuid4().hex[:10]}"
        self.sharded = ShardedPurchases(self._run, self.keys, self.scripts, self._no_restore,
                                        self.client)
        self.shards, self.limit, self.total = 1, 1, 0
        self.orders: dict[str, tuple[str, int]] = {}  # user -> (order id, quantity)
        self.cancelled: dict[str, str] = {}  # user -> their latest cancelled order id
        self.claims: dict[str, Claim] = {}  # stranded claims, by user
        # units in transit: (donor tag, claim id) -> (units, home tag)
        self.transit: dict[tuple[str, str], tuple[int, str]] = {}
        self.issued: set[str] = set()  # every order id ever answered "ok"
        self.lose_lend = False  # the next lend that lends a unit loses its reply

    # -- the model ----------------------------------------------------------------------

    @property
    def sold(self) -> int:
        return sum(qty for _, qty in self.orders.values())

    @property
    def free(self) -> int:
        """Units any buyer may have: neither sold, held by a claim, nor in transit."""
        held = sum(c.held for c in self.claims.values())
        return self.total - self.sold - held - sum(u for u, _ in self.transit.values())

    def expected(self, uid: str, qty: int) -> tuple[str, int]:
        """What purchase.lua must answer before looking at the stock (or "decide"), and the
        units this buyer could have: the free ones and those of their own stale claim."""
        if uid in self.orders:
            return "already_purchased", 0
        if qty > self.limit:
            return "bad_quantity", 0
        claim = self.claims.get(uid)
        if claim is not None and not claim.aged:
            return "in_progress", 0
        return "decide", self.free + (claim.held if claim else 0)

    def decided(self, uid: str, qty: int, avail: int, reply: list[Any], lost: bool) -> None:
        """A purchase that reached the stock: the buyer's stale claim (if any) was taken over;
        the model says whether it sells, and what it answers if not."""
        self.claims.pop(uid, None)
        # Units other claims hold, or in transit: they may come back, so too few units is
        # "try again" (503 held), never sold out nor insufficient stock.
        stranded = (sum(c.held for c in self.claims.values())
                    + sum(u for u, _ in self.transit.values()))
        if lost:  # a donor whose answer was lost is not asked again: sold, or "try again"
            assert reply[0] in ("ok", UNAVAILABLE), (reply, avail, qty)
        elif stranded and avail < qty:
            assert reply == [UNAVAILABLE], (reply, avail, qty, stranded)
        elif reply[0] == "sold_out":
            assert avail == 0, f"sold_out while {avail} units were to be had"
        elif avail < qty:
            assert avail > 0 and reply == ["insufficient_stock", avail], (reply, avail, qty)
        if reply[0] == "ok":
            assert avail >= qty, (reply, avail, qty)
            order_id = str(reply[1])
            assert order_id not in self.issued, f"order id {order_id} answered twice"
            self.issued.add(order_id)
            self.orders[uid] = (order_id, qty)
        else:
            assert avail < qty or lost, (reply, avail, qty)

    # -- Redis ------------------------------------------------------------------------

    @property
    def tags(self) -> tuple[str, ...]:
        return part_tags(self.aid, self.shards)

    def home(self, uid: str) -> str:
        return self.tags[home_part(uid, self.shards)]

    def _run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        reply = script(keys=keys, args=args, client=self.client)
        if self.lose_lend and script is self.scripts.lend and int(reply[1]) > 0:
            # The donor lent, the gateway never read it: the units are in transit.
            self.lose_lend = False
            self.transit[(keys[0], str(args[0]))] = (int(reply[1]), str(args[2]))
            raise errors.Unavailable(detail="lost reply")
        return reply

    def _no_restore(self, aid: str) -> None:
        raise AssertionError(f"a part of {aid} was missing: nothing here loses one")

    def remaining_of(self, tag: str) -> int:
        return int(self.client.hget(self.keys.meta(tag), "remaining") or 0)

    # -- the steps ----------------------------------------------------------------------

    @initialize(shards=st.integers(1, 8), total=st.integers(0, 30), limit=st.integers(1, 3))
    def create(self, shards: int, total: int, limit: int) -> None:
        activity = parse_new_activity({
            "id": self.aid, "name": "Model phone", "total": total, "per_user_limit": limit,
            "shards": shards, "starts_at": iso(-60), "ends_at": iso(3600)})
        assert ActivityStore(self.client, self.keys, self.scripts).create(activity)
        self.shards, self.limit, self.total = shards, limit, total

    @rule(uid=USERS, qty=QUANTITY, lose=st.booleans())
    def purchase(self, uid: str, qty: int, lose: bool) -> None:
        """The real protocol; ``lose``: one donor's answer to a lend is lost on the way."""
        outcome, avail = self.expected(uid, qty)
        in_transit = dict(self.transit)
        self.lose_lend = lose
        try:
            if self.shards > 1:
                reply = self.sharded.purchase(self.aid, uid, qty, self.shards, ())
            else:
                reply = self.scripts.purchase(keys=self.keys.activity_keys(self.aid),
                                              args=[uid, qty, self.aid, 0], client=self.client)
        except errors.Unavailable:
            reply = [UNAVAILABLE]
        finally:
            self.lose_lend = False
        lost = sum(u for key, (u, _) in self.transit.items() if key not in in_transit)
        if outcome == "already_purchased":
            assert reply == ["already_purchased", self.orders[uid][0]], reply
        elif outcome != "decide":
            assert reply[0] == outcome, (reply, outcome)
        else:
            self.decided(uid, qty, avail - lost, reply, lost > 0)

    @precondition(lambda self: self.shards > 1)
    @rule(uid=USERS, qty=QUANTITY, lends=st.integers(0, 7))
    def gateway_dies_mid_borrow(self, uid: str, qty: int, lends: int) -> None:
        """What purchase() does, stopped after the home part answered "borrow" and ``lends``
        donors lent: a claim holding units, and perhaps units in transit, are left."""
        outcome, avail = self.expected(uid, qty)
        home = self.home(uid)
        claim = self.claims.get(uid)
        at_home = self.remaining_of(home) + (claim.held if claim else 0)
        reply = self.scripts.purchase(keys=self.keys.part_keys(home),
                                      args=[uid, qty, self.aid, 0], client=self.client)
        if outcome == "already_purchased":
            assert reply == ["already_purchased", self.orders[uid][0]], reply
            return
        if outcome != "decide":
            assert reply[0] == outcome, (reply, outcome)
            return
        if at_home >= qty:  # one script sold it at home: nothing to die between
            self.decided(uid, qty, avail, reply, False)
            return
        assert reply[0] == "borrow" and int(reply[2]) == qty - at_home, (reply, at_home)
        claim_id, need = str(reply[1]), qty - at_home
        self.claims[uid] = Claim(held=at_home, aged=False)
        home_index = home_part(uid, self.shards)
        for step in range(1, min(lends, self.shards - 1) + 1):
            donor = self.tags[(home_index + step) % self.shards]
            had = self.remaining_of(donor)
            lent = self.scripts.lend(
                keys=[self.keys.meta(donor), self.keys.transfers(donor)],
                args=[claim_id, need, home, uid], client=self.client)
            assert lent[0] == "lent" and int(lent[1]) == min(need, had), (lent, need, had)
            if int(lent[1]):
                self.transit[(self.keys.meta(donor), claim_id)] = (int(lent[1]), home)
                need -= int(lent[1])
            if need == 0:
                break

    @precondition(lambda self: any(not c.aged for c in self.claims.values()))
    @rule(data=st.data())
    def lease_passes(self, data: st.DataObject) -> None:
        """Time passes, the test's way: purchase.lua compares Redis's clock with the time at
        the head of the claim ("<ms>:<seq>|<held>"). Waiting out the 10 s lease per step is
        too slow, so the claim is rewritten 11 s older. The transfers lent to it keep the
        claim id they were lent under, as a crash leaves them."""
        uid = data.draw(st.sampled_from(sorted(u for u, c in self.claims.items() if not c.aged)))
        key = self.keys.claims(self.home(uid))
        stamp, rest = str(self.client.hget(key, uid)).split(":", 1)
        self.client.hset(key, uid, f"{int(stamp) - LEASE_PASSED_MS}:{rest}")
        self.claims[uid].aged = True

    @precondition(lambda self: any(c.aged for c in self.claims.values()))
    @rule(data=st.data())
    def release_stale_claim(self, data: st.DataObject) -> None:
        """``seckill reconcile --repair``: a stale claim's units back to its part's stock."""
        uid = data.draw(st.sampled_from(sorted(u for u, c in self.claims.items() if c.aged)))
        keys = [self.keys.meta(self.home(uid)), self.keys.claims(self.home(uid))]
        value = str(self.client.hget(keys[1], uid))
        reply = self.scripts.release_claim(keys=keys, args=[uid, value], client=self.client)
        assert reply == ["released", self.claims.pop(uid).held], reply
        again = self.scripts.release_claim(keys=keys, args=[uid, value], client=self.client)
        assert again == ["changed"], again

    @precondition(lambda self: bool(self.transit))
    @rule(data=st.data())
    def deliver_stranded_transfer(self, data: st.DataObject) -> None:
        """``seckill reconcile --repair`` delivers one donor's transfer record to its home
        part with receive.lua: exactly once, and each donor's, when one claim borrowed from
        several (a receipt keyed by claim alone lost the second donor's units)."""
        donor, claim_id = data.draw(st.sampled_from(sorted(self.transit)))
        units, home = self.transit.pop((donor, claim_id))
        keys = [self.keys.meta(home), self.keys.received(home)]
        part = [self.keys.meta(tag) for tag in self.tags].index(donor)
        args: list[str | int] = [claim_id, units, part]
        first = self.scripts.receive(keys=keys, args=args, client=self.client)
        assert first == ["delivered"], (first, donor, claim_id, units)
        again = self.scripts.receive(keys=keys, args=args, client=self.client)
        assert again == ["already"], again

    @precondition(lambda self: bool(self.orders or self.cancelled))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """cancel.lua on the buyer's home part (or a repeat of their last cancel)."""
        uid = data.draw(st.sampled_from(sorted(self.orders.keys() | self.cancelled.keys())))
        live = uid in self.orders
        order_id, qty = self.orders[uid] if live else (self.cancelled[uid], 1)
        reply = self.scripts.cancel(keys=self.keys.cancel_keys(self.home(uid)),
                                    args=[order_id, uid, qty, self.aid], client=self.client)
        if not live:
            assert reply == ["already_cancelled"], reply
            return
        assert reply[0] == "ok", reply
        del self.orders[uid]
        self.cancelled[uid] = order_id
        self.sharded.forget(self.aid)

    @rule(add=st.integers(-6, 6))
    def restock(self, add: int) -> None:
        fits = add >= 0 or self.free >= -add  # only unsold units are ever removed
        if self.shards > 1:
            try:
                self.sharded.restock(self.client, self.aid, add, self.shards)
                done = True
            except errors.InsufficientStock:
                done = False
        else:
            reply = self.scripts.restock(keys=[self.keys.meta(self.aid)], args=[add, MAX_TOTAL],
                                         client=self.client)
            done = reply[0] == "ok"
        assert done == fits, (add, self.free)
        self.total += add if done else 0
        self.sharded.forget(self.aid)

    # -- after every step -----------------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        for tag in self.tags:
            pipe.hgetall(self.keys.meta(tag))
            pipe.hgetall(self.keys.buyers(tag))
            pipe.hgetall(self.keys.claims(tag))
            pipe.xrange(self.keys.orders(tag))
        replies = pipe.execute()
        sums = dict.fromkeys(COUNTERS, 0)
        buyers: dict[str, str] = {}
        claims: dict[str, int] = {}
        live: dict[str, tuple[str, int]] = {}  # from the streams' purchase and cancel events
        for part, tag in enumerate(self.tags):
            meta, part_buyers, part_claims, stream = replies[4 * part: 4 * part + 4]
            n = {f: int(meta.get(f, 0)) for f in COUNTERS}
            assert n["total"] == n["remaining"] + n["held"] + n["sold"], (tag, n)
            assert min(n.values()) >= 0, (tag, n)
            for field in COUNTERS:
                sums[field] += n[field]
            for uid, order_id in part_buyers.items():
                assert uid not in buyers, f"{uid} has orders on two parts"
                assert home_part(uid, self.shards) == part, f"{uid} bought away from home"
                assert int(order_id.rsplit("-", 1)[1]) % self.shards == part, order_id
                buyers[uid] = order_id
            for uid, value in part_claims.items():
                assert home_part(uid, self.shards) == part, f"{uid} claimed away from home"
                claims[uid] = int(value.rsplit("|", 1)[1])
            for _, event in stream:
                if event["type"] == "purchase":
                    assert event["user"] not in live, f"{event['user']} bought twice"
                    live[event["user"]] = (event["order_id"], int(event["quantity"]))
                else:
                    assert live.pop(event["user"])[0] == event["order_id"], event
        assert buyers == {uid: order_id for uid, (order_id, _) in self.orders.items()}
        assert live == self.orders
        assert claims == {uid: c.held for uid, c in self.claims.items()}
        in_transit = sum(u for u, _ in self.transit.values())
        assert sums["total"] + sums["lent"] - sums["borrowed"] == self.total, sums
        assert sums["sold"] == self.sold, sums
        assert sums["lent"] - sums["borrowed"] == in_transit, (sums, self.transit)
        assert sums["held"] == sum(c.held for c in self.claims.values()), sums
        assert sums["remaining"] == self.free, (sums, self.free)
        # The whole: what is not sold remains, whether free, held by a claim or in transit.
        assert sums["sold"] + sums["remaining"] + sums["held"] + in_transit == self.total

    def teardown(self) -> None:
        stale = list(self.client.scan_iter(match=f"{self.keys.prefix}:*", count=1000))
        if stale:
            self.client.delete(*stale)


ShardModel.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None, database=None)
TestShardModel = ShardModel.TestCase
