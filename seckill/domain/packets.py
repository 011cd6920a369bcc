"""Red-envelope packets: splitting an amount into packets, "double average", in integer cents.

The method: while ``k`` packets are left to split from ``rest`` cents, the next one is uniform in
``[1, 2 * rest // k]`` (its mean is the remaining average), capped so that every packet after it
can still hold 1 cent; the last one takes what is left. Every packet is >= 1 cent and they sum
to the amount exactly.

The split is a pure function of ``(amount, count, seed)``: the seed, stored with the activity in
the database, is all a rebuild needs to re-derive the packets
(``seckill.store.sale.activity.recovery``). The draws come from keyed BLAKE2b in counter mode
rather than ``random.Random``: the amounts users see must tell them nothing about the packets
still in the list (Mersenne Twister's state can be recovered from its outputs; a keyed hash's
cannot). Pushing the packets into Redis is ``seckill.store.sale.activity.activities``'s.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

MAX_AMOUNT = 10**12  # cents; every sum stays far below 2**53 (exact in Lua's doubles)
MAX_PACKETS = 1_000_000

_WORDS = struct.Struct("<8Q")
_TWO_64 = 1 << 64

Progress = Callable[[int, int], None]


def new_seed() -> int:
    """A fresh secret seed; fits a signed 64-bit column."""
    return secrets.randbits(63)


def _words(seed: int) -> Iterator[int]:
    """Uniform 64-bit integers: BLAKE2b keyed with the seed, over a counter."""
    key = seed.to_bytes(8, "big", signed=False)
    for block in range(1 << 62):  # bounded, and never reached
        digest = hashlib.blake2b(block.to_bytes(8, "big"), key=key, digest_size=64).digest()
        yield from _WORDS.unpack(digest)


def _uniform(words: Iterator[int], high: int) -> int:
    """Uniform in [1, high], without modulo bias (rejection from the top of the range)."""
    limit = _TWO_64 - _TWO_64 % high
    for word in words:  # rejects with probability < high / 2**64: once in a lifetime
        if word < limit:
            return 1 + word % high
    raise AssertionError("the word stream is infinite")  # pragma: no cover


def split(amount: int, count: int, seed: int) -> list[int]:
    """Split ``amount`` cents into ``count`` packets, double-average, deterministically."""
    if isinstance(amount, bool) or isinstance(count, bool):
        raise TypeError("amount and count are integers")
    if not 1 <= count <= MAX_PACKETS:
        raise ValueError(f"count must be in 1..{MAX_PACKETS}")
    if not count <= amount <= MAX_AMOUNT:
        raise ValueError(f"amount must be in count..{MAX_AMOUNT} (every packet holds >= 1 cent)")
    if not 0 <= seed < 1 << 64:
        raise ValueError("seed must be a 64-bit unsigned integer")
    words = _words(seed)
    packets: list[int] = []
    rest = amount
    for left in range(count, 1, -1):
        # rest >= left holds throughout, so high >= 1 and the cap leaves 1 cent per packet.
        high = min(2 * rest // left, rest - (left - 1))
        packet = _uniform(words, high)
        packets.append(packet)
        rest -= packet
    packets.append(rest)
    return packets


def unclaimed(packets: Iterable[int], claimed: Iterable[int]) -> tuple[list[int], list[int]]:
    """The packets of a split that no live grab holds, in the split's order; and the claimed
    amounts that the split cannot account for (there should be none)."""
    owed = Counter(claimed)
    left = []
    for packet in packets:
        if owed[packet] > 0:
            owed[packet] -= 1
        else:
            left.append(packet)
    return left, sorted(owed.elements())
