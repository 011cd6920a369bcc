"""The operator's levers on a live sale: pause, resume, end now; and the list of activities.

A lever takes effect in the sale first: every part's meta hash, in the order the operator sent
the levers (``seckill.store.sale.activity.levers``: the sale scripts read ``paused`` and ``ends_ms``
there, so a process with a stale copy still cannot sell); then the database records it, never
over a later lever; then it is announced on the channel every process listens to, which drops
their copies: the next request loads the new state. Should the announcement be lost, each
process's refresher reads it within ``SECKILL_META_TTL``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import redis

from seckill.domain import errors
from seckill.domain.activities import Activity
from seckill.domain.clock import iso_from_ms, now_ms
from seckill.sql.book import OrderBook
from seckill.store.plumbing.parts import part_tags
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.levers import ENDS, PAUSED, LeverRecords
from seckill.store.sale.activity.meta import activity_from_meta
from seckill.store.sale.activity.recovery import Restorer

log = logging.getLogger(__name__)

MAX_PAGE = 200


class SaleControls:
    """Pause, resume and end an activity; list activities with their live numbers."""

    def __init__(self, store: ActivityStore, book: OrderBook, restorer: Restorer,
                 levers: LeverRecords) -> None:
        self.store = store
        self.book = book
        self.restorer = restorer
        self.levers = levers

    def current(self, aid: str) -> Activity:
        """The activity as Redis holds it now (rebuilt from the database if Redis lost it);
        UnknownActivity if neither knows it."""
        activity = self.store.load(aid)
        if activity is None and self.restorer.ensure(aid):
            activity = self.store.load(aid)
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        return activity

    def edit(self, aid: str, changes: dict[str, str | int | None]) -> Activity:
        """Change what no sale decision reads (:func:`parse_edit`'s fields); returns the
        activity as it is now."""
        activity = self.current(aid)
        self.book.update_activity(aid, **changes)
        self._write(activity, changes)
        return self.current(aid)

    def set_paused(self, aid: str, paused: bool, version: int) -> Activity:
        """Pause (or resume) the sale of ``aid``; returns the activity as it is now. ``version``
        orders the levers (when the operator's request arrived, epoch µs): a pause or resume
        sent before the one in force changes nothing."""
        activity = self.current(aid)
        token = self.levers.mark(aid)
        _, value, version = self.levers.apply(aid, activity.shards, PAUSED,
                                              "1" if paused else "0", version)
        self._announce(aid, PAUSED)
        self.levers.record(aid, token, (PAUSED, value == "1", version))
        return dataclasses.replace(activity, paused=value == "1")

    def end(self, aid: str, version: int) -> Activity:
        """End the sale of ``aid`` now (Redis's now: no purchase is decided after the answered
        ``ends_ms``); AlreadyEnded if its window is already over."""
        activity = self.current(aid)
        if now_ms() >= activity.ends_ms:
            raise errors.AlreadyEnded(activity=aid)
        token = self.levers.mark(aid)
        _, value, version = self.levers.apply(aid, activity.shards, ENDS, "", version)
        self._announce(aid, ENDS)
        try:
            self.levers.record(aid, token, (ENDS, int(value), version))
        except errors.Unavailable as exc:  # in force all the same: say from when
            exc.extra["ends_at"] = iso_from_ms(int(value))
            raise
        return dataclasses.replace(activity, ends_ms=int(value))

    def _write(self, activity: Activity, changes: dict[str, str | int | None]) -> None:
        """Set (None: remove) meta fields on every part, then tell every process."""
        client = self.store.client
        kept = [item for field, value in changes.items() if value is not None
                for item in (field, value)]
        gone = [field for field, value in changes.items() if value is None]
        for tag in part_tags(activity.id, activity.shards):
            if kept:
                client.hset(self.store.keys.meta(tag), items=kept)
            if gone:
                client.hdel(self.store.keys.meta(tag), *gone)
        self._announce(activity.id, ", ".join(changes))

    def _announce(self, aid: str, what: str) -> None:
        """Tell every process that ``aid`` changed (they drop their copies)."""
        try:
            self.store.client.publish(self.store.keys.stock_returned_channel(), aid)
        except redis.RedisError:
            log.warning("could not announce the change of %s to %s; every process reads it "
                        "within SECKILL_META_TTL", what, aid)

    def page(self, after: str | None, limit: int, wanted: str | None, rebuild: bool = True
             ) -> tuple[list[Activity], str | None]:
        """Up to ``limit`` activities in id order after ``after`` whose console state (see
        :meth:`Activity.console_state`) is ``wanted`` (any: None); and the cursor of the next page.
        One Redis lost is rebuilt from the database (``rebuild``) or shown as the database
        holds it (its ``remaining`` then the total: a reader that must not write)."""
        found: list[Activity] = []
        cursor = after
        while len(found) < limit:
            ids = self.book.activity_ids_after(cursor, MAX_PAGE)
            if not ids:
                return found, None
            at = now_ms()
            for activity in self._load(ids, rebuild):
                cursor = activity.id
                if wanted is None or activity.console_state(at) == wanted:
                    found.append(activity)
                    if len(found) == limit:
                        break
            else:
                cursor = ids[-1]
        more = bool(self.book.activity_ids_after(cursor, 1))
        return found, cursor if more else None

    def _load(self, ids: Sequence[str], rebuild: bool) -> list[Activity]:
        """The activities of ``ids`` as Redis holds them (in one round trip, and one more for
        sharded ones); one Redis lost is rebuilt from the database, one deleted is skipped."""
        client = self.store.client
        pipe = client.pipeline(transaction=False)
        for aid in ids:
            pipe.hgetall(self.store.keys.meta(aid))
        replies = pipe.execute()
        found = [activity_from_meta(aid, fields)
                 for aid, fields in zip(ids, replies, strict=True) if fields]
        summed = {a.id: w for a, w in zip(found, self.store.whole(found), strict=True) if w}
        loaded = [summed.get(aid) or self._missing(aid, rebuild) for aid in ids]
        return [activity for activity in loaded if activity is not None]

    def _missing(self, aid: str, rebuild: bool) -> Activity | None:
        """An activity the database knows and Redis does not (all of it, or a part): rebuilt,
        or as the database holds it; None if it is gone from both meanwhile."""
        if not rebuild:
            return self.book.load_activity(aid)
        try:
            return self.current(aid)
        except errors.UnknownActivity:
            return None

