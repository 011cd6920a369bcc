"""With ``SECKILL_DURABILITY=replica``, the embedded cluster's nodes refuse writes while a
master has no replica online: a purchase no replica can confirm is then refused
before its script decides anything (503 ``no_replica``), not decided and answered 503.

Valkey checks ``min-replicas-to-write`` at a script's first write (``NOREPLICAS``: the script
changes nothing); a replica counts when it is online (not in its first sync) and acked within
``min-replicas-max-lag`` seconds. Set on every node: a replica ignores it until promoted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from seckill.config import ConfigError, Settings


def min_replicas_args(durability: str, timeout_ms: int) -> list[str]:
    """The valkey-server options for ``durability`` (nothing unless ``replica``)."""
    if durability != "replica":
        return []
    # The lag is counted in whole seconds and an idle replica acks once a second: 1 would
    # refuse writes now and then on a healthy shard.
    lag = max(2, math.ceil(timeout_ms / 1000))
    return ["--min-replicas-to-write", "1", "--min-replicas-max-lag", str(lag)]


def durability_of(env: Mapping[str, str], replicas: int) -> tuple[str, int]:
    """``seckill up``'s SECKILL_DURABILITY and its timeout (ms) from ``env``; ConfigError for
    ``replica`` without a replica per master (every purchase would be refused)."""
    # Only the durability settings matter here (`seckill up` has checked the rest).
    settings = Settings.from_env({"SECKILL_ENV": "development", **{
        name: value for name, value in env.items() if name.startswith("SECKILL_DURABILITY")}})
    if settings.durability == "replica" and not replicas:
        raise ConfigError("SECKILL_DURABILITY=replica needs a replica per master "
                          "(--replicas 1 or more): without one every purchase is refused")
    return settings.durability, settings.durability_timeout_ms
