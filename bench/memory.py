"""Redis memory per buyer after a large sale, driven straight through the purchase script.

No HTTP: ``seckill.store.Scripts`` runs ``lua/purchase.lua`` for each buyer in pipelines of
``batch``, on an activity created as the gateway creates one, with the gateway's key names, in
a Valkey of its own (started here, same settings), so that no other client's buffers come and
go in the figure. ``INFO memory`` ``used_memory`` is read before the first and after the last
purchase; the
difference divided by the buyers is what one buyer costs Redis (the buyers-hash entry and
the order's stream entry: the orders worker trims the stream once orders are in the
database, and no worker runs here, so this is the most a buyer costs before that).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.activities import ActivityStore


@dataclass(frozen=True)
class MemoryResult:
    buyers: int
    used_before: int
    used_after: int
    buyers_hash: int  # MEMORY USAGE of the buyers hash, bytes
    orders_stream: int  # MEMORY USAGE of the orders stream, bytes
    seconds: float
    uid_example: str
    allocator: str

    @property
    def per_buyer(self) -> float:
        return (self.used_after - self.used_before) / self.buyers if self.buyers else 0.0


def sale(buyers: int, appendfsync: str = "always", batch: int = 1000) -> MemoryResult:
    with tempfile.TemporaryDirectory(prefix="seckill-bench-memory-") as tmp, \
            EmbeddedValkey(Path(tmp) / "valkey", appendfsync=appendfsync) as valkey:
        client = redis.Redis.from_url(valkey.url, decode_responses=True, socket_timeout=60)
        try:
            return _sale(client, "bench", buyers, batch)
        finally:
            client.close()


def _sale(client: redis.Redis, prefix: str, buyers: int, batch: int) -> MemoryResult:
    keys = KeySpace(prefix)
    scripts = Scripts(client)
    aid = f"m{uuid.uuid4().hex[:10]}"
    at = now_ms()
    ActivityStore(client, keys, scripts).create(Activity(
        id=aid, name="Memory", starts_ms=at - 60_000, ends_ms=at + 3600_000,
        total=buyers, remaining=buyers,
    ))
    info: Any = client.info("memory")
    before = int(info["used_memory"])
    started = time.monotonic()
    ok = 0
    activity_keys = keys.activity_keys(aid)
    for start in range(0, buyers, batch):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(buyers, start + batch)):
            scripts.purchase(keys=activity_keys, args=[f"user-{i:07d}", 1, aid, 0], client=pipe)
        ok += sum(1 for reply in pipe.execute() if reply[0] == "ok")
    seconds = time.monotonic() - started
    info = client.info("memory")
    after = int(info["used_memory"])
    if ok != buyers:
        raise RuntimeError(f"memory sale: {ok} of {buyers} purchases went through")
    return MemoryResult(
        buyers=buyers, used_before=before, used_after=after,
        buyers_hash=int(client.memory_usage(keys.buyers(aid), samples=0) or 0),
        orders_stream=int(client.memory_usage(keys.orders(aid), samples=0) or 0),
        seconds=seconds, uid_example="user-0000123",
        allocator=str(info.get("mem_allocator", "?")),
    )
