"""Buyers of a sharded activity chosen by the part they are homed on."""

from __future__ import annotations

from seckill.store.plumbing.parts import home_part


def users_homed(shards: int, part: int, count: int, stem: str = "u") -> list[str]:
    """``count`` user ids whose home is ``part``."""
    found = []
    for i in range(100_000):
        uid = f"{stem}{i}"
        if home_part(uid, shards) == part:
            found.append(uid)
            if len(found) == count:
                return found
    raise AssertionError("not enough users")
