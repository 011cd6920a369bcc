"""How an orders worker reads, claims, retries and gives up: its options in one value
(``seckill worker`` takes them from the settings: ``seckill.worker.run.build_worker``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """An orders worker's options; the defaults are the settings' own."""

    consumer: str | None = None  # its name in the consumer group (default: <host>-<pid>)
    batch: int = 500  # entries read (or reclaimed) per stream at a time
    block_ms: int = 500  # how long a read waits for new entries
    # On a cluster reads do not block: a round that found nothing sleeps this long.
    poll_ms: int = 100
    claim_idle_ms: int = 30_000  # entries pending this long on another consumer are taken over
    # A consumer silent this long with nothing pending is gone (None: the claim bound).
    consumer_idle_ms: int | None = None
    max_deliveries: int = 5  # deliveries before an entry the database refuses is dead-lettered
    refresh_seconds: float = 2.0  # how often the database is asked for new activities
    backoff_max: float = 10.0  # the longest wait between tries while the database is down
    retire_grace_ms: int = 10_000  # an ended activity's stream is retired this long after
    recheck_seconds: float = 30.0  # how often a retired stream is looked at again
    # SECKILL_DURABILITY=replica: store only what this many replicas have
    # (seckill/worker/replicas.py), waiting at most replica_timeout_ms.
    replicas: int = 0
    replica_timeout_ms: int = 1500

    @property
    def gone_after_ms(self) -> int:
        """How long a consumer is silent, with nothing pending, before it counts as gone."""
        return self.claim_idle_ms if self.consumer_idle_ms is None else self.consumer_idle_ms
