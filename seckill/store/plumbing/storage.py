"""Whether the sale's store can write to its disk: what Redis says of its own persistence, and
the room left on the local data folder.

Redis is the authority on its disk: a server whose append-only file (or snapshot, with
``stop-writes-on-bgsave-error``) cannot be written refuses every write with a ``MISCONF``
error and says so in ``INFO persistence`` (``aof_last_write_status:err``), and takes writes
again by itself once a write succeeds. The data folder's free space adds what Redis cannot say
while it is down (``seckill up``'s Valkey keeps its files there); a folder that does not exist
here (the store runs elsewhere) adds nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import redis

from seckill.store.plumbing.connection import Client, on_every_master

# Below this much room a disk counts as full: a few appends of the AOF, not a rewrite.
FULL_BELOW_BYTES = 1 << 20
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device", as Redis words it too


@dataclasses.dataclass(frozen=True, slots=True)
class Storage:
    """Whether the store takes writes, why not (Redis's own words, or the disk's), and the
    room left on the local data folder (None: no such folder here)."""

    writable: bool
    reason: str | None
    available_bytes: int | None


def available_bytes(path: Path) -> int | None:
    """The bytes an unprivileged writer may still use on ``path``'s filesystem; None when
    ``path`` does not exist."""
    try:
        found = os.statvfs(path)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def disk_full(path: Path) -> bool:
    """Whether ``path``'s filesystem has less than :data:`FULL_BELOW_BYTES` left."""
    room = available_bytes(path)
    return room is not None and room < FULL_BELOW_BYTES


# A full disk counts as full again only once it has this much room: while it is full, servers
# that die of it and restart free and take a little room at a time.
ROOM_AGAIN_BYTES = 16 << 20


class DiskWatch:
    """Whether the local data folder's disk is full, read at most once every ``every``
    seconds (one ``statvfs``): cheap enough to ask on a failed purchase. Full below
    :data:`FULL_BELOW_BYTES`, and until it has :data:`ROOM_AGAIN_BYTES` (or an eighth of
    the disk) again."""

    def __init__(self, path: Path, every: float = 1.0) -> None:
        self.path = path
        self.every = every
        self._read_at = -float("inf")
        self._full = False

    def full(self) -> bool:
        """Whether the disk was full at the last reading (made now if it is too old)."""
        now = time.monotonic()
        if now - self._read_at >= self.every:
            self._read_at = now
            try:
                found = os.statvfs(self.path)
            except OSError:  # no such folder here: the store runs elsewhere
                self._full = False
                return False
            room, size = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
            again = min(ROOM_AGAIN_BYTES, size // 8)  # a small disk: an eighth of it
            self._full = room < (again if self._full else FULL_BELOW_BYTES)
        return self._full


def persistence_error(info: dict[str, Any]) -> str | None:
    """What ``INFO persistence`` of one server says stops its writes, or None."""
    if info.get("aof_enabled") and info.get("aof_last_write_status") == "err":
        return "the append-only file cannot be written"
    if info.get("rdb_last_bgsave_status") == "err":
        return "the last snapshot failed"
    return None


def refuses_writes(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a command because it cannot write to its disk
    (``MISCONF``: writes, and PING, until an append succeeds again)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("MISCONF")


class RefusalNotice:
    """The log's account of a store that refuses writes for its disk, from one loop or
    request path: the first refusal at once, then one line every ``every`` seconds with how
    many came since, and a line once writes pass again. A full disk lasts minutes and is
    retried many times a second; a line per try would bury everything else (and fill the
    log's own disk)."""

    def __init__(self, log: logging.Logger, what: str, every: float = 30.0) -> None:
        self.log = log
        self.what = what  # what waits: "the orders stay pending", "fails open"
        self.every = every
        self._lock = threading.Lock()
        self._since: float | None = None  # the first refusal of this spell (monotonic)
        self._said_at = 0.0
        self._unsaid = 0

    def refused(self, exc: BaseException) -> None:
        """Count a refusal; say so if it is the first of its spell or a line is due."""
        now = time.monotonic()
        with self._lock:
            first = self._since is None
            if first:
                self._since = now
            elif now - self._said_at < self.every:
                self._unsaid += 1
                return
            since, count = self._since, self._unsaid
            self._said_at, self._unsaid = now, 0
        if first:
            self.log.warning("the sale's store refuses writes, its disk full or failing (%s); "
                             "%s, retrying until it takes them", exc, self.what)
        else:
            self.log.warning("the sale's store still refuses writes after %.0f s (%d more "
                             "refusals); %s", now - (since or now), count + 1, self.what)

    def passed(self) -> None:
        """A write went through: end the spell, saying so if there was one."""
        if self._since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self._since, self._unsaid = self._since, None, 0
        if since is not None:
            self.log.info("the sale's store takes writes again after %.1f s",
                             time.monotonic() - since)


def read_storage(client: Client, data_dir: Path) -> Storage:
    """The store's storage now: Redis's persistence status on every master, then the data
    folder's room. A Redis that cannot be reached says nothing here (``seckill_redis_up`` and
    ``/healthz`` say that); its disk still does."""
    room = available_bytes(data_dir)
    reason: str | None = None
    try:
        found = on_every_master(client, "INFO", "persistence")
    except redis.RedisError:
        found = {}
    # One server answers its fields; a cluster, its fields per node.
    for info in found.values() if found and all(isinstance(v, dict) for v in found.values()) \
            else [found]:
        reason = reason or persistence_error(info)
    if reason is None and room is not None and room < FULL_BELOW_BYTES:
        reason = f"the data folder {data_dir}: {NO_SPACE}"
    elif reason is not None and room is not None and room < FULL_BELOW_BYTES:
        reason += f" ({NO_SPACE} in {data_dir})"
    return Storage(reason is None, reason, room)
