"""Making a 200 mean "on disk": WAITAOF after every successful write.

``SECKILL_DURABILITY``:

* ``local`` (default): after a purchase or cancellation wrote, ``WAITAOF 1 0 <timeout>``
  confirms the write reached this Redis's AOF on disk before the gateway answers 200. It
  holds even on a server configured with ``appendfsync everysec``. Needs Redis/Valkey >= 7.2
  with ``appendonly yes``.
* ``replica``: also waits for one replica's AOF (``WAITAOF 1 1``).
* ``none``: answer as soon as the script has run (the AOF policy of the server decides).

WAITAOF only waits for writes made on *its own connection*, so it is sent in the same
pipeline as the script (one round trip, one connection). A rejection wrote nothing, and
WAITAOF returns at once for it.

When the server cannot do it (Redis 7.0 has no WAITAOF; AOF disabled), the gateway says so
clearly in its log the first time and carries on as ``none``: refusing every purchase would be
worse than the server's own durability.
"""

from __future__ import annotations

import logging
import threading

import redis

log = logging.getLogger("seckill.durability")

MODES = ("none", "local", "replica")


class Durability:
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
        return (0, 0) if self.mode == "none" else (1, 1 if self.mode == "replica" else 0)

    def waits(self, client: redis.Redis) -> bool:
        if not self._probed:
            self.probe(client)
        return self.mode != "none"

    def probe(self, client: redis.Redis) -> str:
        """Ask the server once whether WAITAOF works; downgrade to ``none`` loudly if not."""
        with self._lock:
            if self._probed:
                return self.mode
            try:
                client.execute_command("WAITAOF", 1, 0, 1)
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

    def confirmed(self, reply: object) -> bool:
        """Does a WAITAOF reply say the write is where the mode wants it?"""
        if isinstance(reply, Exception):
            return False
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            return False
        want_local, want_replicas = self.needs
        return int(reply[0]) >= want_local and int(reply[1]) >= want_replicas
