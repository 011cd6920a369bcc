"""Dead letters: an entry the orders worker gives up on goes, with its reason, to its activity's
dead-letter stream (``<prefix>:{<aid>}:dead``), and is acknowledged in the same step."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from seckill import metrics
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace, hash_tag
from seckill.worker.groups import GROUP

log = logging.getLogger(__name__)


class Letters:
    """Dead-letters the entries of the group's streams; counts an entry's deliveries."""

    def __init__(self, client: Client, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys

    def send(self, stream: str, entry_id: str, fields: dict[str, Any], reason: str) -> None:
        """Move an entry to its activity's dead-letter stream, with the reason; acknowledge
        it (one transaction: the dead-letter stream shares the stream's hash tag)."""
        log.error("dead-lettering %s %s: %s", stream, entry_id, reason)
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.keys.dead_letters(hash_tag(stream)), {
            "stream": stream, "entry_id": entry_id, "reason": reason[:500],
            "payload": orjson.dumps(fields, default=str).decode()[:4000],
        })
        pipe.xack(stream, GROUP, entry_id)
        pipe.execute()
        metrics.DEAD_LETTERS.inc()

    def deliveries(self, stream: str, entry_id: str) -> int:
        """How many times the group delivered the entry (0: not pending)."""
        pending: Any = self.client.xpending_range(stream, GROUP, entry_id, entry_id, 1)
        return int(pending[0]["times_delivered"]) if pending else 0
