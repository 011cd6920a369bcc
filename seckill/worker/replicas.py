"""With ``SECKILL_DURABILITY=replica``, the orders worker stores an entry only once a replica of
its master has it.

Why: a purchase the master wrote but no replica received is lost when the master dies and the
replica takes over (the buyer was answered 503, or, with ``local``, 200). Had the worker
already stored it, the database would keep an order that Redis no longer knows, and the unit
would be sold again: more orders than units. So, before a batch goes to the database, each
master it came from is asked to confirm, on one connection: a small write in the slot of one
of its streams (``SET <prefix>:{<aid>}:replicated``, expiring) and ``WAIT 1 <timeout>``. WAIT
counts the replicas that have everything up to that connection's last write, which came after
every entry read; a master without a replica (or one too slow) answers fewer, and its entries
stay pending for this consumer, to be read again (from id 0) and confirmed in a later round.
``tests/test_cluster_failover.py`` shows an order lost in a failover never reaching the database.

One server without replicas gets no ``replica`` promise from the gateway either: its purchases
answer 503 ``durability`` and the worker waits the same way.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from seckill.store.plumbing.connection import Client, is_cluster_client
from seckill.store.plumbing.keys import KeySpace, hash_tag
from seckill.store.plumbing.routing import slot_of
from seckill.worker.streams import Batch

log = logging.getLogger(__name__)

MARK_TTL_MS = 10_000


def _master(client: Client, stream: str) -> tuple[str, redis.Redis]:
    """The name and the plain client of the node that owns ``stream`` (one server: itself)."""
    if not is_cluster_client(client):
        return "", client
    node = client.nodes_manager.get_node_from_slot(slot_of(stream))
    return node.name, client.get_redis_connection(node)


def confirmed(client: Client, keys: KeySpace, batch: Batch, replicas: int,
              timeout_ms: int) -> tuple[Batch, bool]:
    """The part of ``batch`` whose masters confirm that ``replicas`` replicas have it, and
    whether some of it was held back (left pending, to be read again)."""
    by_master: dict[str, tuple[redis.Redis, list[str]]] = {}
    for stream, entries in batch:
        if entries:
            name, node = _master(client, stream)
            by_master.setdefault(name, (node, []))[1].append(stream)
    kept: set[str] = set()
    for name, (node, streams) in by_master.items():
        # The mark shares the first stream's hash tag, so its slot: that master's.
        if _replicated(node, keys.replication_mark(hash_tag(streams[0])), replicas, timeout_ms):
            kept.update(streams)
        else:
            log.warning("%d stream(s) on %s: no replica confirmed the entries within %d ms; "
                        "they stay pending", len(streams), name or "Redis", timeout_ms)
    held = any(entries and stream not in kept for stream, entries in batch)
    if held and is_cluster_client(client):
        client.nodes_manager.initialize()  # a master may have changed
    return [(s, e) for s, e in batch if s in kept or not e], held


def _replicated(node: redis.Redis, mark: str, replicas: int, timeout_ms: int) -> bool:
    pipe = node.pipeline(transaction=False)
    pipe.set(mark, "1", px=MARK_TTL_MS)
    pipe.execute_command("WAIT", replicas, timeout_ms)
    try:
        replies: Any = pipe.execute(raise_on_error=False)
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    if any(isinstance(reply, Exception) for reply in replies):  # MOVED: not that master now
        return False
    return int(replies[1]) >= replicas
