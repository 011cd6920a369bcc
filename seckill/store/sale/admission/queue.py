"""The admission queue of ``queue`` and ``draw`` activities, in Redis next to the activity.

Two scripts (``lua/queue_join.lua``, ``lua/queue_status.lua``, sharing
``lua/include/queue_view.lua``) keep the queue: a join places the user, a status call says
where they stand. Each first moves the queue forward (lapses the admissions that ran out,
admits from the front into the room the units left make), so the queue advances whenever
anyone asks and no process runs a timer: a restart or a kill -9 loses nothing, and any number
of gateways share one queue. A poll is one round trip. The keys share the activity's hash tag
(one cluster slot), as the purchase's do. Why the order is a hash and not a shuffle at the
start: seckill/domain/admission.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis

from seckill.domain import admission, errors
from seckill.domain.activities import Activity
from seckill.domain.admission import QueueView
from seckill.domain.clock import iso_from_ms
from seckill.store.plumbing.connection import Client, ScriptWire
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import FollowUp
from seckill.store.sale.activity.recovery import Restorer

log = logging.getLogger(__name__)
_NOT_A_VIEW = frozenset({"uninitialized", "first_come"})  # what _run raises for


def queue_keys(keys: KeySpace, aid: str) -> list[str]:
    """The KEYS of ``lua/queue_join.lua`` and ``lua/queue_status.lua``."""
    return [keys.meta(aid), keys.buyers(aid), keys.queue(aid), keys.admitted(aid),
            keys.lapsed(aid), keys.expired(aid), keys.joined(aid)]


class AdmissionQueue:
    """Joins, polls and the operator's factor of the activities whose queue hands out URLs."""

    def __init__(self, client: Client, wire: ScriptWire, keys: KeySpace, scripts: Scripts,
                 restorer: Restorer, admission_ttl: int) -> None:
        self.client = client
        self.wire = wire
        self.keys = keys
        self.scripts = scripts
        self.restorer = restorer
        self.ttl_ms = admission_ttl * 1000  # an admission lasts as long as a purchase URL

    def _run(self, join: bool, aid: str, args: list[Any]) -> list[Any]:
        script = self.scripts.queue_join if join else self.scripts.queue_status
        for attempt in (1, 2):
            reply: list[Any] = self.wire.run_script(script, queue_keys(self.keys, aid), args)[0]
            if reply[0] != "uninitialized" or attempt == 2:
                break
            self.restorer.ensure(aid)  # Redis lost the activity: rebuilt from the database
        if reply[0] == "uninitialized":
            raise errors.Uninitialized()
        if reply[0] == "first_come":
            raise errors.BadRequest("this activity has no queue: its purchase URL is at "
                                    "GET /seckill/url", field="admission")
        return reply

    def join(self, activity: Activity, uid: str, account: str | None = None) -> QueueView:
        """Join (again: the place is kept); where the user then stands, or the refusal.
        ``uid`` is the buyer: on a person-limited activity the person's key, and ``account``
        the account joining for them (the person's other accounts get 409
        ``already_joined``)."""
        seed = activity.draw_seed or ""
        joiner = "" if account is None or account == uid else account
        reply = self._run(True, activity.id,
                          [uid, self.ttl_ms, admission.rank(seed, uid), joiner])
        outcome = reply[0]
        if outcome == "not_open":
            raise errors.QueueNotOpen(queue_opens_at=iso_from_ms(int(reply[1])))
        if outcome == "ended":
            raise errors.Ended()
        if outcome == "sold_out":
            raise errors.SoldOut()
        if outcome == "entries_closed":
            raise errors.EntriesClosed()
        if outcome == "already_purchased":
            raise errors.AlreadyPurchased(order_id=str(reply[1]).split("|")[0])
        if outcome == "hold_expired":
            raise errors.HoldExpired(order_id=str(reply[1]))
        if outcome == "already_joined":
            raise errors.AlreadyJoined()
        return QueueView.of(reply)

    def status(self, aid: str, uid: str, account: str | None = None) -> QueueView:
        """Where the user stands (after the queue moved forward): one round trip. ``uid``
        is the buyer: on a person-limited activity the person's key, and ``account`` the
        account asking (the person's place is the joining account's alone)."""
        asking = "" if account is None or account == uid else account
        return QueueView.of(self._run(False, aid, [uid, self.ttl_ms, "", asking]))

    def state(self, aid: str) -> QueueView:
        """The queue as a whole (``GET /seckill/<aid>/queue/state``)."""
        return QueueView.of(self._run(False, aid, ["", self.ttl_ms, ""]))

    def states(self, aids: Sequence[str]) -> list[QueueView]:
        """Each queue as a whole (:meth:`state`), in one round trip whatever their number; one
        whose reply is not a view (the script to load again, Redis lost the activity, an
        error) is asked again on its own, which says why."""
        if not aids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for aid in aids:
            keys = queue_keys(self.keys, aid)
            # execute_command: redis-py's cluster pipeline refuses its evalsha method, though
            # the keys share a slot and it routes the command by them.
            pipe.execute_command("EVALSHA", self.scripts.queue_status.sha, len(keys), *keys,
                                 "", self.ttl_ms, "")
        replies = pipe.execute(raise_on_error=False)
        return [self.state(aid) if isinstance(reply, Exception) or reply[0] in _NOT_A_VIEW
                else QueueView.of(reply) for aid, reply in zip(aids, replies, strict=True)]

    def after_purchase(self, aid: str, uid: str) -> FollowUp:
        """What a purchase on ``aid`` sends after its script, in the same send: if the user
        bought, their admission ends and the next user is admitted (no second round trip)."""
        keys = queue_keys(self.keys, aid)
        return FollowUp(("EVALSHA", self.scripts.queue_status.sha, len(keys), *keys, uid,
                         self.ttl_ms, "forget"), lambda: self.bought(aid, uid))

    def bought(self, aid: str, uid: str) -> None:
        """The user bought: their admission ends now, and the next user is admitted in the
        same step. Best effort: if it fails, the admission lapses at its time instead."""
        try:
            self.wire.run_script(self.scripts.queue_status, queue_keys(self.keys, aid),
                                 [uid, self.ttl_ms, "forget"])
        except redis.RedisError as exc:
            log.warning("admission of %s in %s not ended after the purchase (%s); it lapses "
                        "on its own", uid, aid, type(exc).__name__)

    def position(self, aid: str, uid: str) -> int | None:
        """The user's place in the queue (1: next), None when not waiting."""
        place: Any = self.client.zrank(self.keys.queue(aid), uid)
        return None if place is None else int(place) + 1

    def set_factor(self, aid: str, factor: float) -> None:
        """The operator's admission factor, live: the next poll admits by it (kept in the
        database too, for a rebuild)."""
        self.restorer.book.set_admission_factor(aid, factor)
        self.client.hset(self.keys.meta(aid), "admission_factor", f"{factor:g}")
