"""The store's numbers as ``/metrics`` shows them, read once per interval for the whole
deployment and shared through Redis (``seckill.metrics.Kept``): every process of every
instance would otherwise read the census and render it each interval, though the text is the
same everywhere."""

from __future__ import annotations

import uuid

from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace

LEASE_MS = 5000  # a reader that dies mid-reading holds the others back this long at most
KEPT_MS = 600_000  # a stopped deployment's text does not stay for ever


class SharedText:
    """``seckill.metrics.Shared`` on Redis: the text under ``keys.metrics_kept()``, the claim
    under ``keys.metrics_reading()`` with a lease. Redis errors pass to the caller."""

    def __init__(self, client: Client, keys: KeySpace, lease_ms: int = LEASE_MS) -> None:
        self.client = client
        self.keys = keys
        self.lease_ms = lease_ms
        self._token = uuid.uuid4().hex

    def fetch(self) -> tuple[float, bytes] | None:
        """The shared text and when its reading began (Unix seconds); None: none yet."""
        found = self.client.get(self.keys.metrics_kept())
        if not found:
            return None
        taken, _, text = str(found).partition("\n")
        return int(taken) / 1000, text.encode()

    def claim(self) -> bool:
        """Whether this process now holds the reading (no other held it)."""
        return bool(self.client.set(self.keys.metrics_reading(), self._token, nx=True,
                                    px=self.lease_ms))

    def publish(self, taken: float, text: bytes) -> None:
        """Share ``text`` and end the claim, so that the next reading is due one interval
        after this one began. Deleted unconditionally: a reading that outlasted its lease
        may end another's claim, which costs one extra reading, nothing else."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.metrics_kept(), f"{int(taken * 1000)}\n{text.decode()}", px=KEPT_MS)
        pipe.delete(self.keys.metrics_reading())
        pipe.execute()
