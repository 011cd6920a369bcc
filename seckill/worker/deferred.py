"""Updates read before their order is stored, kept until it is.

A cancellation (an operator's, or a payment window's expiry) or a payment follows its order on
the same stream, but the two may reach the database in either order: a worker killed between
reading a purchase and acknowledging it leaves that entry pending under its dead name until a
live worker reclaims it (after the claim bound), while the update that Redis decided meanwhile
is a new entry, read at once by the next worker. Applied then, the update would find no row
and be lost, and the order would be stored live although Redis cancelled it.

So an update whose order is not in the database is not acknowledged: its entry stays pending,
which is what keeps it (in Redis, across a crash); this list only lets the worker that read it
fold it into its order's row as soon as the order comes (the next batch, or the reclaim of the
dead worker's entries), and retry it every housekeeping round. An entry is forgotten here after
the claim bound: by then ``XAUTOCLAIM`` hands it back (to this worker or another) if it is
still pending, and after ``max_deliveries`` such rounds without its order it is dead-lettered.
A warm stop hands the held entries back at once (:meth:`Deferred.hand_back`).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import redis
import sqlalchemy as sa

from seckill.domain.entries import Cancel, Paid
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import Client
from seckill.worker.groups import GROUP
from seckill.worker.letters import Letters

log = logging.getLogger(__name__)

Held = tuple[str, str, Cancel | Paid]  # stream, entry id, the update


class Deferred:
    """The updates this worker holds pending until their order is stored (oldest first)."""

    def __init__(self, keep_ms: int, max_deliveries: int) -> None:
        self.keep_ms = keep_ms
        self.max_deliveries = max_deliveries
        self._held: dict[tuple[str, str], tuple[Cancel | Paid, float]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def with_batch(self, batch: list[Held]) -> list[Held]:
        """The held updates not in ``batch`` (read before it: they go first), then the batch's
        own; the ones held past ``keep_ms`` are forgotten first (reclaim brings them back)."""
        now = time.monotonic()
        for key in [k for k, (_, since) in self._held.items()
                    if now - since > self.keep_ms / 1000]:
            del self._held[key]
        mine = {(s, e) for s, e, _ in batch}
        return [(s, e, u) for (s, e), (u, _) in self._held.items() if (s, e) not in mine] + batch

    def hold(self, stream: str, entry_id: str, update: Cancel | Paid) -> None:
        """Keep an update whose order is not stored (the time it was first held is kept)."""
        self._held.setdefault((stream, entry_id), (update, time.monotonic()))

    def hand_back(self, client: Client, consumer: str) -> None:
        """On a warm stop: set the held entries' idle time past the claim bound (``XCLAIM``
        to ourselves with ``IDLE``; ``JUSTID`` counts no delivery), so that the next worker's
        first reclaim takes them rather than wait out the bound under a name nobody reads."""
        for stream, entry_id in list(self._held):
            try:
                client.xclaim(stream, GROUP, consumer, 0, [entry_id], idle=self.keep_ms,
                              justid=True)
            except redis.RedisError as exc:
                log.warning("could not hand back the held updates (%s); they are claimed "
                            "after the claim bound", exc)
                return
        self._held.clear()

    def release(self, stream: str, entry_id: str) -> None:
        """Forget an update: applied (its order is stored) or dead-lettered."""
        self._held.pop((stream, entry_id), None)

    def settle(self, updates: list[Held], orphans: set[str], reclaimed: set[tuple[str, str]],
               letters: Letters) -> list[Held]:
        """The updates applied (to acknowledge). Those whose order is not stored
        (``orphans``) are held, or dead-lettered when reclaimed ``max_deliveries`` times."""
        done: list[Held] = []
        for stream, entry_id, update in updates:
            if update.order_id not in orphans:
                self.release(stream, entry_id)
                done.append((stream, entry_id, update))
            elif ((stream, entry_id) in reclaimed
                  and letters.deliveries(stream, entry_id) >= self.max_deliveries):
                self.release(stream, entry_id)
                letters.send(stream, entry_id, dataclasses.asdict(update),
                             "the order it updates was never stored")
            elif (stream, entry_id) not in self._held:
                log.info("%s %s: %s of %s read before the order is stored; kept pending until "
                         "it is", stream, entry_id, type(update).__name__.lower(),
                         update.order_id)
                self.hold(stream, entry_id, update)
        return done

    def retry(self, book: OrderBook, letters: Letters) -> list[Held]:
        """Apply the held updates again; the ones applied now (their order is stored). One
        try: with the database away, the next round tries again."""
        held = self.with_batch([]) if self._held else []
        if not held:
            return []
        try:
            orphans = book.store([], [u for _, _, u in held]).orphans
        except sa.exc.DBAPIError as exc:
            log.warning("could not retry %d held updates (%s)", len(held), exc.orig or exc)
            return []
        return self.settle(held, orphans, set(), letters)
