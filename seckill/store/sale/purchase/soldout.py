"""The in-process sold-out flag: most of a flash-sale crowd arrives after the last unit went.

When the purchase script says "sold out", this process flags the activity, with its winners.
From then on a purchase is answered at the edge with **no Redis call**: a winner repeating
their purchase gets 409 ``already_purchased`` with their order id, everyone else 410
``sold_out``. No request re-checks a flag: keeping flags honest is background work (a pub/sub
listener drops a flag when units come back; a check every ``ttl`` seconds drops the flags whose
state changed). Only while that work fails does one request per second and flag re-check it.
When a flag is dropped, and how long it can be wrong: docs/internals.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.client import PubSub

from seckill.domain import errors
from seckill.domain.activities import units_in_parts
from seckill.domain.variants import Items
from seckill.store.plumbing.connection import Client, background_client, close_client
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.plumbing.parts import part_tags
from seckill.store.sale.purchase.variant_flags import VariantFlags

log = logging.getLogger(__name__)

# The meta fields a flag is verified against: a sale bumps seq (and sold), a cancellation
# lowers sold and raises remaining, a restock moves remaining.
STATE_FIELDS = ("remaining", "sold", "seq")
# A part of a sharded activity: also the units held by claims and those lent and received.
PART_STATE_FIELDS = (*STATE_FIELDS, "held", "lent", "borrowed")

State = tuple[str | None, ...]


class _Flag:
    """One activity's sold-out flag: the meta fields it stands for (``STATE_FIELDS``), its
    winners (uid -> the 409's extra fields: order id, and a packet's amount; None when too
    many to hold), whether a request consulted it since the last check (and for how many
    checks none did), and when a request last re-checked it in the background's stead."""

    __slots__ = ("idle", "rechecked", "state", "tags", "used", "winners")

    def __init__(self, state: State, winners: dict[str, dict[str, Any]] | None,
                 tags: tuple[str, ...]) -> None:
        self.tags = tags  # the activity's parts (its own tag alone, unsharded)
        self.state = state
        self.winners = winners
        self.used = True
        self.idle = 0
        self.rechecked = -math.inf


