"""Fair admission: who may buy, in which order (``queue`` and ``draw`` activities).

A ``first_come`` activity (the default) hands a purchase URL to whoever asks first. A ``queue``
or ``draw`` activity hands them out through its queue. Everyone who joins before the sale
starts is put in an order that nobody can predict or influence: each user's place is the
SHA-256 of the activity's secret seed and their id, which is uniform over users and fixed by
the seed, so joining early, joining twice or polling often changes nothing. The seed is drawn
at creation and only its hash (the commitment) is shown until the sale starts; then the seed
itself is shown, and anyone can recompute the order from it (:func:`drawn_order`). Why a hash
and not a shuffle at the start: the order then needs no event that must run exactly once
across gateways, and it can be checked. Joiners after the start go to the back, in arrival
order. This module is pure: the parsing, the order, and the polling arithmetic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import secrets
from typing import Any

from seckill.domain import errors

FIRST_COME = "first_come"
QUEUE = "queue"
DRAW = "draw"
ADMISSIONS = (FIRST_COME, QUEUE, DRAW)

RANK_BITS = 52  # a rank is exact in a Redis sorted-set score (a double): 52 bits and below
LATE_BASE = 1 << RANK_BITS  # joiners after the start: this + their arrival number
MAX_FACTOR = 100.0

# Polling: a waiter is told to come back after poll_after_ms. The whole queue's polls stay
# near POLL_BUDGET per second however long it grows; none polls more than once a second or
# less than once every MAX_POLL_MS.
POLL_BUDGET = 2000
MIN_POLL_MS = 1000
MAX_POLL_MS = 30_000


def new_seed() -> str:
    """A fresh secret seed for an activity's order: 32 random bytes, hex."""
    return secrets.token_hex(32)


def commitment(seed: str) -> str:
    """What the activity shows before the start: SHA-256 of the seed's text, hex."""
    return hashlib.sha256(seed.encode("ascii")).hexdigest()


