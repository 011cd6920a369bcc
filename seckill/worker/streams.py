"""Reading the order streams, on one server or on a cluster, and telling a drained stream.

On one server, one ``XREADGROUP`` over every followed stream waits up to ``block_ms`` for an
entry: an order is read the moment it is written, and an idle worker costs one command per
``block_ms``. A cluster refuses that command (every activity's keys are a slot of their own,
and a command's keys must share one: CROSSSLOT), and a blocking read per stream would hold a
connection per stream and could not wait on two at once: there, each round is one
non-blocking ``XREADGROUP`` per stream, every master's sent together (redis-py's cluster
pipeline writes to every master, then reads every reply: one round trip), and a round that
finds nothing is followed by a sleep of ``poll_ms`` (100 ms). So on a cluster an idle worker
sends one command per followed stream every ``poll_ms``, and an order waits up to ``poll_ms``
before it is read; retiring ended streams (:class:`Retirement`) keeps "followed" down to the
live activities.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import (
    ClusterDownError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

# is_cluster_client is plumbing's one test of a cluster client (also streams.is_cluster_client).
from seckill.store.plumbing.connection import Client, is_cluster_client, no_replica
from seckill.worker.groups import GROUP

Entry = tuple[str, dict[str, str]]
Batch = list[tuple[str, list[Entry]]]

# Redis cannot answer for now (a node down, a failover under way): wait, then read again.
AWAY: tuple[type[Exception], ...] = (
    redis.ConnectionError, redis.TimeoutError, ClusterDownError, TryAgainError,
    SlotNotCoveredError, RedisClusterException,
)


# What the worker's loop catches and asks :func:`redis_away` about (a ResponseError may be
# NOREPLICAS).
CAUGHT: tuple[type[Exception], ...] = (*AWAY, redis.ResponseError)


def redis_away(exc: Exception) -> bool:
    """Whether ``exc`` says Redis, a node or the cluster's slot map is away for now: the
    cluster client's own errors count (no node answered for the slot map, or the nodes
    disagree mid-failover), but never a cross-slot command, which is a bug. A master with no
    replica online (``NOREPLICAS``, with SECKILL_DURABILITY=replica) refuses the stream reads
    too (they are writes): away until a replica is back."""
    if no_replica(exc):
        return True
    if not isinstance(exc, AWAY):
        return False
    if type(exc) is RedisClusterException:
        return "same key slot" not in str(exc)
    return True


@dataclasses.dataclass
class Round:
    """What one read brought: the entries per stream, and the streams whose group is gone."""

    batch: Batch
    missing: list[str]

    @property
    def entries(self) -> int:
        """How many entries the round brought."""
        return sum(len(entries) for _, entries in self.batch)


def read(client: Client, consumer: str, streams: Sequence[str], start: str, count: int,
         block_ms: int | None) -> Round:
    """Read up to ``count`` entries of each stream from ``start`` (``>``: new ones; ``0``: the
    consumer's own pending ones): one blocking command on one server (``block_ms``, None: no
    wait), one non-blocking command per stream in one round trip on a cluster."""
    if is_cluster_client(client):
        return _read_each(client, consumer, streams, start, count)
    try:
        reply: Any = client.xreadgroup(GROUP, consumer, dict.fromkeys(streams, start),
                                       count=count, block=block_ms)
    except redis.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        return Round([], list(streams))  # the command names no stream: any may be the one
    return Round([(str(s), list(entries)) for s, entries in (reply or [])], [])


def _read_each(client: Client, consumer: str, streams: Sequence[str], start: str,
               count: int) -> Round:
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xreadgroup(GROUP, consumer, {stream: start}, count=count)
    batch: Batch = []
    missing: list[str] = []
    failure: Exception | None = None
    for stream, reply in zip(streams, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
            missing.append(stream)
        elif isinstance(reply, Exception):
            failure = failure or reply
        elif reply:
            batch.extend((str(s), list(entries)) for s, entries in reply)
    if failure is not None:
        # Some masters answered, one did not: what was read stays pending for this consumer,
        # re-read (from id 0) once Redis answers again.
        raise failure
    return Round(batch, missing)


def drained(client: Client, streams: Sequence[str]) -> set[str]:
    """The streams with nothing left to store: the group holds no pending entry and has
    delivered the last entry (or there is none; or no stream at all). Two commands per
    stream, every stream's in one round trip (per master on a cluster)."""
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xinfo_groups(stream)
        pipe.xrevrange(stream, count=1)
    replies = pipe.execute(raise_on_error=False)
    done: set[str] = set()
    for stream, groups, last in zip(streams, replies[::2], replies[1::2], strict=True):
        if isinstance(last, Exception):
            raise last
        if isinstance(groups, Exception):
            if "no such key" not in str(groups).lower():
                raise groups
            groups = []
        group = next((g for g in groups if g["name"] == GROUP), None)
        if group is not None and int(group["pending"]):
            continue
        if not last or (group is not None
                        and _id(str(last[0][0])) <= _id(str(group["last-delivered-id"]))):
            done.add(stream)
    return done


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Retirement:
    """The streams no longer read, and when to look at them again.

    The rule: a stream is retired once its activity ended more than ``grace_ms`` (10 s) ago (on
    the worker's clock) and it is drained (:func:`drained`); at that moment the worker trims it
    (empty) and removes its own consumer name, and from then on it is neither read, reclaimed
    nor trimmed. Every ``recheck_seconds`` (30 s) each retired stream is checked again, without
    reading it (``XINFO GROUPS`` and ``XREVRANGE ... COUNT 1``, every stream's in one round trip
    per master), and followed again if anything is on it: a cancel after the end
    (``lua/cancel.lua`` adds an entry whenever it runs), an entry written late, a pending entry
    a consumer left behind; it is retired again once drained. An activity already ended when
    the worker first sees it starts retired and is checked at once. So a cancel after the end
    is stored within about ``recheck_seconds``, never lost.
    """

    def __init__(self, grace_ms: int = 10_000, recheck_seconds: float = 30.0) -> None:
        self.grace_ms = grace_ms
        self.recheck_seconds = recheck_seconds
        self.ends: dict[str, int] = {}  # activity id -> its end, ms since the epoch
        self.retired: dict[str, str] = {}  # stream -> activity id
        self._recheck_at = float("-inf")

    def ended(self, aid: str, now_ms: int) -> bool:
        """Whether the activity ended more than the grace ago (unknown: no)."""
        ends = self.ends.get(aid)
        return ends is not None and now_ms - ends > self.grace_ms

    def add(self, stream: str, aid: str) -> None:
        """Take ``stream`` as retired until checked: the next review looks at it."""
        self.retired[stream] = aid
        self._recheck_at = float("-inf")

    def review(self, client: Client, followed: dict[str, str],
               now_ms: int) -> tuple[list[str], dict[str, str]]:
        """The followed streams to retire now, and the retired ones to follow again (with
        their activity ids); the caller moves them."""
        candidates = [s for s, aid in followed.items() if self.ended(aid, now_ms)]
        rechecks: list[str] = []
        if time.monotonic() >= self._recheck_at:
            self._recheck_at = time.monotonic() + self.recheck_seconds
            rechecks = list(self.retired)
        if not candidates and not rechecks:
            return [], {}
        done = drained(client, candidates + rechecks)
        retire = [s for s in candidates if s in done]
        revive = {s: self.retired.pop(s) for s in rechecks if s not in done}
        for stream in retire:
            self.retired[stream] = followed[stream]
        return retire, revive
