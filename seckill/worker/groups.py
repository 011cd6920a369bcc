"""The orders worker's upkeep of its consumer group: trimming acknowledged entries, removing the
consumers that are gone, counting what waits. Every command names one stream (one slot), so
all of it runs on a cluster.

Trimming is by id, never by length: only entries below the oldest one still needed go. A
consumer is removed only when it holds no pending entry and has been silent past a bound, in
one script (``lua/forget_consumers.lua``), so it cannot read an entry between the check and the
removal; a dead worker's entries are reclaimed first (``XAUTOCLAIM``), then its name goes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis
from redis.commands.core import Script

from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.recovery import ORDERS_GROUP as GROUP


def trim(client: Client, stream: str) -> None:
    """Drop the stream's acknowledged entries: everything below the oldest entry still needed
    (the oldest pending one, or the first never delivered)."""
    try:
        groups: Any = client.xinfo_groups(stream)
        group = next((g for g in groups if g["name"] == GROUP), None)
        if group is None:
            return
        summary: Any = client.xpending(stream, GROUP)
        if summary["pending"]:
            minid = str(summary["min"])
        else:
            minid = _next_id(str(group["last-delivered-id"]))
        if minid != "0-1":
            client.xtrim(stream, minid=minid, approximate=False)
    except redis.ResponseError:
        return


class Roster:
    """Removes the group's consumers that are gone (``lua/forget_consumers.lua``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.script: Script = scripts.forget_consumers

    def forget_dead(self, stream: str, idle_ms: int, keep: str) -> list[str]:
        """Remove the consumers of ``stream`` silent for ``idle_ms`` with nothing pending, but
        ``keep``; returns their names."""
        return self._run(stream, idle_ms, keep, "")

    def leave(self, stream: str, consumer: str) -> bool:
        """Remove ``consumer`` itself if it holds nothing pending (a warm stop)."""
        return bool(self._run(stream, 0, "", consumer))

    def _run(self, stream: str, idle_ms: int, keep: str, only: str) -> list[str]:
        removed: Any = self.script(keys=[stream], args=[GROUP, idle_ms, keep, only])
        return [n.decode() if isinstance(n, bytes) else str(n) for n in removed or []]


def pending_total(client: Client, streams: Iterable[str]) -> int:
    """How many entries of ``streams`` the group has read but not yet acknowledged: one
    ``XPENDING`` per stream (one slot each), all in one round trip (per master on a cluster).
    A stream or group that does not exist counts 0; any other error (a node down) is raised,
    never counted as nothing pending."""
    names = list(streams)
    pipe = client.pipeline(transaction=False)
    for stream in names:
        pipe.xpending(stream, GROUP)
    total = 0
    for reply in pipe.execute(raise_on_error=False):
        if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
            continue
        if isinstance(reply, Exception):
            raise reply
        total += int(reply["pending"])
    return total


def _next_id(entry_id: str) -> str:
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
