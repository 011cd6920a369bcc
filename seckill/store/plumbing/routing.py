"""The purchase's wire on a Redis/Valkey Cluster: each call goes to the master that owns the
slot of its keys (every key of one call shares a hash tag), on a :class:`Wire` of that master's
own, with the same one-send round trip and the same limit on connections per master.

The slot map is redis-py's (the cluster client's ``NodesManager``): read at start, patched on
``MOVED``, read again when a master cannot be reached or the cluster says it is down. A call is
sent again only where the reply proves that it did not run:

* ``MOVED`` (the slot is elsewhere), ``ASK`` (the slot is being migrated and the keys are on the
  target: sent there after ``ASKING``), ``TRYAGAIN`` (mid-migration, the keys split between
  the two, or one not on either side yet, as a new buyer's rate counter: a new buyer of the
  activity waits for the end of the migration), ``CLUSTERDOWN`` and a connection that could
  not be opened: the command never ran. (So does ``NOSCRIPT``: the script is loaded on the
  node that said it, and sent again.)
* A reply that was lost (connection dropped or timed out after the send) is never resent: the
  script may have run. The caller answers 503 and the buyer asks the order-status endpoint.

Every retry stays inside ``wait`` seconds (``SECKILL_REDIS_TIMEOUT``): a failover that takes
longer answers 503 "unavailable" meanwhile, and the first call after it finds the new master.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from redis.cluster import ClusterNode
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    TryAgainError,
)

from seckill import metrics
from seckill.store.plumbing.connection import Cluster, NotSent, Wire, send_script

log = logging.getLogger("seckill.redis")

# A map read this recently is not read again for another failure (a crowd fails at once).
REFRESH_INTERVAL = 0.1
RETRY_PAUSE = 0.05  # before resending after TRYAGAIN, CLUSTERDOWN or a refused connection
# MOVED/ASK answers in a row, with no pause between them: a map that does not settle. (Every
# other resend pauses first, and stops at the deadline.)
MAX_REDIRECTS = 16


def slot_of(key: str) -> int:
    """The cluster slot of ``key`` (its hash tag's, if it has one)."""
    return int(key_slot(key.encode()))


class ClusterWire:
    """The purchase's round trip on a cluster (see the module docstring)."""

    def __init__(self, cluster: Cluster, limit: int, wait: float) -> None:
        self._cluster = cluster
        self._limit = limit
        self._wait = wait
        self._wires: dict[str, Wire] = {}
        self._refresh_lock = threading.Lock()
        self._refreshed_at = float("-inf")

    def master_of(self, slot: int) -> ClusterNode:
        """The master that owns ``slot``, as the current map says."""
        node: ClusterNode = self._cluster.nodes_manager.get_node_from_slot(slot)
        return node

    def _wire(self, node: ClusterNode) -> Wire:
        wire = self._wires.get(node.name)
        if wire is None:
            pool = self._cluster.get_redis_connection(node).connection_pool
            wire = self._wires.setdefault(node.name, Wire(pool, self._limit, self._wait))
        return wire

    def refresh(self) -> None:
        """Read the slot map again, unless it was read a moment ago or is being read."""
        if time.monotonic() - self._refreshed_at < REFRESH_INTERVAL:
            return
        if not self._refresh_lock.acquire(blocking=False):
            return  # another call is reading it
        try:
            self._cluster.nodes_manager.initialize()
        except redis.RedisError as exc:
            log.warning("the cluster's slot map could not be read: %s: %s",
                        type(exc).__name__, exc)
        finally:
            self._refreshed_at = time.monotonic()
            self._refresh_lock.release()

    def call(self, slot: int, *commands: tuple[Any, ...]) -> list[Any]:
        """Send ``commands`` at once to the master of ``slot``; their replies (an error reply as
        its exception object). Resent only while the first reply proves nothing ran; NotSent
        when that lasts past the deadline."""
        return self._send(slot, commands)[0]

    def _send(self, slot: int, commands: tuple[tuple[Any, ...], ...]
              ) -> tuple[list[Any], ClusterNode]:
        """:meth:`call`, also returning the node whose replies these are."""
        deadline = time.monotonic() + self._wait
        asking: ClusterNode | None = None
        redirects = 0
        while True:
            node = asking or self.master_of(slot)
            wire = self._wire(node)
            sent = (("ASKING",), *commands) if asking else commands
            try:
                replies = wire.call(*sent)
            except NotSent:
                wire.close()  # the server went away: its idle connections are likely broken
                self._wait_out(deadline, refresh=True, reason="not_connected")
                asking, redirects = None, 0
                continue
            except (redis.ConnectionError, redis.TimeoutError):
                wire.close()  # the master may be gone: its other connections too
                self.refresh()
                raise
            if asking is not None:
                replies, asking = replies[1:], None
            first = replies[0]
            if isinstance(first, TryAgainError | ClusterDownError):
                down = isinstance(first, ClusterDownError)
                self._wait_out(deadline, refresh=down, reason="clusterdown" if down else "tryagain")
                redirects = 0
                continue
            if not isinstance(first, AskError):  # MOVED is a kind of ASK
                return replies, node
            redirects += 1
            if redirects == MAX_REDIRECTS:
                raise NotSent(f"slot {slot}: still redirected after {MAX_REDIRECTS} sends")
            asking = self._redirect(first)

    def _redirect(self, reply: AskError) -> ClusterNode | None:
        """Follow a MOVED (patch the map; None: send to the slot's master) or an ASK (the node
        to send to once, after ASKING)."""
        if isinstance(reply, MovedError):
            metrics.CLUSTER_RESENDS.labels("moved").inc()
            self._cluster.nodes_manager.move_slot(reply)
            return None
        metrics.CLUSTER_RESENDS.labels("ask").inc()
        node: ClusterNode | None = self._cluster.nodes_manager.get_node(reply.host, reply.port)
        if node is None:
            node = ClusterNode(reply.host, reply.port)
            self._cluster.nodes_manager.nodes_cache[node.name] = node
        return node

    def _wait_out(self, deadline: float, refresh: bool, reason: str) -> None:
        if time.monotonic() + RETRY_PAUSE > deadline:
            raise NotSent(f"the cluster did not take the command in time ({reason})")
        metrics.CLUSTER_RESENDS.labels(reason).inc()
        if refresh:
            self.refresh()
        time.sleep(RETRY_PAUSE)

    def run_script(self, script: Script, keys: list[str], args: list[Any],
                   *after: tuple[Any, ...]) -> list[Any]:
        """EVALSHA of ``script`` on the master of its keys' slot, then the ``after`` commands,
        in one send; the replies (:func:`seckill.store.plumbing.connection.send_script`). After
        NOSCRIPT the script is loaded on the node that said it, which after an ASK is the
        migration's target, not the slot's master."""
        slot = slot_of(keys[0])
        answered: list[ClusterNode] = []  # the node of the last send's replies

        def call(*commands: tuple[Any, ...]) -> list[Any]:
            if commands[0][0] == "SCRIPT" and answered:  # SCRIPT LOAD names no key
                return self._wire(answered[0]).call(*commands)
            replies, node = self._send(slot, commands)
            answered[:] = [node]
            return replies

        return send_script(call, script, keys, args, *after)

    def close(self) -> None:
        """Disconnect every master's idle connections."""
        for wire in list(self._wires.values()):
            wire.close()
