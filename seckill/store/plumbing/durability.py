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
tell, after the decision, that no replica has it. The probe checks the setting and says in the
log where it is missing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis

from seckill.store.plumbing.connection import Client, masters, on_every_master

log = logging.getLogger("seckill.durability")

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
            if self.mode == "replica":
                _check_min_replicas(client)
            self._probed = True
            return self.mode

    def confirmed(self, reply: object) -> bool:
        """Does a WAITAOF reply say the write is where the mode wants it?"""
        if isinstance(reply, Exception):
            return False
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            return False
        want_local, want_replicas = self.needs
        return int(reply[0]) >= want_local and int(reply[1]) >= want_replicas


def _check_min_replicas(client: Client) -> None:
    """Say in the log when a master does not refuse writes while it has no replica online
    (``min-replicas-to-write`` 0): there a purchase no replica can confirm is decided first,
    then answered 503 ``durability``, instead of refused before anything is decided
    (``no_replica``). The embedded cluster sets it (``seckill.ops.cluster``); an external
    server's operator must (docs/deployment.md, "Durability")."""
    unset = []
    for name, conn in masters(client):
        try:
            value = conn.config_get("min-replicas-to-write").get("min-replicas-to-write")
        except redis.RedisError as exc:
            log.warning("SECKILL_DURABILITY=replica: cannot check min-replicas-to-write on %s "
                        "(%s); unless it is 1 or more, a purchase no replica can confirm is "
                        "decided, then answered 503 'durability'", name, exc)
            return
        if not value or int(value) < 1:
            unset.append(name)
    if unset:
        log.warning("SECKILL_DURABILITY=replica but min-replicas-to-write is 0 on %s: while a "
                    "master has no replica online, each purchase is decided, then answered "
                    "503 'durability' instead of refused with 'no_replica'. Set "
                    "min-replicas-to-write 1 and min-replicas-max-lag (seconds) on every node",
                    ", ".join(unset))
