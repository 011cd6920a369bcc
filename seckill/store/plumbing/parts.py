"""Where the parts of a sharded activity live, and which part is a buyer's home.

A stock activity created with ``"shards": n`` keeps its stock in ``n`` parts. The 16,384 slots
are cut into ``n`` equal stretches; part 0 is the activity's own hash tag ``{<aid>}`` (an
unsharded activity is exactly part 0 of 1), in whichever stretch its slot is; part ``j`` is
``{<aid>:<j>.<k>}`` with the smallest ``k`` whose slot falls in the middle half of the ``j``-th
stretch after part 0's. Clusters give each master a contiguous range of slots, so one part per
stretch lands evenly on the masters (exactly when ``n`` is a multiple of their number and they
hold equal ranges) with no knowledge of the current slot map: every process derives the same
tags from ``(aid, n)`` alone. The protocol that keeps one purchase per user
and no early "sold out" across the parts: ``lua/purchase.lua``, ``lua/lend.lua``,
``lua/settle.lua`` and docs/architecture.md, "Hot items: sharded stock".
"""

from __future__ import annotations

import functools
import zlib

from redis.crc import key_slot

SLOTS = 16_384
_MAX_TRIES = 1_000_000


@functools.lru_cache(maxsize=4096)
def part_tags(aid: str, shards: int) -> tuple[str, ...]:
    """The hash tags of the activity's parts, part 0 first (``(aid,)`` when unsharded)."""
    if shards <= 1:
        return (aid,)
    width = SLOTS / shards
    first = int(key_slot(aid.encode()) // width)  # part 0's stretch
    tags = [aid]
    for part in range(1, shards):
        middle = ((first + part) % shards + 0.5) * width
        low, high = middle - width / 4, middle + width / 4
        for k in range(_MAX_TRIES):
            tag = f"{aid}:{part}.{k}"
            if low <= key_slot(tag.encode()) < high:
                tags.append(tag)
                break
        else:  # pragma: no cover - crc16 covers every stretch within a few hundred tries
            raise RuntimeError(f"no tag found for part {part} of {aid}")
    return tuple(tags)


def home_part(uid: str, shards: int) -> int:
    """The part that records ``uid``'s purchase: the same in every process, for every call."""
    if shards <= 1:
        return 0
    return zlib.crc32(uid.encode()) % shards


def activity_of_tag(tag: str) -> str:
    """The activity a part's hash tag belongs to (activity ids have no ``:``)."""
    return tag.split(":", 1)[0]


def split_units(units: int, shards: int) -> list[int]:
    """``units`` spread over ``shards`` parts as evenly as whole numbers allow (signed)."""
    sign = -1 if units < 0 else 1
    base, extra = divmod(abs(units), shards)
    return [sign * (base + (1 if part < extra else 0)) for part in range(shards)]
