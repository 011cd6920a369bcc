"""A purchase body's variant is looked up in O(1) (seckill/domain/variants.py): a drop of 100
variants must not make each purchase pay for a scan of them. Counted in Python opcodes
(``sys.settrace``), which do not swing with the machine as seconds do; and the lookup's
answers checked against the plain set of ids (hypothesis)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seckill.domain import errors
from seckill.domain.variants import MAX_VARIANTS, Variant, parse_purchase, variant_ids


def _variants(ids: list[str]) -> tuple[Variant, ...]:
    return tuple(Variant(vid, vid, 10, 10) for vid in ids)


def _opcodes(call: Any) -> int:
    """Python opcodes run by ``call()``, in every frame it enters."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("body", [{"variant": "v99"}, {"items": [
    {"variant": "v0", "quantity": 1}, {"variant": "v99", "quantity": 1}]}],
    ids=["one variant", "two variants"])
def test_a_purchase_costs_the_same_with_100_variants_as_with_2(body: dict[str, Any]) -> None:
    """The last of 100 variants costs what the second of 2 does: before, a scan of the
    activity's variants cost about 6 opcodes per variant before the one bought."""
    few = _variants(["v0", "v99"])
    many = _variants([f"v{k}" for k in range(MAX_VARIANTS)])
    for variants in (few, many):  # the first lookup of a tuple builds its ids once
        parse_purchase(body, variants, 4)
    cost_few = _opcodes(lambda: parse_purchase(body, few, 4))
    cost_many = _opcodes(lambda: parse_purchase(body, many, 4))
    assert cost_many == cost_few, (cost_few, cost_many)


_IDS = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,4}", fullmatch=True), min_size=1,
                max_size=20, unique=True)


@given(first=_IDS, second=_IDS, asked=st.from_regex(r"[A-Za-z0-9_-]{1,4}", fullmatch=True))
def test_the_ids_are_the_variants_own_whatever_tuple_came_before(
        first: list[str], second: list[str], asked: str) -> None:
    """Each tuple gets its own ids, also when an earlier tuple is gone and a new one may take
    its place in memory (a refreshed copy of an activity)."""
    for ids in (first, second):
        variants = _variants(ids)
        assert variant_ids(variants) == frozenset(ids)
        assert variant_ids(variants) == frozenset(ids)  # the second time, from the memo
        if asked in ids:
            assert parse_purchase({"variant": asked}, variants, 1) == ((asked, 1),)
        else:
            with pytest.raises(errors.UnknownVariant):
                parse_purchase({"variant": asked}, variants, 1)
        del variants
