"""What Redis did during a run: ``INFO commandstats`` and ``INFO stats`` before and after.

Two counts per request come out of it:

* **round trips**: ``total_reads_processed``, the number of times the server read from a
  client socket. A pipeline that arrives in one read (the gateway's EVALSHA + WAITAOF) is one;
* **commands**: the ``calls`` of every command in ``INFO commandstats``. These include the
  commands a Lua script runs inside Redis (HMGET, TIME, HSET, XADD ... of the purchase
  script), so the per-command breakdown shows what the client sent (EVALSHA, WAITAOF, ...) next
  to what the scripts did.

The snapshot's own INFO call is left out of both counts.

A third count tells the gateway's background threads apart from its requests: those threads
(the activity-copy refresher, the sold-out flags' check) use connections named
``seckill-background-*`` (``seckill.store.background_client``), and ``CLIENT LIST`` gives each
connection's ``tot-cmds``. ``background`` is their sum; whatever else the run saw came from the
requests (and from this harness's own snapshot connection, left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from seckill.store.plumbing.connection import BACKGROUND_CLIENT_PREFIX


@dataclass(frozen=True)
class Snapshot:
    calls: dict[str, int]
    reads: int
    used_memory: int
    keys: int
    background: dict[str, int]  # "name id" -> tot-cmds of each background connection


def snapshot(client: redis.Redis) -> Snapshot:
    info: Any = client.info("everything")
    calls = {
        key.removeprefix("cmdstat_"): int(value["calls"])
        for key, value in info.items()
        if key.startswith("cmdstat_")
    }
    keys = sum(int(v.get("keys", 0)) for k, v in info.items()
               if k.startswith("db") and isinstance(v, dict))
    background = {
        f"{c['name']} {c['id']}": int(c.get("tot-cmds", 0))
        for c in client.client_list()
        if str(c.get("name", "")).startswith(BACKGROUND_CLIENT_PREFIX)
    }
    return Snapshot(calls=calls, reads=int(info["total_reads_processed"]),
                    used_memory=int(info["used_memory"]), keys=keys, background=background)


@dataclass(frozen=True)
class Delta:
    calls: dict[str, int]  # command -> calls during the run, INFO left out
    reads: int  # socket reads (round trips) during the run, our INFO left out
    background: int = 0  # commands the gateway's background threads sent during the run

    @property
    def commands(self) -> int:
        return sum(self.calls.values())

    def per(self, requests: int) -> tuple[float, float]:
        """(round trips, commands) per request."""
        if requests <= 0:
            return 0.0, 0.0
        return self.reads / requests, self.commands / requests

    def breakdown(self, requests: int, limit: int = 8) -> str:
        """The commands by calls per request, biggest first, e.g. ``evalsha 2.00, ...``."""
        if requests <= 0 or not self.calls:
            return ""
        top = sorted(self.calls.items(), key=lambda kv: -kv[1])[:limit]
        return ", ".join(f"{name} {n / requests:.3g}" for name, n in top)


def delta(before: Snapshot, after: Snapshot) -> Delta:
    calls = {}
    for name, n in after.calls.items():
        d = n - before.calls.get(name, 0)
        if name == "info":
            d -= 1  # the "after" snapshot's own call
        if d > 0:
            calls[name] = d
    background = sum(n - before.background.get(key, 0) for key, n in after.background.items())
    # The "after" INFO was read before it was counted; the "before" one is in `before`.
    # (CLIENT LIST comes after INFO in a snapshot, so it is in neither count.)
    return Delta(calls=calls, reads=max(0, after.reads - before.reads - 1),
                 background=max(0, background))
