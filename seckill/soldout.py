"""The in-process sold-out flag: most of a flash-sale crowd arrives after the last unit went.

When the purchase script says "sold out", this process remembers it for the activity, with
the activity's winners (one HGETALL of the buyers hash, at most every ``ttl`` seconds). From
then on a purchase is answered at the edge with **no Redis call**: a winner repeating their
purchase gets 409 ``already_purchased`` with their order id (the contract's idempotent repeat),
everyone else 410 ``sold_out``.

The flag is dropped

* at once in every process when units come back (a cancellation or a restock publishes the
  activity id on a pub/sub channel that each process listens to), so they are sold again;
* after ``ttl`` seconds anyway, so a missed message (a reconnect) costs at most that long.

Activities with more than ``max_winners`` buyers are flagged without the winners list; their
purchases then still go to the script (one round trip) rather than hold a huge copy here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from seckill import errors
from seckill.store import KeySpace, split_buyer_entry

log = logging.getLogger("seckill.soldout")


class _Flag:
    """One activity's sold-out flag: until when it holds, its winners (uid -> the 409's extra
    fields: order id, and a packet's amount; None when too many to hold), and when a request
    last went to re-check it."""

    __slots__ = ("checking_since", "expires", "winners")

    def __init__(self, expires: float, winners: dict[str, dict[str, Any]] | None) -> None:
        self.expires = expires
        self.winners = winners
        self.checking_since = -math.inf


class SoldOutBoard:
    def __init__(
        self, client: redis.Redis, keys: KeySpace, ttl: float = 2.0, max_winners: int = 200_000
    ) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self.max_winners = max_winners
        self._flags: dict[str, _Flag] = {}
        self._check_lock = threading.Lock()
        # Also told when a flag is dropped (the activity cache forgets its stale copy).
        self.on_clear: list[Callable[[str | None], None]] = []
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._listener: threading.Thread | None = None
        self._listen_lock = threading.Lock()

    # -- the hot path --------------------------------------------------------------------

    def _flag(self, aid: str) -> _Flag | None:
        """The flag to answer with, or None when this request should go to the script.

        A flag past its ``ttl`` is re-checked by **one** request per second (it goes to the
        script: "sold out" renews the flag, a sale drops it); every other request keeps the
        stale answer meanwhile, so an expiring flag never sends the whole crowd to Redis."""
        flag = self._flags.get(aid)
        if flag is None:
            return None
        now = time.monotonic()
        if flag.expires > now:
            return flag
        with self._check_lock:
            if now - flag.checking_since >= 1.0:
                flag.checking_since = now
                return None
        return flag

    def is_flagged(self, aid: str) -> bool:
        return self._flag(aid) is not None

    def reject(self, aid: str, uid: str) -> None:
        """Raise the answer for a purchase of a flagged activity; return if not decidable here."""
        flag = self._flag(aid)
        if flag is None or flag.winners is None:
            return
        won = flag.winners.get(uid)
        if won is not None:
            raise errors.AlreadyPurchased(**won)
        raise errors.SoldOut()

    # -- learning and forgetting ---------------------------------------------------------

    def mark(self, aid: str) -> None:
        """The script said sold out: flag it here, with the winners if they are few enough."""
        self.ensure_listening()
        flag = self._flags.get(aid)
        if flag is not None:
            # Still sold out: renew. The winners cannot have changed meanwhile: only a
            # cancellation or a restock frees a unit, and each of those drops the flag.
            flag.expires = time.monotonic() + self.ttl
            flag.checking_since = -math.inf
            return
        winners: dict[str, dict[str, Any]] | None = None
        try:
            if int(self.client.hlen(self.keys.buyers(aid))) <= self.max_winners:
                pipe = self.client.pipeline(transaction=False)
                pipe.hgetall(self.keys.buyers(aid))
                pipe.hgetall(self.keys.amounts(aid))  # red-envelope packets: their amounts
                raw, amounts = pipe.execute()
                winners = {}
                for uid, value in raw.items():
                    won: dict[str, Any] = {"order_id": split_buyer_entry(value)[0]}
                    if uid in amounts:
                        won["amount"] = int(amounts[uid])
                    winners[uid] = won
        except redis.RedisError as exc:
            log.warning("sold-out flag for %s without winners (%s)", aid, exc)
        self._flags[aid] = _Flag(time.monotonic() + self.ttl, winners)

    def note_sale(self, aid: str) -> None:
        """A purchase went through: whatever this process believed, the activity is not sold
        out (a missed pub/sub message is corrected by the first re-check)."""
        self._flags.pop(aid, None)

    def clear(self, aid: str | None = None) -> None:
        if aid is None:
            self._flags.clear()
        else:
            self._flags.pop(aid, None)
        for callback in self.on_clear:
            callback(aid)

    # -- the pub/sub listener ------------------------------------------------------------

    def ensure_listening(self) -> None:
        if self._listener is not None or self._stop.is_set():
            return
        with self._listen_lock:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen, name="seckill-sold-out-listener", daemon=True
                )
                self._listener.start()
        # The first flag is only trusted once we would hear it being dropped.
        self._subscribed.wait(timeout=1.0)

    def _listen(self) -> None:
        channel = self.keys.stock_returned_channel()
        while not self._stop.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(channel)
                if self._subscribed.is_set():
                    # Back after a failure: messages may have been missed meanwhile, so forget
                    # every flag. (Before the first subscription there is none to forget:
                    # mark() waits for it.)
                    self.clear()
                self._subscribed.set()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message and message.get("type") == "message":
                        self.clear(str(message["data"]))
            except redis.RedisError as exc:
                log.debug("sold-out listener reconnecting after %s", exc)
                self.clear()
                self._stop.wait(1.0)
            finally:
                with contextlib.suppress(redis.RedisError):
                    pubsub.close()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=3)
