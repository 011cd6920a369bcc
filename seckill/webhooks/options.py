"""The dispatcher's options, and the backoff between a delivery's attempts."""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
from collections.abc import Mapping

from seckill.config import webhook_dispatch


def _owner() -> str:
    # The lease_owner column holds 64 characters: a long host name is cut, never the pid and
    # the random part that tell two dispatchers of one host apart.
    return f"{os.uname().nodename[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclasses.dataclass(frozen=True)
class DispatchOptions:
    """How a dispatcher works. ``batch``: outbox rows fanned out, and deliveries claimed, per
    round; ``per_endpoint``: sends in flight to one endpoint at most (each endpoint has its own
    pool: one that hangs never delays another); ``attempt_timeout``: a 2xx must arrive within
    it (seconds, connecting included) or the attempt failed; ``lease_ms``: how long a claim
    is this dispatcher's alone (a killed dispatcher's claims are taken again after it);
    ``idle``: the wait between rounds when there is nothing to do (seconds); ``round_s``: the
    shortest time from one busy round to the next (each round is a database transaction: a
    commit, with its fsyncs, per finished attempt would compete with the sale's own disk
    writes, Valkey's AOF and the orders worker's batches); ``retry_hours``:
    a delivery still failing this long after its first attempt is failed; ``retention_s``:
    delivered events kept this long;
    ``backoff_base_s``/``backoff_cap_s``: the n-th retry waits base * 2**(n-1), at most cap,
    times a random factor in [0.5, 1)."""

    batch: int = 300
    per_endpoint: int = 16
    attempt_timeout: float = 10.0
    connect_timeout: float = 5.0
    lease_ms: int = 60_000
    idle: float = 0.2
    round_s: float = 0.05
    retry_hours: float = 24.0
    retention_s: int = 7 * 86_400
    prune_every_s: int = 600
    backoff_base_s: float = 5.0
    backoff_cap_s: float = 3600.0
    owner: str = dataclasses.field(default_factory=_owner)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DispatchOptions:
        """The options, ``SECKILL_WEBHOOK_RETRY_HOURS`` and ``SECKILL_WEBHOOK_RETENTION``
        (seconds) read from ``env`` (default: the process environment) by seckill.config."""
        retry_hours, retention_s = webhook_dispatch(env)
        return cls(retry_hours=retry_hours, retention_s=retention_s)

    @property
    def outstanding(self) -> int:
        """Deliveries one endpoint may have claimed and not finished: as many as its pool
        sends within a lease, deadlines included (so that no claim lapses before its send)."""
        rounds = max(1, int(self.lease_ms / 1000 / (self.attempt_timeout + 1)))
        return max(self.per_endpoint, min(self.batch, self.per_endpoint * rounds))

    def backoff_ms(self, attempts: int, rng: random.Random | None = None) -> int:
        """The wait after the ``attempts``-th failed attempt (exponential, with jitter)."""
        base = min(self.backoff_cap_s, self.backoff_base_s * 2 ** min(attempts - 1, 30))
        return int(base * 1000 * (rng or random).uniform(0.5, 1.0))
