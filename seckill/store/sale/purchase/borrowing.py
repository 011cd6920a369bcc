"""A purchase on a sharded activity: at home in one round trip, or borrowing from the parts.

A buyer's purchase runs on their home part (``seckill.store.plumbing.parts.home_part``), where
their order or claim is recorded: one purchase per user needs no cross-part step. When the home
part has too few units it holds what it has in a claim and answers "borrow"; the other parts
are asked in turn (``lua/lend.lua``, the fullest this process knows of first) until the claim
has its units or every part has been asked, and the home part settles (``lua/settle.lua``):
an order, or everything back into its stock and "sold out" only when no part had a unit.
Each step is one atomic script on one part; what a crash between two of them leaves (a claim
holding units, a transfer in transit) is taken over by the buyer's next purchase or repaired
by ``seckill reconcile --repair``, never sold twice. The invariants and why they hold: the
headers of the scripts, and docs/architecture.md's "Hot items".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.commands.core import Script

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL, counters_disagree, units_in_parts
from seckill.domain.people import script_buyer
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags, split_units
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.activities import PART_FIELDS

log = logging.getLogger(__name__)

Run = Callable[[Script, list[str], list[Any]], Any]
HELD_AT, UNLIMITED_AT = PART_FIELDS.index("held"), PART_FIELDS.index("unlimited")
# Pauses (s) before another attempt while units are held by other buyers' purchases.
HELD_RETRY_PAUSES = (0.01, 0.03, 0.09)
HELD = ("units of this item are held by purchases in progress and may come back; nothing was "
        "bought, try again in a moment")
INCONSISTENT = ("this activity's stock counters disagree; nothing is sold until an operator "
                "runs `seckill reconcile --repair`")


class ShardedPurchases:
    """Purchases on sharded activities, with what this process last saw of each part."""

    def __init__(self, run: Run, keys: KeySpace, scripts: Scripts,
                 restore: Callable[[str], None], client: Client) -> None:
        self.run = run  # a writing script, with the durability wait, in one round trip
        self.client = client  # reads of the parts' counters
        self.keys = keys
        self.scripts = scripts
        self.restore = restore
        # Per activity, the units each part had when this process last heard (inf: unknown):
        # the borrower asks the fullest parts first, so a borrow is usually one lend.
        self._left: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def purchase(self, aid: str, uid: str, quantity: int, shards: int,
                 rates: Sequence[tuple[int, int]], window: int = 0,
                 buyer: str | None = None, deadline_ms: int = 0) -> list[Any]:
        """The final script reply of one purchase (purchase.lua's, or settle.lua's after a
        borrow), for ``seckill.store.sale.purchase.stock`` to turn into an outcome. ``buyer`` (a
        person's key; default ``uid``) has the home part, so that all the accounts of one
        person meet there; the rate limit counts ``uid``. ``deadline_ms``: past it (Redis's
        clock), neither the home part's purchase nor its settlement decides anything.

        A refusal for lack of stock is only answered once no part holds or lends a unit
        (:func:`units_in_parts`): units held by another buyer's borrowing purchase come back
        within milliseconds (and a "sold out" while a part has units again is stale), so the
        purchase is tried again a few times; if they are still held, 503 ``held``, never a
        "sold out" that nginx and this process would go on repeating while units are left."""
        for pause in (*HELD_RETRY_PAUSES, None):
            reply = self._purchase_once(aid, uid, quantity, shards, rates, window, buyer,
                                        deadline_ms)
            if reply[0] not in ("sold_out", "insufficient_stock"):
                return reply
            free, in_flight = self.units(aid, shards)
            if not in_flight and (free == 0 or reply[0] == "insufficient_stock"):
                return reply
            if pause is not None:
                time.sleep(pause)  # gevent's sleep under gunicorn: other purchases go on
            rates = ()  # the rate counted this purchase once
        raise errors.Unavailable(HELD, detail="held")

    def units(self, aid: str, shards: int) -> tuple[int, int]:
        """The activity's units now, (free, held by claims or in transit between parts)."""
        return units_in_parts((part[1], part[HELD_AT], part[3], part[4])
                              for part in self.parts(self.client, aid, shards))

    def _purchase_once(self, aid: str, uid: str, quantity: int, shards: int,
                       rates: Sequence[tuple[int, int]], window: int, buyer: str | None,
                       deadline_ms: int) -> list[Any]:
        """One attempt of :meth:`purchase`: the home part, and a borrow when it has too few."""
        who = uid if buyer is None else buyer
        script_uid = script_buyer(uid, who)
        tags = part_tags(aid, shards)
        home = home_part(who, shards)
        tag = tags[home]
        rate_keys = [self.keys.rate(tag, "purchase", uid, window) for _, window in rates]
        rate_args = [n for rate in rates for n in rate]
        held = self.keys.payment_keys(tag) if window else []  # a payment window's keys
        reply = self._on_part(aid, self.scripts.purchase, self.keys.part_keys(tag) + held,
                              [script_uid, quantity, aid, deadline_ms], rate_keys, rate_args)
        if reply[0] == "payment_keys" and not held:
            return self._purchase_once(aid, uid, quantity, shards, (), 1, buyer, deadline_ms)
        if reply[0] == "ok":
            self.note(aid, shards, home, int(reply[2]))
        if reply[0] != "borrow":
            return list(reply)
        claim_id, need = str(reply[1]), int(reply[2])
        self.note(aid, shards, home, 0)
        collected, unanswered, disagreeing = 0, 0, 0
        lent_by: list[int] = []  # settle.lua's pairs: donor part, units it lent
        for donor in self.donors(aid, shards, home):
            lender = tags[donor]
            try:
                lent = self._on_part(aid, self.scripts.lend,
                                     [self.keys.meta(lender), self.keys.transfers(lender)],
                                     [claim_id, need - collected, tag, who])
            except errors.Unavailable as exc:
                # Perhaps lent, perhaps not: a unit it lent stays in transit until `seckill
                # reconcile --repair` delivers it. The other parts are still asked.
                log.warning("part %d of %s did not answer a lend for %s (%s)", donor, aid,
                            claim_id, exc.extra.get("detail", exc))
                unanswered += 1
                continue
            if lent[0] == "inconsistent":  # it lends nothing until repaired (lua/lend.lua)
                disagreeing += 1
                continue
            collected += int(lent[1])
            if int(lent[1]) > 0:
                lent_by += [donor, int(lent[1])]
            self.note(aid, shards, donor, int(lent[2]))
            if collected >= need:
                break
        settled = self._on_part(aid, self.scripts.settle, self.keys.settle_keys(tag) + held,
                                [script_uid, quantity, aid, claim_id, deadline_ms, *lent_by])
        if settled[0] == "ok":
            self.note(aid, shards, home, int(settled[2]))
        elif settled[0] == "superseded" or settled == ["expired"]:
            raise errors.Unavailable(
                "your purchase was interrupted; check your order status before retrying",
                detail=str(settled[0]))
        elif disagreeing and settled[0] in ("sold_out", "insufficient_stock"):
            # The units may be on a part whose counters disagree: not "sold out" either.
            return ["inconsistent", f"{disagreeing} lending part(s)"]
        elif unanswered and settled[0] in ("sold_out", "insufficient_stock"):
            # A part that did not answer may have had the units: not "sold out" (fail closed).
            raise errors.Unavailable("part of the stock could not be reached; try again",
                                     detail="part_unavailable")
        return list(settled)

    def _on_part(self, aid: str, script: Script, keys: list[str], args: list[Any],
                 rate_keys: Sequence[str] = (), rate_args: Sequence[int] = ()) -> Any:
        """Run a script on one part; a part Redis lost is rebuilt once (one without the
        ``unlimited`` flag is given it from the database), then asked again (not counted
        against the rate again)."""
        reply = self.run(script, keys + list(rate_keys), args + list(rate_args))
        if reply[0] in ("uninitialized", "unmigrated"):
            self.restore(aid)
            reply = self.run(script, keys, args)
        return reply

    def donors(self, aid: str, shards: int, home: int) -> list[int]:
        """The other parts, the fullest this process knows of first; ties in turn from the
        home part, so that borrowers spread over the parts."""
        left = self._left.get(aid) or [math.inf] * shards
        others = [(home + step) % shards for step in range(1, shards)]
        return sorted(others, key=lambda part: -left[part])

    def note(self, aid: str, shards: int, part: int, remaining: int) -> None:
        """What a script said a part has left (-1, unlimited, counts as plenty)."""
        left = self._left.get(aid)
        if left is None or len(left) != shards:
            with self._lock:
                left = self._left.setdefault(aid, [math.inf] * shards)
        left[part] = math.inf if remaining < 0 else remaining

    def forget(self, aid: str | None = None) -> None:
        """Units came back (cancel, restock): what this process knew of the parts is stale."""
        with self._lock:
            if aid is None:
                self._left.clear()
            else:
                self._left.pop(aid, None)

    # -- the whole, from its parts ------------------------------------------------------

    def parts(self, client: Client, aid: str, shards: int) -> list[list[str | None]]:
        """Each part's ``PART_FIELDS`` and buyer count, part 0 first, in one round trip."""
        pipe = client.pipeline(transaction=False)
        self.ask_parts(pipe, aid, shards)
        return parts_of(pipe.execute())

    def ask_parts(self, pipe: Any, aid: str, shards: int) -> int:
        """Queue on ``pipe`` what :meth:`parts` reads; the number of replies, for
        :func:`parts_of` (several activities' parts then come in one round trip)."""
        for tag in part_tags(aid, shards):
            pipe.hmget(self.keys.meta(tag), PART_FIELDS)
            pipe.hlen(self.keys.buyers(tag))
        return 2 * shards

    def restock(self, client: Client, aid: str, add: int, shards: int) -> None:
        """Spread ``add`` units over the parts (removal: from the parts with the most unsold
        units). Each part's step is atomic (``lua/restock.lua``); a removal that finds units
        sold meanwhile puts back what it took and refuses, so it never takes sold units."""
        tags = part_tags(aid, shards)
        parts = self.parts(client, aid, shards)
        if any(part[0] is None for part in parts):
            self.restore(aid)
            parts = self.parts(client, aid, shards)
        if parts_disagree(parts):
            restock_refusal(["inconsistent"], add)
        if add >= 0:
            total, _, _ = numbers(parts)
            if total >= 0 and total + add > MAX_TOTAL:
                restock_refusal(["over_maximum", total], add)
            for part, share in enumerate(split_units(add, shards)):
                if share or part == 0:  # part 0 also says whether the stock is countable
                    restock_refusal(self._restock_part(aid, tags[part], share), add)
            return
        unsold = [int(part[1] or 0) for part in parts]
        left = -add
        if sum(unsold) < left:
            restock_refusal(["insufficient_stock", sum(unsold)], add)
        taken: list[tuple[str, int]] = []
        reply: Any = None
        for part in sorted(range(shards), key=lambda j: -unsold[j]):
            take = min(unsold[part], left)
            reply = self._restock_part(aid, tags[part], -take) if take else None
            if reply is not None and reply[0] == "inconsistent":
                break
            if reply is not None and reply[0] == "ok":
                taken.append((tags[part], take))
                left -= take
            if left == 0:
                return
        for tag, take in taken:  # units were sold meanwhile: give back what was taken
            self.scripts.restock(keys=[self.keys.meta(tag)], args=[take, MAX_TOTAL])
        if reply is not None and reply[0] == "inconsistent":
            restock_refusal(reply, add)
        restock_refusal(["insufficient_stock", sum(unsold) - (-add - left)], add)

    def _restock_part(self, aid: str, tag: str, add: int) -> Any:
        """``lua/restock.lua`` on one part; a part without the ``unlimited`` flag (written
        before it) is given it from the database once, then asked again."""
        reply = self.scripts.restock(keys=[self.keys.meta(tag)], args=[add, MAX_TOTAL])
        if reply[0] == "unmigrated":
            self.restore(aid)
            reply = self.scripts.restock(keys=[self.keys.meta(tag)], args=[add, MAX_TOTAL])
        return reply


def parts_of(replies: Sequence[Any]) -> list[list[str | None]]:
    """:meth:`ShardedPurchases.parts` from the replies of :meth:`ShardedPurchases.ask_parts`."""
    return [[*replies[i], replies[i + 1]] for i in range(0, len(replies), 2)]


def numbers(parts: Sequence[Sequence[str | None]]) -> tuple[int, int, int]:
    """(total, sold, buyers) of the whole from :meth:`ShardedPurchases.parts`: total is the
    sum of (total + lent - borrowed), so units in transit between parts still count; -1 when
    unlimited (part 0's flag says so, never a counter)."""
    if parts[0][UNLIMITED_AT] == "1":
        total = -1
    else:
        total = sum(int(part[0] or 0) + int(part[3] or 0) - int(part[4] or 0) for part in parts)
    sold = sum(int(part[2] or 0) for part in parts)
    buyers = sum(int(part[len(PART_FIELDS)] or 0) for part in parts)
    return total, sold, buyers


def parts_disagree(parts: Sequence[Sequence[str | None]]) -> bool:
    """Whether a part's counters disagree (:func:`counters_disagree`): its purchases refuse."""
    return any(counters_disagree(part[0], part[1], part[2], part[HELD_AT], part[UNLIMITED_AT])
               for part in parts)


def restock_refusal(reply: Sequence[Any], add: int) -> None:
    """Raise what a refused ``lua/restock.lua`` reply means for the operator (nothing if ok)."""
    if reply[0] == "ok":
        return
    if reply[0] == "insufficient_stock":
        raise errors.InsufficientStock(
            f"only {int(reply[1])} units are unsold", remaining=int(reply[1]))
    if reply[0] == "over_maximum":
        raise errors.BadRequest(
            f"add {add} would take the total from {int(reply[1])} to {int(reply[1]) + add}, "
            f"over {MAX_TOTAL}, the largest total an activity may have", field="add",
            total=int(reply[1]))
    if reply[0] == "not_countable":
        raise errors.BadRequest("unlimited stock and packets cannot be restocked")
    if reply[0] == "inconsistent":
        raise errors.Unavailable(INCONSISTENT, detail="inconsistent")
    if reply[0] == "uninitialized":
        raise errors.Uninitialized()
    raise errors.SeckillError(f"unexpected script reply {reply[0]!r}")