class SoldOutBoard:
    """This process's sold-out flags, with the listener and the check that keep them honest."""

    def __init__(
        self, client: Client, keys: KeySpace, ttl: float = 2.0, max_winners: int = 200_000
    ) -> None:
        self.client = client  # the requests' connections: raising a flag, the fallback re-check
        self.keys = keys
        self.ttl = ttl  # how often the background check runs
        self.max_winners = max_winners
        # Checks in a row without a request consulting a flag before it is forgotten.
        self.idle_checks = math.ceil(max(60.0, 10 * ttl) / ttl)
        self._background = background_client(client, "sold-out")
        self._flags: dict[str, _Flag] = {}
        # True while the background check keeps the flags honest: its thread runs and its
        # last round worked.
        self._vouched = False
        # Bumped by every clear: a flag read before a clear is not raised after it.
        self._clears = 0
        self._recheck_lock = threading.Lock()
        self._marking: set[str] = set()  # activities whose flag a request is reading now
        self._marking_lock = threading.Lock()
        # Also told when a flag is dropped (the activity cache forgets its stale copy).
        self.on_clear: list[Callable[[str | None], None]] = []
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._listener: threading.Thread | None = None
        self._listen_lock = threading.Lock()
        self._pubsub: PubSub | None = None  # the listener's subscription, while it has one
        # Flags per variant, kept honest by this board's listener and check.
        self.variants = VariantFlags(client, keys, max_winners)

    @property
    def vouched(self) -> bool:
        """Whether the background check keeps the flags honest (its thread runs and its last
        round worked); if not, requests re-check them (docs/internals.md)."""
        return self._vouched

    # -- the hot path --------------------------------------------------------------------

    def _flag(self, aid: str) -> _Flag | None:
        """The flag to answer with, or None when this request should go to the script."""
        flag = self._flags.get(aid)
        if flag is None:
            return None
        flag.used = True
        if self._vouched:
            return flag
        return self._recheck(aid, flag)

    def is_flagged(self, aid: str) -> bool:
        """Whether this process holds a (trusted) sold-out flag for the activity."""
        return self._flag(aid) is not None

    def refusal(self, aid: str, uid: str) -> errors.SeckillError | None:
        """The answer to a purchase of a flagged activity, or None if not decidable here."""
        flag = self._flag(aid)
        if flag is None or flag.winners is None:
            return None
        won = flag.winners.get(uid)
        if won is not None:
            return errors.AlreadyPurchased(**won)
        return errors.SoldOut()

    def _recheck(self, aid: str, flag: _Flag) -> _Flag | None:
        """The fallback while the background check is not working: one request a second reads
        the flag's state itself (docs/internals.md)."""
        now = time.monotonic()
        with self._recheck_lock:
            if now - flag.rechecked < 1.0:
                return flag
            flag.rechecked = now
        self.ensure_listening()
        try:
            self._verify([(aid, flag)], self.client)
        except redis.RedisError as exc:
            log.debug("sold-out flag for %s not verified (%s: %s): asking the script", aid,
                      type(exc).__name__, exc)
            return None
        return self._flags.get(aid)

    # -- learning and forgetting ---------------------------------------------------------

    def mark(self, aid: str, shards: int = 1) -> None:
        """The script said sold out: flag it here, with the winners if they are few enough
        (a sharded activity: only if every part is empty, nothing held or in transit)."""
        self.ensure_listening()
        if aid in self._flags:
            return  # raised meanwhile by another request; the background check keeps it honest
        with self._marking_lock:
            # One reader per activity: at the moment of the sell-out every request in flight
            # hears "sold out" at once (~40 per worker at 100 connections in the bench), and
            # each would read the whole buyers hash. The others answer 410 without waiting.
            if aid in self._marking:
                return
            self._marking.add(aid)
        clears = self._clears
        tags = part_tags(aid, shards)
        try:
            if shards > 1:
                state, winners, empty = self._read_parts(tags)
            else:
                state, winners = self._read_state(aid)
                empty = state[0] == "0"
        except redis.RedisError as exc:
            log.warning("no sold-out flag for %s (%s: %s)", aid, type(exc).__name__, exc)
            return
        finally:
            self._marking.discard(aid)
        # Units came back since the script's answer, or a flag was dropped while this one was
        # being read (perhaps this activity's, for a change the read came too early to see):
        # no flag, the next "sold out" raises it. (A drop between here and the assignment is
        # caught by the background check.)
        if empty and clears == self._clears:
            self._flags[aid] = _Flag(state, winners, tags)

    def _read_state(self, aid: str) -> tuple[State, dict[str, dict[str, Any]] | None]:
        buyers = self.keys.buyers(aid)
        few = int(self.client.hlen(buyers)) <= self.max_winners
        # One MULTI: the winners are exactly those of the state the flag will be checked
        # against.
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(self.keys.meta(aid), STATE_FIELDS)
        if few:
            pipe.hgetall(buyers)
            pipe.hgetall(self.keys.amounts(aid))  # red-envelope packets: their amounts
        replies = pipe.execute()
        if not few:
            return tuple(replies[0]), None
        raw, amounts = replies[1], replies[2]
        winners: dict[str, dict[str, Any]] = {}
        for uid, value in raw.items():
            won: dict[str, Any] = {"order_id": split_buyer_entry(value)[0]}
            if uid in amounts:
                won["amount"] = int(amounts[uid])
            winners[uid] = won
        return tuple(replies[0]), winners

    def _read_parts(self, tags: tuple[str, ...]
                    ) -> tuple[State, dict[str, dict[str, Any]] | None, bool]:
        """A sharded activity's state, part by part (each part's fields and winners in one
        MULTI: a part changed between two reads changes the state, so the flag is dropped at
        the next check), and whether the whole is empty."""
        state: list[str | None] = []
        winners: dict[str, dict[str, Any]] | None = {}
        for tag in tags:
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self.keys.meta(tag), PART_STATE_FIELDS)
            pipe.hgetall(self.keys.buyers(tag))
            fields, raw = pipe.execute()
            state.extend(fields)
            if winners is not None:
                winners.update({uid: {"order_id": split_buyer_entry(value)[0]}
                                for uid, value in raw.items()})
                if len(winners) > self.max_winners:
                    winners = None
        width = len(PART_STATE_FIELDS)
        parts = [state[i : i + width] for i in range(0, len(state), width)]
        empty = units_in_parts((p[0], p[3], p[4], p[5]) for p in parts) == (0, 0)
        return tuple(state), winners, empty

    def variant_refusal(self, aid: str, buyer: str, items: Items
                        ) -> errors.SeckillError | None:
        """The answer to a purchase of these items when one of their variants is flagged sold
        out (None: ask the script; always None while the background check is not vouched
        for)."""
        if not self._vouched:
            return None
        return self.variants.refusal(aid, buyer, items)

    def mark_variant(self, aid: str, vid: str) -> None:
        """The script said variant ``vid`` of ``aid`` has no unit left: flag it here."""
        self.ensure_listening()
        self.variants.mark(aid, vid)

    def note_sale(self, aid: str) -> None:
        """A purchase went through: whatever this process believed, the activity is not sold
        out (a flag another process still holds is dropped by its background check)."""
        self._flags.pop(aid, None)

    def clear(self, aid: str | None = None) -> None:
        """Drop the flag of ``aid`` (every flag: None) and tell the ``on_clear`` callbacks."""
        self._clears += 1
        self.variants.clear(aid)
        if aid is None:
            self._flags.clear()
        else:
            self._flags.pop(aid, None)
        for callback in self.on_clear:
            callback(aid)

    # -- the background check ------------------------------------------------------------

    def check(self) -> None:
        """One round of the background check (the listener's thread runs it every ``ttl``
        seconds): verify every flag in use, forget those no request consulted for a while."""
        due = []
        for aid, flag in list(self._flags.items()):
            flag.idle = 0 if flag.used else flag.idle + 1
            flag.used = False
            if flag.idle <= self.idle_checks:
                due.append((aid, flag))
            elif self._flags.get(aid) is flag:
                self._flags.pop(aid, None)  # not a change of state: the activity copy stays
        if due:
            self._verify(due, self._background)
        self.variants.check(self._background)

    def _verify(self, flags: list[tuple[str, _Flag]], client: Client) -> None:
        """Read the flagged activities' state (one round trip); drop the flags it no longer
        matches."""
        pipe = client.pipeline(transaction=False)
        for _, flag in flags:
            fields = STATE_FIELDS if len(flag.tags) == 1 else PART_STATE_FIELDS
            for tag in flag.tags:
                pipe.hmget(self.keys.meta(tag), fields)
        replies = iter(pipe.execute())
        for aid, flag in flags:
            state = tuple(v for _ in flag.tags for v in next(replies))
            if state != flag.state and self._flags.get(aid) is flag:
                self.clear(aid)

    # -- the pub/sub listener ------------------------------------------------------------

    def ensure_listening(self, wait: bool = True) -> None:
        """Start the listener thread (again, if it died) unless closed; ``wait``: until it
        has subscribed (at most a second)."""
        listener = self._listener
        if (listener is not None and listener.is_alive()) or self._stop.is_set():
            return
        with self._listen_lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = threading.Thread(
                    target=self._listen, name="seckill-sold-out-listener", daemon=True
                )
                self._listener.start()
        # The first flag is only trusted once we would hear it being dropped.
        if wait:
            self._subscribed.wait(timeout=1.0)

    def _listen(self) -> None:
        self._vouched = True  # every flag was read at most a round ago (or is dropped below)
        try:
            self._listen_and_check()
        finally:
            self._vouched = False  # nothing keeps the flags honest now: requests re-check them

    def _listen_and_check(self) -> None:
        channel = self.keys.stock_returned_channel()
        pubsub: PubSub | None = None
        next_check = time.monotonic() + self.ttl
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._background.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(channel)
                    self._pubsub = pubsub
                    if self._subscribed.is_set():
                        # Back after a failure (or a restart of this thread): messages may have
                        # been missed meanwhile, so forget every flag. (Before the first
                        # subscription there is none to forget: mark() waits for it.)
                        self.clear()
                    self._subscribed.set()
                # Short reads: a missed wake-up by close() still ends within a fifth of a second.
                wait = min(0.2, max(0.0, next_check - time.monotonic()))
                message = pubsub.get_message(timeout=wait)
                if message and message.get("type") == "message":
                    self.clear(str(message["data"]))
            except Exception as exc:  # Redis unreachable (or a bug): subscribe again
                if not self._stop.is_set():  # else close() cut the read: not a failure
                    log.log(logging.DEBUG if isinstance(exc, redis.RedisError) else logging.ERROR,
                            "sold-out listener resubscribing after %s: %s", type(exc).__name__,
                            exc)
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
                    pubsub = self._pubsub = None
                self._stop.wait(min(1.0, self.ttl))
            if time.monotonic() >= next_check:
                try:
                    self.check()
                    self._vouched = True
                except Exception as exc:  # the flags fall back to being re-checked by requests
                    log.log(logging.WARNING if self._vouched else logging.DEBUG,
                            "sold-out flags not verified, requests re-check them: %s: %s",
                            type(exc).__name__, exc)
                    self._vouched = False
                next_check = time.monotonic() + self.ttl
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def close(self) -> None:
        """Stop the listener thread and close its connections."""
        self._stop.set()
        self._wake_listener()
        if self._listener is not None:
            self._listener.join(timeout=3)
        close_client(self._background)

    def _wake_listener(self) -> None:
        """End the listener's read now rather than when it times out, so that a process
        stops at once: its socket is shut down (the listener's own thread closes it, so its
        descriptor cannot be reused under the read)."""
        connection = getattr(self._pubsub, "connection", None)
        sock = getattr(connection, "_sock", None)  # redis-py keeps its socket there
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
