"""With ``SECKILL_DURABILITY=replica``: a master on which a durability wait found no replica
stops deciding, until a probe sees a replica acknowledge a write again.

A master with ``min-replicas-to-write 1`` refuses a script's first write while it has no
replica online (``NOREPLICAS``: nothing decided, 503 ``no_replica``). A master without it (a
user's own cluster, a managed service) takes the write, and only the wait after it can tell
that no replica has it: the purchase is decided, then answered 503 ``durability``. So the
first wait that finds no replica (``WAIT`` 0, ``WAITAOF``'s replica count 0) stops the
master here: every later write routed to it is answered 503 ``no_replica`` before its script
is sent, and only the writes already in flight are decided unconfirmed.

A stopped master is probed by the write that finds it stopped, at most once every
``PROBE_INTERVAL`` and by one caller at a time (the others are refused at once): a short-lived
key written in the write's own slot, then ``WAIT 1`` for at most ``PROBE_WAIT_MS``. When a
replica acknowledges it, the master is taken again and that write goes ahead. A frozen
replica keeps its link (``INFO replication`` still says ``online``), so the probe must see a
fresh write acknowledged, not a link.

The view is each process's own (each gunicorn worker stops after its own first failed wait):
sharing it through Redis would ask the master in trouble, and one wait's timeout per process
is the cost.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import redis

from seckill.store.plumbing.connection import (
    Client,
    address_of,
    is_cluster_client,
    no_replica_refusal,
)
from seckill.store.plumbing.keys import hash_tag

log = logging.getLogger(__name__)

PROBE_INTERVAL = 0.5  # seconds between two probes of one stopped master
PROBE_WAIT_MS = 200  # a replica online acks within a millisecond or two
PROBE_TTL_MS = 10_000  # the probe's key: gone by itself
PROBE_SUFFIX = "replica-probe"


@dataclasses.dataclass
class _Stop:
    since: float
    probed_at: float = float("-inf")
    probes: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def probe_key(key: str) -> str:
    """The probe's key for a write on ``key``: the same prefix and hash tag (the same slot)."""
    start = key.find("{")
    if start < 0:
        return f"{key}:{PROBE_SUFFIX}"
    return f"{key[:start]}{{{hash_tag(key)}}}:{PROBE_SUFFIX}"


class ReplicaStops:
    """The masters this process stopped deciding on (see the module docstring)."""

    def __init__(self, client: Client, probe_wait_ms: int = PROBE_WAIT_MS) -> None:
        self._client = client
        self._probe_wait_ms = max(1, probe_wait_ms)
        self._stopped: dict[str, _Stop] = {}

    @property
    def any(self) -> bool:
        """Whether some master is stopped (the hot path asks only this while none is)."""
        return bool(self._stopped)

    def stopped(self) -> list[str]:
        """The names of the stopped masters."""
        return list(self._stopped)

    def _master_of(self, key: str) -> tuple[str, redis.Redis]:
        """The name of the master that owns ``key``, as the slot map says now, and a client
        of it."""
        client = self._client
        if is_cluster_client(client):
            node = client.get_node_from_key(key)
            return node.name, client.get_redis_connection(node)
        return address_of(client), client

    def stop(self, key: str) -> None:
        """A wait after a write on ``key`` found no replica: stop its master."""
        name, _ = self._master_of(key)
        if name not in self._stopped:
            self._stopped.setdefault(name, _Stop(since=time.monotonic()))
            log.error("SECKILL_DURABILITY=replica: a write on %s was not confirmed by any "
                      "replica; its purchases are refused (503 no_replica) until a replica "
                      "acknowledges a write again", name)

    def admit(self, key: str) -> None:
        """Raise the ``no_replica`` refusal if the master of ``key`` is stopped and a probe
        (when one is due, and no other caller's is running) does not see a replica."""
        name, conn = self._master_of(key)
        stop = self._stopped.get(name)
        if stop is None:
            return
        if time.monotonic() - stop.probed_at < PROBE_INTERVAL or not stop.lock.acquire(
                blocking=False):
            raise no_replica_refusal()
        try:
            stop.probed_at = time.monotonic()
            stop.probes += 1
            if not self._acked(conn, key):
                raise no_replica_refusal()
            if self._stopped.get(name) is stop:
                del self._stopped[name]
            log.warning("SECKILL_DURABILITY=replica: a replica of %s acknowledges writes again; "
                        "purchases resume after %.1f s (%d probes)", name,
                        time.monotonic() - stop.since, stop.probes)
        finally:
            stop.lock.release()

    def _acked(self, conn: redis.Redis, key: str) -> bool:
        """Whether a replica acknowledges a fresh write on the master within the probe's wait
        (``WAIT`` counts the writes of its own connection: both go on one)."""
        pipe = conn.pipeline(transaction=False)
        pipe.set(probe_key(key), "1", px=PROBE_TTL_MS)
        pipe.execute_command("WAIT", 1, self._probe_wait_ms)
        try:
            _, acked = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            log.info("replica probe of %s failed: %s: %s", key, type(exc).__name__, exc)
            return False
        return isinstance(acked, int) and acked >= 1
