"""The purchase's wire on a Redis/Valkey Cluster: each call goes to the master that owns the
slot of its keys (every key of one call shares a hash tag), on a :class:`Wire` of that master's
own, with the same one-send round trip and the same limit on connections per master.

The slot map is redis-py's (the cluster client's ``NodesManager``): read at start, patched on
``MOVED``, read again when a master cannot be reached or the cluster says it is down. A master
that failed a call (refused, timed out, lost a reply) is asked last for the map, and while the
map still names it, the map is read again every ``WATCH_INTERVAL`` until it answers or another
node takes its slots: a frozen master gives no sign but timeouts, and its replica's promotion
is learnt within that interval, not at the next failed call that happens to refresh the map.
A call is sent again only where the reply proves that it did not run:

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
from redis.cluster import PRIMARY, ClusterNode
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

log = logging.getLogger(__name__)

# A map read this recently is not read again for another failure (a crowd fails at once).
REFRESH_INTERVAL = 0.1
RETRY_PAUSE = 0.05  # before resending after TRYAGAIN, CLUSTERDOWN or a refused connection
# MOVED/ASK answers in a row, with no pause between them: a map that does not settle. (Every
# other resend pauses first, and stops at the deadline.)
MAX_REDIRECTS = 16
# While a master that failed a call still owns slots in the map: how often the map is read
# again, and for how long at most (a master that neither answers nor is replaced).
WATCH_INTERVAL = 0.2
WATCH_LIMIT = 60.0


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
        # Masters that failed a call, by name, with when they first did (:meth:`_suspect`).
        self._suspects: dict[str, float] = {}
        self._watch_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

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
        """Read the slot map again, unless it was read a moment ago or is being read. The
        masters that failed a call are asked last: a frozen one would hold the read for its
        whole timeout."""
        if time.monotonic() - self._refreshed_at < REFRESH_INTERVAL:
            return
        if not self._refresh_lock.acquire(blocking=False):
            return  # another call is reading it
        try:
            manager = self._cluster.nodes_manager
            suspects = list(self._suspects)
            for name in suspects:
                manager.move_node_to_end_of_cached_nodes(name)
            manager.initialize(last_failed_node_name=suspects[0] if suspects else None)
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
                # Whatever time is left: a connect that timed out may have used it all.
                self._suspect(node)
                self._wait_out(deadline, refresh=False, reason="not_connected")
                asking, redirects = None, 0
                continue
            except (redis.ConnectionError, redis.TimeoutError):
                wire.close()  # the master may be gone: its other connections too
                self._suspect(node)
                raise
            if self._suspects:
                self._suspects.pop(node.name, None)  # it answers
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

    def _suspect(self, node: ClusterNode) -> None:
        """``node`` failed a call: read the map now (asking it last), and keep reading it in
        the background while it names ``node`` as a master (:meth:`_watch`)."""
        with self._watch_lock:
            self._suspects.setdefault(node.name, time.monotonic())
            if self._watcher is None and not self._closed.is_set():
                self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                 name="seckill-cluster-watch")
                self._watcher.start()
        self.refresh()

    def _watch(self) -> None:
        """Read the map every WATCH_INTERVAL until no suspect is a master in it any more (its
        replica took over, or it answered a call), or for WATCH_LIMIT at most."""
        while not self._closed.wait(WATCH_INTERVAL):
            self.refresh()
            manager = self._cluster.nodes_manager
            with self._watch_lock:
                now = time.monotonic()
                for name, since in list(self._suspects.items()):
                    node = manager.get_node(node_name=name)
                    if node is None or node.server_type != PRIMARY or now - since > WATCH_LIMIT:
                        self._suspects.pop(name, None)  # (a call may have cleared it too)
                if not self._suspects:
                    self._watcher = None
                    return
        with self._watch_lock:
            self._watcher = None

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
        """Stop watching the map, and disconnect every master's idle connections."""
        self._closed.set()
        watcher = self._watcher
        if watcher is not None:
            watcher.join(timeout=10)  # a read of the map in progress ends within its timeout
        for wire in list(self._wires.values()):
            wire.close()
