"""The operator's levers (pause, resume, end, restock) in the order they were sent, in the sale
first and in the database after it, never reversed.

Redis decides the sale, so a lever takes effect there first (``lua/lever.lua`` on the
activity's own part, then on its other parts); the database is written afterwards with the
lever's version and only over an older one (``OrderBook.record_lever``). The version of a
pause or an end is the moment the operator's request arrived: the later command wins however
late an earlier one is run. Before touching Redis a lever marks the activity in the
``levers:pending`` hash; the mark is removed once the database has it. A database away or hung
leaves the mark, and the orders worker's catch-up (:meth:`LeverRecords.catch_up_all`) writes
the sale's state into the database once it answers, and repeats the lever on any part a
failure left behind.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

import redis
import sqlalchemy as sa

from seckill.domain import errors
from seckill.sql.book import OrderBook
from seckill.sql.engine import database_unavailable
from seckill.store.plumbing.connection import Client, unavailable
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.scripts import Scripts

log = logging.getLogger(__name__)

PAUSED, ENDS, TOTAL = "paused", "ends_ms", "total"


class LeverRecords:
    """Levers applied to an activity's parts in order, and recorded in the database after."""

    def __init__(self, client: Client, keys: KeySpace, scripts: Scripts, book: OrderBook,
                 bound: float = 3.0) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts
        self.book = book
        self.bound = bound  # seconds a lever waits for the database (SECKILL_DATABASE_TIMEOUT)

    def mark(self, aid: str) -> str:
        """Note that the database may lag ``aid``'s levers (before a lever touches Redis);
        the token to forget the mark with once it no longer does."""
        token = secrets.token_hex(8)
        self.client.hset(self.keys.levers_pending(), aid, token)
        return token

    def apply(self, aid: str, shards: int, field: str, value: str, version: int
              ) -> tuple[bool, str, int]:
        """Apply a pause (``value`` "1"/"0") or an end on every part, the activity's own first:
        (whether this lever stands, the field's value now, its version). An end's value is
        the latest of the parts' ends (each is its own clock's now when the end reached it).
        AlreadyEnded when the sale's window was over before; 503 when a part did not answer
        (those that did keep the lever; the catch-up repeats it on the others)."""
        tags = part_tags(aid, shards)
        first = self._lever(tags[0], field, value, version)
        if first[0] == "ended":
            raise errors.AlreadyEnded(activity=aid)
        if first[0] == "superseded":
            return False, str(first[2]), int(first[1])
        version, now = int(first[1]), str(first[2])
        ends = [int(now)] if field == ENDS else []
        for done, tag in enumerate(tags[1:], start=1):
            try:
                reply = self._lever(tag, field, now, version)
            except redis.RedisError as exc:
                # Not the generic 503: the parts before this one keep the lever, and the
                # operator is told so (same detail as the generic one).
                raise errors.Unavailable(
                    f"the {_WORDS[field]} is in force on {done} of the {shards} parts of the "
                    "stock; the others follow within seconds (the database too); nothing to "
                    "do but check the activity", detail=unavailable(exc).extra["detail"],
                    applied="partly") from exc
            if field == ENDS and reply[0] in ("ok", "ended"):
                ends.append(int(reply[2] if reply[0] == "ok" else reply[1]))
        return True, str(max(ends)) if ends else now, version

    def stamp_total(self, aid: str, shards: int) -> tuple[int, int]:
        """After a restock: (the activity's total now, its version), stamped on its own part
        after every earlier restock (a sharded total is summed from the parts afterwards)."""
        reply = self._lever(part_tags(aid, shards)[0], TOTAL, "", 0)
        if shards == 1:
            return int(reply[2]), int(reply[1])
        return self._sharded_total(aid, shards), int(reply[1])

    def record(self, aid: str, token: str, *fields: tuple[str, int | bool, int]) -> None:
        """Write ``(field, value, version)`` to the database, then forget ``aid``'s mark,
        waiting at most ``bound`` seconds. A database away, hung or slower than that: 503
        ``database`` saying the lever is in force in the sale and will be recorded (the write
        may still land; if not, the catch-up makes it: either way never over a later lever)."""
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                for field, value, version in fields:
                    self.book.record_lever(aid, field, value, version)
            except BaseException as exc:  # handed to the caller below
                outcome.append(exc)
                return
            outcome.append(None)
            self.forget(aid, token)

        # A thread of its own: the operator's answer keeps its bound even when one database
        # call after another waits out its own timeout (a new connection, then a statement).
        writer = threading.Thread(target=write, name="seckill-lever-record", daemon=True)
        writer.start()
        writer.join(self.bound)
        failure = outcome[0] if outcome else sa.exc.TimeoutError(
            f"the database did not record the lever within {self.bound:g} s")
        if failure is None:
            return
        if not isinstance(failure, sa.exc.SQLAlchemyError) or database_unavailable(
                failure) is None:
            raise failure
        log.warning("activity %s: a lever is in force in the sale, not yet in the database "
                    "(%s); the orders worker records it when it answers", aid, failure)
        raise errors.Unavailable(
            "the change is in force in the sale; the database did not answer in time and "
            "records it as soon as it does (the orders worker catches up)",
            detail="database", applied="sale", pending="database") from failure

    def forget(self, aid: str, token: str) -> None:
        """Drop ``aid``'s mark if it is still ``token`` (a failure leaves it: harmless)."""
        try:
            self.scripts.lever_recorded(keys=[self.keys.levers_pending()], args=[aid, token])
        except redis.RedisError as exc:
            log.info("activity %s: the levers' mark stays (%s); the catch-up drops it", aid, exc)

    # -- the catch-up (the orders worker) ------------------------------------------------

    def catch_up_all(self) -> int:
        """Record every marked activity's levers; returns how many were caught up."""
        pending = self.client.hgetall(self.keys.levers_pending())
        done = 0
        for aid, token in pending.items():
            try:
                if self.catch_up(str(aid), str(token)):
                    done += 1
            except sa.exc.SQLAlchemyError as exc:
                log.info("levers of %s not recorded yet (database: %s)", aid, exc)
                return done  # the database is away: try again at the next pass
        return done

    def catch_up(self, aid: str, token: str) -> bool:
        """Repeat part 0's pause and end on every part, write them and the total into the
        database with their versions, then forget the mark. False if Redis has no such
        activity (its mark is dropped: a rebuild starts from the database)."""
        own = self.keys.meta(aid)
        fields = self.client.hmget(own, ["shards", PAUSED, "paused_v", ENDS, "ends_ms_v", "total_v",
                                         TOTAL])
        if fields[3] is None:
            self.forget(aid, token)
            return False
        shards = int(fields[0] or 1)
        records: list[tuple[str, int | bool, int]] = []
        if fields[2]:
            self._follow(aid, shards, PAUSED, str(fields[1]), int(fields[2]))
            records.append((PAUSED, fields[1] == "1", int(fields[2])))
        if fields[4]:
            ends = self._follow(aid, shards, ENDS, str(fields[3]), int(fields[4]))
            records.append((ENDS, ends, int(fields[4])))
        if fields[5]:
            total = int(fields[6] or 0) if shards == 1 else self._sharded_total(aid, shards)
            records.append((TOTAL, total, int(fields[5])))
        for field, value, version in records:
            self.book.record_lever(aid, field, value, version)
        self.forget(aid, token)
        return True

    def _follow(self, aid: str, shards: int, field: str, value: str, version: int) -> int:
        """Repeat a lever on the parts after the first; an end: the latest of the parts'."""
        latest = int(value) if field == ENDS else 0
        for tag in part_tags(aid, shards)[1:]:
            reply = self._lever(tag, field, value, version)
            if field == ENDS and reply[0] in ("ok", "superseded"):
                latest = max(latest, int(reply[2]))
            elif field == ENDS and reply[0] == "ended":
                latest = max(latest, int(reply[1]))
        return latest

    def _lever(self, tag: str, field: str, value: str, version: int) -> Any:
        reply = self.scripts.lever(keys=[self.keys.meta(tag)], args=[field, value, version])
        if reply[0] == "uninitialized":
            raise errors.Uninitialized()
        return reply

    def _sharded_total(self, aid: str, shards: int) -> int:
        """The whole's total now: the parts' totals, with the units in transit."""
        pipe = self.client.pipeline(transaction=False)
        for tag in part_tags(aid, shards):
            pipe.hmget(self.keys.meta(tag), ["total", "lent", "borrowed"])
        return sum(int(t or 0) + int(lent or 0) - int(borrowed or 0)
                   for t, lent, borrowed in pipe.execute())


_WORDS = {PAUSED: "pause or resume", ENDS: "end", TOTAL: "restock"}
