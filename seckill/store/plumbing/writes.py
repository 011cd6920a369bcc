"""Running a writing script durably: the script, followed on the same connection by the
durability mode's wait, in one round trip; what a failure means for the caller; and, when
Redis lost the activity, its rebuild from the database and one more try.

Every service that decides on Redis (a purchase, a cancel, a restock, a payment) runs its
script through here, so the three rules live in one place:

- a reply that was not read, or a NOREPLICAS refusal, is 503 (``connection.unavailable``):
  the decision may or may not have been taken, and it is never retried here (a retried
  purchase is a second purchase);
- a write the durability mode could not confirm on disk is 503 ``durability``; with
  ``replica``, when the wait found no replica, its master is stopped
  (``seckill.store.plumbing.replica_stop``): the writes routed there afterwards are refused
  503 ``no_replica`` before their script is sent, until a probe sees a replica again;
- ``uninitialized`` / ``unmigrated`` (the script changed nothing) rebuild the activity from
  the database and run the script once more.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import redis

from seckill.domain import errors
from seckill.store.plumbing.connection import Client, ScriptWire, unavailable
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.replica_stop import PROBE_WAIT_MS, ReplicaStops

log = logging.getLogger(__name__)

# What a script answers when Redis does not hold the activity (or holds a meta hash from
# before the ``unlimited`` flag): it changed nothing, so it is safe to run again once rebuilt.
LOST = ("uninitialized", "unmigrated")


@dataclasses.dataclass(frozen=True, slots=True)
class FollowUp:
    """A command sent after a purchase in the same send (a queue's "the buyer bought"), and
    what to do instead when it answers an error (e.g. NOSCRIPT)."""

    command: tuple[Any, ...]
    fallback: Callable[[], None]


class DurableRunner:
    """Runs writing scripts with the durability wait, and rebuilds what Redis lost."""

    def __init__(self, client: Client, wire: ScriptWire, durability: Durability,
                 ensure: Callable[[str], bool]) -> None:
        self.client = client
        self.wire = wire  # the decision's round trip
        self.durability = durability
        # The masters whose last wait found no replica (``replica`` only; this process's view).
        self.stops = ReplicaStops(client, min(durability.timeout_ms, PROBE_WAIT_MS))
        # Puts the activity back into Redis from the database; False if the database does
        # not know it either (``seckill.store.sale.activity.recovery.Restorer.ensure``).
        self.ensure = ensure

    def run(self, script: Any, keys: list[str], args: list[Any],
            then: FollowUp | None = None) -> Any:
        """Run a writing script, followed on the same connection by the durability mode's
        wait (:meth:`Durability.commands`), in one round trip
        (:class:`seckill.store.plumbing.connection.Wire`). Returns the script's reply; raises
        Unavailable when the reply was not read or the write could not be confirmed on disk.
        ``then``: a command sent last in the same send (its own reply is its business: an
        error reply runs its fallback)."""
        if self.stops.any:  # a dict's truth while no master is stopped
            self.stops.admit(keys[0])
        try:
            after = self.durability.commands(self.client)
            replies = self.wire.run_script(script, keys, args, *after,
                                           *([then.command] if then else []))
            if then is not None and isinstance(replies.pop(), Exception):
                then.fallback()
            reply, *waited = replies
        except redis.RedisError as exc:
            # Here, not left to the web's one mapping: the borrowing's lend loop catches
            # Unavailable to go on to the next part (NOREPLICAS: refused, nothing decided).
            raise unavailable(exc) from exc
        if waited and wrote(reply) and not self.durability.confirmed(waited[-1]):
            log.error("write not confirmed on disk (WAITAOF said %r)", waited[-1])
            if self.durability.found_no_replica(waited):
                self.stops.stop(keys[0])
            raise errors.Unavailable(
                "the decision was taken but not confirmed on disk; check your order status "
                "before retrying", detail="durability",
            )
        return reply

    def restore(self, aid: str) -> None:
        """Put the activity back into Redis from the database (UnknownActivity if it does not
        know it; Unavailable if Redis cannot be reached)."""
        try:
            if not self.ensure(aid):
                raise errors.UnknownActivity(activity=aid)
        except redis.RedisError as exc:
            # As in run: a part's rebuild that fails is one part not answering to the lend
            # loop, which catches Unavailable.
            raise unavailable(exc) from exc

    def run_restoring(self, aid: str, script: Any, keys: list[str], args: list[Any]) -> Any:
        """:meth:`run`; when the script says Redis lost the activity (:data:`LOST`), rebuild
        it (:meth:`restore`) and run the script once more."""
        reply = self.run(script, keys, args)
        if reply[0] in LOST:
            self.restore(aid)
            reply = self.run(script, keys, args)
        return reply


def wrote(reply: Any) -> bool:
    """Whether a script's reply says it changed something (then it is confirmed on disk):
    a purchase, a cancel, a first payment (a repeated one answers with "again")."""
    return bool(reply) and (reply[0] == "ok" or (reply[0] == "paid" and len(reply) == 3))