def rank(seed: str, uid: str) -> int:
    """A user's place among the users who joined before the start: the first 52 bits of
    SHA-256(``<seed>:<uid>``) (lower goes first; equal ranks, which never happen in practice,
    go by user id)."""
    digest = hashlib.sha256(f"{seed}:{uid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - RANK_BITS)


def drawn_order(seed: str, entries: list[str]) -> list[str]:
    """The order of ``entries`` (users who joined before the start) that ``seed`` gives."""
    return sorted(entries, key=lambda uid: (rank(seed, uid), uid))


def parse_admission(body: dict[str, Any], starts_ms: int,
                    ms_from_iso: Any) -> tuple[str, int | None, bool]:
    """``admission``, ``queue_opens_at`` (ms) and ``challenge`` of a new activity's body;
    BadRequest naming the field on anything off."""
    admission = body.get("admission", FIRST_COME)
    if admission not in ADMISSIONS:
        raise errors.BadRequest("admission must be 'first_come', 'queue' or 'draw'",
                                field="admission")
    challenge = body.get("challenge", False)
    if not isinstance(challenge, bool):
        raise errors.BadRequest("challenge must be true or false", field="challenge")
    if admission == FIRST_COME:
        for field in ("queue_opens_at", "challenge"):
            if field in body and body[field] not in (None, False):
                raise errors.BadRequest(
                    f"{field} applies to admission 'queue' or 'draw' only", field=field)
        return admission, None, False
    if "queue_opens_at" not in body:
        raise errors.BadRequest(f"queue_opens_at is required with admission {admission!r}",
                                field="queue_opens_at")
    opens_ms: int = ms_from_iso(body["queue_opens_at"], "queue_opens_at")
    if opens_ms >= starts_ms:
        raise errors.BadRequest("queue_opens_at must be before starts_at", field="queue_opens_at")
    return admission, opens_ms, challenge


def parse_factor(body: Any) -> float:
    """The operator's admission factor (``{"factor": x}``, 0 < x <= 100)."""
    if not isinstance(body, dict) or set(body) != {"factor"}:
        raise errors.BadRequest('the body must be {"factor": number}', field="factor")
    factor = body["factor"]
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not (
            math.isfinite(factor) and 0 < factor <= MAX_FACTOR):
        raise errors.BadRequest(f"factor must be a number above 0 and at most {MAX_FACTOR:g}",
                                field="factor")
    return float(factor)


def poll_after_ms(waiting: int, until_start_ms: int = 0) -> int:
    """How long a waiter should wait before asking again: the queue's polls spread to about
    ``POLL_BUDGET`` per second; before the start, not past the start."""
    spread = max(MIN_POLL_MS, min(MAX_POLL_MS, math.ceil(waiting * 1000 / POLL_BUDGET)))
    if until_start_ms > 0:
        return max(MIN_POLL_MS // 4, min(spread, until_start_ms))
    return spread


def eta_seconds(position: int, admitted_total: int, since_start_ms: int) -> int | None:
    """A waiter's expected wait: their position over the admissions per second so far (None
    before anyone was admitted: no rate to go by)."""
    if admitted_total <= 0 or since_start_ms <= 0:
        return None
    rate = admitted_total * 1000 / since_start_ms
    return math.ceil(position / rate)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueView:
    """Where one user stands in a queue (or the queue as a whole), as the queue scripts said
    (``lua/include/queue_view.lua``), and the JSON bodies made of it."""

    status: str  # none waiting admitted not_drawn sold_out ended purchased (or "state")
    position: int  # 1: next; 0: not waiting
    admitted_until_ms: int
    waiting: int
    admitted: int
    remaining: int  # -1: unlimited
    now_ms: int
    starts_ms: int
    admitted_total: int
    order_id: str
    lapsed_ms: int

    @classmethod
    def of(cls, reply: list[Any]) -> QueueView:
        """The view a queue script's reply describes."""
        text = [v.decode() if isinstance(v, bytes) else v for v in reply]
        n = [int(v) for v in text[1:9]]
        return cls(status=str(text[0]), position=n[0], admitted_until_ms=n[1], waiting=n[2],
                   admitted=n[3], remaining=n[4], now_ms=n[5], starts_ms=n[6],
                   admitted_total=n[7], order_id=str(text[9]), lapsed_ms=int(text[10]))

    def poll_after_ms(self) -> int:
        """When to ask again (:func:`poll_after_ms`)."""
        return poll_after_ms(self.waiting, self.starts_ms - self.now_ms)

    def body(self) -> dict[str, Any]:
        """The user's queue status (``GET``/``POST /seckill/<aid>/queue``), without the URL
        the web layer adds to an admission."""
        body: dict[str, Any] = {"status": self.status, "poll_after_ms": self.poll_after_ms()}
        if self.position:
            body["position"] = self.position
            eta = eta_seconds(self.position, self.admitted_total, self.now_ms - self.starts_ms)
            if eta is not None and self.status in ("waiting", "not_drawn"):
                body["eta_seconds"] = eta
        elif self.status == "waiting" and self.now_ms < self.starts_ms:
            # The pre-queue's order is drawn at the start; until then, the start is the wait.
            body["eta_seconds"] = math.ceil((self.starts_ms - self.now_ms) / 1000)
        if self.status == "admitted":
            body["expires_at"] = self.admitted_until_ms // 1000
        if self.order_id:
            body["order_id"] = self.order_id.split("|")[0]
        if self.lapsed_ms:
            body["lapsed"] = True  # admitted once, and the admission ran out unused
        return body

    def state_body(self, ends_ms: int, opens_ms: int) -> dict[str, Any]:
        """The public queue state (``GET /seckill/<aid>/queue/state``)."""
        if self.now_ms >= ends_ms:
            state = "ended"
        elif self.now_ms < self.starts_ms:
            state = "queue_open" if self.now_ms >= opens_ms else "upcoming"
        else:
            state = "sold_out" if self.remaining == 0 else "open"
        return {"state": state, "waiting": self.waiting, "admitted": self.admitted,
                "remaining": None if self.remaining < 0 else self.remaining,
                "updated_ms": self.now_ms}
