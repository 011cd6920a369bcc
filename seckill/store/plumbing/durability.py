"""Making a 200 mean "on disk": WAITAOF after every successful write.

``SECKILL_DURABILITY`` is ``local`` (the default: this Redis's AOF), ``replica`` (one replica's
AOF too) or ``none``. WAITAOF only waits for writes made on its own connection, so it is sent
with the script, in one round trip. For ``replica`` a WAIT comes first: a replica answers the
master's ack request before it fsyncs the write that came in the same read, and otherwise
reports its fsync only once a second, so WAITAOF alone would wait up to a second; once WAIT
has seen the write applied, WAITAOF's own ack request finds it fsynced (a replica fsyncs
before it sends that ack). The two share SECKILL_DURABILITY_TIMEOUT_MS. A server that cannot
do it (no WAITAOF, AOF off) is named in the log once and the gateway carries on as ``none``:
refusing every purchase would be worse. The modes in detail: docs/internals.md.

For ``replica``, a master must also refuse writes while none of its replicas is online
(``min-replicas-to-write 1``): the script is then refused at its first write (``NOREPLICAS``,
nothing decided) and the purchase answered 503 ``no_replica``, where the WAIT alone could only
tell, after the decision, that no replica has it. The gateway checks the setting at start
(:func:`check_guard`: a production gateway refuses to start where it reads 0, unless
SECKILL_DURABILITY_UNGUARDED=1); wherever it is missing or cannot be read, a master whose wait
found no replica is stopped until a probe sees one (``seckill.store.plumbing.replica_stop``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis

from seckill.config import ConfigError
from seckill.store.plumbing.connection import (
    Client,
    is_cluster_client,
    masters,
    on_every_master,
)

log = logging.getLogger(__name__)

MODES = ("none", "local", "replica")


class Durability:
    """The durability mode in effect: whether a write is followed by WAITAOF, and its check."""

    def __init__(self, mode: str, timeout_ms: int = 1500) -> None:
        if mode not in MODES:
            raise ValueError(f"durability must be one of {MODES}, got {mode!r}")
        self.requested = mode
        self.mode = mode
        self.timeout_ms = timeout_ms
        self._probed = mode == "none"
        self._lock = threading.Lock()

    @property
    def needs(self) -> tuple[int, int]:
        """The (local, replica) AOF counts a write must reach: WAITAOF's first two arguments."""
        return (0, 0) if self.mode == "none" else (1, 1 if self.mode == "replica" else 0)

    def waits(self, client: Client) -> bool:
        """Whether a write is followed by WAITAOF (the server is probed on first use)."""
        if not self._probed:
            self.probe(client)
        return self.mode != "none"

    def commands(self, client: Client) -> list[tuple[Any, ...]]:
        """What follows a write in its send: nothing (``none``), ``WAITAOF 1 0`` (``local``),
        or ``WAIT 1`` then ``WAITAOF 1 1`` (``replica``), within the timeout together. The last
        one's reply is the one :meth:`confirmed` reads."""
        if not self.waits(client):
            return []
        local, replicas = self.needs
        if not replicas:
            return [("WAITAOF", local, 0, self.timeout_ms)]
        first = max(1, self.timeout_ms // 2)  # 0 would mean "forever"
        return [("WAIT", replicas, first),
                ("WAITAOF", local, replicas, max(1, self.timeout_ms - first))]

    def probe(self, client: Client) -> str:
        """Ask the server once whether WAITAOF works; downgrade to ``none`` loudly if not."""
        with self._lock:
            if self._probed:
                return self.mode
            try:
                on_every_master(client, "WAITAOF", 1, 0, 1)  # each owns some activities
            except redis.ResponseError as exc:
                log.error(
                    "SECKILL_DURABILITY=%s is not supported by this server (%s): purchases "
                    "will be answered without confirming the AOF fsync. Use Redis/Valkey >= "
                    "7.2 with appendonly yes to keep the promise of a 200.",
                    self.requested, exc,
                )
                self.mode = "none"
            self._probed = True
            return self.mode

    def found_no_replica(self, replies: list[Any]) -> bool:
        """Whether the waits after a write (:meth:`commands`' replies) found no replica that
        has it: ``WAITAOF``'s replica count 0, or ``WAIT``'s 0 when ``WAITAOF`` said no
        count. Never for a mode that does not ask a replica."""
        if not self.needs[1] or not replies:
            return False
        last = replies[-1]
        if isinstance(last, list | tuple) and len(last) == 2:
            return int(last[1]) < 1
        return replies[0] == 0

    def confirmed(self, reply: object) -> bool:
        """Does a WAITAOF reply say the write is where the mode wants it?"""
        if isinstance(reply, Exception):
            return False
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            return False
        want_local, want_replicas = self.needs
        return int(reply[0]) >= want_local and int(reply[1]) >= want_replicas


GUARD_FIX = ("set min-replicas-to-write 1 and min-replicas-max-lag 2 (or the durability "
             "timeout in seconds, if longer) on every node, in its config file and with "
             "CONFIG SET")


def _nodes(client: Client) -> list[tuple[str, redis.Redis]]:
    """Every node that is or may become a master: a cluster's primaries and replicas (a
    replica promoted in a failover keeps its own setting), or the one server."""
    if is_cluster_client(client):
        return [(node.name, client.get_redis_connection(node)) for node in client.get_nodes()]
    return masters(client)


def unguarded(client: Client) -> tuple[list[str], list[str]]:
    """The nodes whose ``min-replicas-to-write`` is 0 (they take a write while they have no
    replica online), and those where it cannot be read (``CONFIG`` refused, as managed
    services do, or the node away), each with why."""
    unset, unread = [], []
    for name, conn in _nodes(client):
        try:
            value = conn.config_get("min-replicas-to-write").get("min-replicas-to-write")
        except redis.RedisError as exc:
            unread.append(f"{name} ({type(exc).__name__}: {exc})")
            continue
        if value is None:
            unread.append(f"{name} (not reported)")
        elif int(value) < 1:
            unset.append(name)
    return unset, unread


def check_guard(client: Client, production: bool, accepted: bool) -> None:
    """With ``replica``, a node that takes writes while it has no replica online decides a
    purchase no replica confirms: ConfigError in production where the setting reads 0, unless
    ``accepted`` (SECKILL_DURABILITY_UNGUARDED=1); otherwise said loudly in the log. Where it
    cannot be read, said in the log: this process then stops a master after the first wait
    that finds no replica (``seckill.store.plumbing.replica_stop``)."""
    unset, unread = unguarded(client)
    if unset and production and not accepted:
        raise ConfigError(
            f"SECKILL_DURABILITY=replica but min-replicas-to-write is 0 on {', '.join(unset)}: "
            "a master left without a replica would decide purchases that no replica confirms "
            f"(each answered 503 'durability'). Fix: {GUARD_FIX}. To start anyway, accepting "
            "that risk, set SECKILL_DURABILITY_UNGUARDED=1 (docs/deployment.md, Durability)")
    if unset:
        log.warning(
            "SECKILL_DURABILITY=replica but min-replicas-to-write is 0 on %s%s: when such a "
            "master has no replica, the purchases in flight are decided and answered 503 "
            "'durability', then each process refuses its purchases (503 no_replica) until a "
            "replica acknowledges writes again. Fix: %s", ", ".join(unset),
            " (SECKILL_DURABILITY_UNGUARDED=1)" if accepted else "", GUARD_FIX)
    if unread:
        log.warning(
            "SECKILL_DURABILITY=replica: cannot read min-replicas-to-write on %s; unless it "
            "is 1 or more, when such a master has no replica the purchases in flight are "
            "decided and answered 503 'durability', then each process refuses its purchases "
            "(503 no_replica) until a replica acknowledges writes again", "; ".join(unread))
