"""Reconcile's look at an activity's variants: each variant's counters in Redis
against what the database says (its total from ``seckill_variants``, its units sold from the
live orders' items), and whether a variant's own counters disagree (then its purchases are
refused, ``lua/include/variant_purchase.lua``, until ``seckill reconcile --repair`` rebuilds
the activity from the database, variants included)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from seckill.domain.activities import Activity
from seckill.domain.orders import StoredOrder
from seckill.domain.variants import Variant, with_sold
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.activity.meta import variants_from_meta


def _numbers(variant: Variant | None) -> dict[str, int] | None:
    if variant is None:
        return None
    return {"total": variant.total, "remaining": variant.remaining, "sold": variant.sold}


def variant_differences(client: Client, keys: KeySpace, activity: Activity,
                        live: Iterable[StoredOrder]) -> tuple[dict[str, Any], bool]:
    """(``{"variant <vid>": {"redis", "database"}}`` for each variant whose numbers differ,
    whether some variant's counters in Redis disagree among themselves). Nothing for an
    activity without variants."""
    if not activity.variants:
        return {}, False
    fields: Any = client.hgetall(keys.meta(activity.id))
    held = {v.id: v for v in variants_from_meta(fields)} if fields else {}
    differences: dict[str, Any] = {}
    for expected in with_sold(activity.variants, (o.items for o in live)):
        found = held.get(expected.id)
        if _numbers(found) != _numbers(expected):
            differences[f"variant {expected.id}"] = {"redis": _numbers(found),
                                                     "database": _numbers(expected)}
    inconsistent = any(v.remaining < 0 or v.sold < 0 or v.remaining + v.sold != v.total
                       for v in held.values())
    return differences, inconsistent
