"""The red-envelope split (``seckill.packets.split``): double average, integer cents, exact sum,
seeded. Pure functions: no server."""

from __future__ import annotations

import statistics
import time

import pytest

from seckill.domain import packets
from seckill.domain.packets import MAX_AMOUNT, MAX_PACKETS, split, unclaimed


def check(amount: int, count: int, seed: int) -> list[int]:
    """Every property the split promises, for one (amount, count, seed)."""
    got = split(amount, count, seed)
    assert len(got) == count
    assert all(isinstance(p, int) and not isinstance(p, bool) for p in got)
    assert sum(got) == amount, "amounts must sum to the total exactly"
    assert min(got) >= 1, "every packet holds at least 1 cent"
    rest = amount
    for index, packet in enumerate(got[:-1]):
        left = count - index
        # [1, 2 x the remaining average], leaving 1 cent for each packet after it
        assert packet <= 2 * rest // left, (index, packet, rest, left)
        assert packet <= rest - (left - 1), (index, packet, rest, left)
        rest -= packet
    assert got[-1] == rest, "the last packet takes the rest"
    return got


@pytest.mark.parametrize(("amount", "count"), [
    (1, 1), (100, 1), (2, 2), (3, 2), (5, 5), (6, 5), (10, 3), (100, 10), (10_000, 100),
    (1_000, 999), (10**9, 7), (MAX_AMOUNT, 3), (12_345, 12_345), (12_346, 12_345),
])
@pytest.mark.parametrize("seed", [0, 1, 2**63 - 1, 2**64 - 1, 987_654_321])
def test_bounds_and_exact_sum(amount: int, count: int, seed: int) -> None:
    check(amount, count, seed)


def test_many_random_shapes() -> None:
    """Small, awkward shapes (amount just above count, and far above), many seeds."""
    checked = 0
    for count in range(1, 40):
        for amount in (count, count + 1, count + 2, 2 * count, 2 * count + 1, 7 * count + 3,
                       count * count + 11):
            for seed in range(0, 60, 7):
                check(amount, count, seed)
                checked += 1
    assert checked == 39 * 7 * 9


def test_count_one_is_the_whole_amount() -> None:
    assert split(1, 1, 5) == [1]
    assert split(987_654, 1, 5) == [987_654]


def test_amount_equal_to_count_is_one_cent_each() -> None:
    assert split(7, 7, 123) == [1] * 7
    assert split(100_000, 100_000, 9) == [1] * 100_000


def test_seeded_determinism() -> None:
    one = split(1_000_000, 1_000, 42)
    assert split(1_000_000, 1_000, 42) == one, "same seed, same packets"
    assert split(1_000_000, 1_000, 43) != one, "another seed, other packets"
    # Pinned: a rebuild years later must re-derive exactly the packets handed out today.
    assert split(1_000, 10, 2026) == [54, 126, 161, 51, 165, 121, 122, 47, 50, 103]


def test_the_draws_are_spread_like_the_double_average() -> None:
    """Each packet but the last is uniform on [1, 2 x average]: its mean is about the average
    of what is left; a split that always gave the cap, or 1 cent, would fail here."""
    got = split(10_000_000, 100_000, 7)
    head = got[: len(got) // 2]  # while the remaining average is still about 100
    assert 95 <= statistics.fmean(head) <= 105
    assert min(head) == 1 and max(head) >= 195
    assert len(set(head)) > 150


def test_large_split_is_fast_and_exact() -> None:
    started = time.perf_counter()
    got = check(10**9, MAX_PACKETS, 99)
    elapsed = time.perf_counter() - started
    assert len(got) == MAX_PACKETS
    assert elapsed < 20, f"{MAX_PACKETS} packets took {elapsed:.1f}s"


@pytest.mark.parametrize(("amount", "count", "seed"), [
    (0, 1, 1), (4, 5, 1), (1, 0, 1), (10, -1, 1), (MAX_AMOUNT + 1, 1, 1),
    (MAX_PACKETS + 1, MAX_PACKETS + 1, 1), (10, 2, -1), (10, 2, 2**64),
])
def test_refused_inputs(amount: int, count: int, seed: int) -> None:
    with pytest.raises(ValueError):
        split(amount, count, seed)


def test_refuses_bools() -> None:
    with pytest.raises(TypeError):
        split(True, 1, 1)


def test_new_seeds_fit_a_signed_bigint_and_differ() -> None:
    seeds = {packets.new_seed() for _ in range(100)}
    assert len(seeds) == 100
    assert all(0 <= s < 2**63 for s in seeds)


def test_unclaimed_removes_one_packet_per_claim() -> None:
    split_ = [5, 1, 5, 3, 1, 5]
    assert unclaimed(split_, []) == (split_, [])
    assert unclaimed(split_, [5, 1]) == ([5, 3, 1, 5], [])
    assert unclaimed(split_, [5, 5, 5, 1, 1, 3]) == ([], [])
    left, unknown = unclaimed(split_, [5, 7, 7])
    assert left == [1, 5, 3, 1, 5] and unknown == [7, 7]
