"""Variants: one item in sizes, colours or seat categories, each with its own stock, under
one per-buyer limit. Pure: what a variant is, how the operator's list and a
buyer's purchase body are validated, and how a purchase's items are written for the scripts,
the stream and the database.

Why the text form ``"40:1,41:2"`` (:func:`encode_items`): the purchase script receives it in
the quantity's ARGV slot, so a variant purchase keeps the script's ARGV layout (the per-user
rate's arguments follow it) and a single-item purchase pays nothing for it. A variant id is
``[A-Za-z0-9_-]{1,32}``: neither ``:`` nor ``,`` can occur in one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from seckill.domain import bodies, errors

VARIANT_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
MAX_VARIANTS = 100
MAX_VARIANT_NAME = 100
MAX_VARIANT_TOTAL = 1_000_000_000  # the most an activity may hold (activities.MAX_TOTAL)

# A purchase's items: (variant id, units), in the order the buyer gave them.
Items = tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    """One variant of a stock activity: its own units, counted inside the activity's."""

    id: str
    name: str
    total: int
    remaining: int
    sold: int = 0

    def public(self, activity_state: str) -> dict[str, Any]:
        """The variant as the activity view shows it: ``sold_out`` only while the sale is open
        (before or after the window it is the activity's state)."""
        state = activity_state
        if activity_state in ("open", "sold_out"):
            state = "sold_out" if self.remaining <= 0 else "open"
        return {"id": self.id, "name": self.name, "total": self.total,
                "remaining": max(self.remaining, 0), "state": state}


def is_variant_id(value: object) -> bool:
    """Whether ``value`` is a well-formed variant id (``[A-Za-z0-9_-]{1,32}``)."""
    return isinstance(value, str) and VARIANT_ID.fullmatch(value) is not None


# An activity's variant ids, built once per tuple of its variants: a process's copy of an
# activity keeps one tuple while its counters change (seckill/store/sale/activity/cache.py), and a
# purchase then finds its variant in one set lookup, not a scan of a drop's hundred variants
# (bench/results/domain-fast-paths.md). Keyed by the tuple's id(), with
# the tuple itself kept beside its ids: while it is kept, no other object can take that id.
_IDS: dict[int, tuple[Sequence[Variant], frozenset[str]]] = {}
_MAX_IDS = 256  # tuples kept (each refresh of a copy brings a new one): then it starts again


def variant_ids(variants: Sequence[Variant]) -> frozenset[str]:
    """The ids of ``variants`` (the same tuple: the same set, built once)."""
    found = _IDS.get(id(variants))
    if found is not None and found[0] is variants:
        return found[1]
    if len(_IDS) >= _MAX_IDS:
        _IDS.clear()
    ids = frozenset(v.id for v in variants)
    _IDS[id(variants)] = (variants, ids)
    return ids


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_variants(raw: Any) -> tuple[Variant, ...]:
    """The operator's ``variants`` list, validated: 1..100 objects ``{"id", "name",
    "total"}``, ids unique. Every refusal is a 400 naming the field ``variants`` and saying
    which entry and what is wrong."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_VARIANTS:
        raise errors.BadRequest(f"variants must be a list of 1..{MAX_VARIANTS} objects "
                                '{"id", "name", "total"}', field="variants")
    seen: set[str] = set()
    found: list[Variant] = []
    for index, entry in enumerate(raw):
        where = f"variants[{index}]"
        if not isinstance(entry, dict):
            raise errors.BadRequest(f'{where} must be an object {{"id", "name", "total"}}',
                                    field="variants")
        bodies.known_fields(entry, ("id", "name", "total"), where=where, field="variants")
        vid = entry.get("id")
        if not is_variant_id(vid):
            raise errors.BadRequest(f"{where}.id must match [A-Za-z0-9_-]{{1,32}}",
                                    field="variants")
        assert isinstance(vid, str)
        if vid in seen:
            raise errors.BadRequest(f"{where}.id {vid!r} is given twice: variant ids are unique",
                                    field="variants")
        seen.add(vid)
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_VARIANT_NAME:
            raise errors.BadRequest(f"{where}.name must be a non-empty string of at most "
                                    f"{MAX_VARIANT_NAME} characters", field="variants")
        total: Any = entry.get("total")
        if not _count(total) or not 0 <= total <= MAX_VARIANT_TOTAL:
            raise errors.BadRequest(f"{where}.total must be an integer in "
                                    f"0..{MAX_VARIANT_TOTAL}", field="variants")
        found.append(Variant(vid, name, total, total))
    if sum(v.total for v in found) > MAX_VARIANT_TOTAL:
        raise errors.BadRequest(f"the variants' totals add up to more than {MAX_VARIANT_TOTAL}",
                                field="variants")
    return tuple(found)


def parse_purchase(body: Any, variants: Sequence[Variant], per_user_limit: int) -> Items:
    """A variant activity's purchase body: ``{"variant", "quantity"?}`` or ``{"items":
    [{"variant", "quantity"}, ...]}``. A variant this activity does not have is 404
    ``unknown_variant``; everything else that is off is a 400 naming the field."""
    if type(body) is dict and len(body) == 1:  # {"variant": vid}, the common purchase
        vid = body.get("variant")
        if type(vid) is str and vid in variant_ids(variants):
            return ((vid, 1),)
    if not isinstance(body, dict):
        raise errors.BadRequest('the body must be a JSON object, e.g. {"variant": "<id>"}')
    if "items" in body:
        unknown = sorted(set(body) - {"items"})
        if unknown:
            raise errors.BadRequest("give either items or variant (and quantity), not both",
                                    fields=unknown)
        items = _items(body["items"], per_user_limit)
    else:
        bodies.known_fields(body, _ONE_VARIANT)
        if "variant" not in body:
            raise errors.BadRequest('this activity has variants: say which, {"variant": '
                                    '"<id>"} or {"items": [...]}', field="variant")
        vid = body["variant"]
        if not isinstance(vid, str):
            raise errors.BadRequest("variant must be a variant id (a string)", field="variant")
        quantity = body.get("quantity", 1)
        if not _count(quantity) or not 1 <= quantity <= per_user_limit:
            raise errors.BadRequest(f"quantity must be an integer in 1..{per_user_limit}",
                                    field="quantity")
        items = ((vid, quantity),)
    known = variant_ids(variants)
    if len(items) == 1:  # one variant, the common purchase: no loop
        if items[0][0] not in known:
            raise errors.UnknownVariant(variant=items[0][0][:40])
        return items
    for vid, _ in items:
        if vid not in known:
            raise errors.UnknownVariant(variant=vid[:40])
    return items


_ONE_VARIANT = frozenset({"variant", "quantity"})  # the fields of {"variant", "quantity"?}


def _items(raw: Any, per_user_limit: int) -> Items:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_VARIANTS:
        raise errors.BadRequest(f"items must be a list of 1..{MAX_VARIANTS} objects "
                                '{"variant", "quantity"}', field="items")
    items: list[tuple[str, int]] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"items[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"variant", "quantity"} \
                or "variant" not in entry or "quantity" not in entry:
            raise errors.BadRequest(f'{where} must be {{"variant": "<id>", "quantity": n}}',
                                    field="items")
        vid, quantity = entry["variant"], entry["quantity"]
        if not isinstance(vid, str):
            raise errors.BadRequest(f"{where}.variant must be a variant id (a string)",
                                    field="items")
        if vid in seen:
            raise errors.BadRequest(f"{where}: variant {vid[:40]!r} is given twice (one entry "
                                    "per variant, with its quantity)", field="items")
        seen.add(vid)
        if not _count(quantity) or not 1 <= quantity <= per_user_limit:
            raise errors.BadRequest(f"{where}.quantity must be an integer in "
                                    f"1..{per_user_limit}", field="items")
        items.append((vid, quantity))
    if sum(q for _, q in items) > per_user_limit:
        raise errors.BadRequest(f"at most {per_user_limit} units in all per buyer (the "
                                "activity's per_user_limit counts every variant)",
                                field="items")
    return tuple(items)


def encode_items(items: Iterable[tuple[str, int]]) -> str:
    """``"40:1,41:2"``: the items as the scripts, the stream and the items hash hold them."""
    if type(items) is tuple and len(items) == 1:  # one variant, the common purchase
        vid, quantity = items[0]
        return f"{vid}:{quantity}"
    return ",".join(f"{vid}:{quantity}" for vid, quantity in items)


_ITEM = r"[A-Za-z0-9_-]{1,32}:[1-9][0-9]{0,9}"
_ENCODED = re.compile(rf"{_ITEM}(?:,{_ITEM})*")


def decode_items(text: str) -> Items:
    """The items of :func:`encode_items`' text; ValueError if it is not such a text (a stream
    entry the worker then refuses), or names a variant twice."""
    if _ENCODED.fullmatch(text) is None:
        raise ValueError(f"not a list of items: {text[:80]!r}")
    items = tuple((vid, int(n)) for vid, n in (part.split(":") for part in text.split(",")))
    if len({vid for vid, _ in items}) != len(items):
        raise ValueError(f"a variant is named twice: {text[:80]!r}")
    return items


def items_body(items: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """The items as the contract's bodies show them: ``[{"variant", "quantity"}]``."""
    return [{"variant": vid, "quantity": quantity} for vid, quantity in items]


def items_from_body(raw: Any) -> Items:
    """The items of :func:`items_body`'s list (as the database's ``items`` column holds it)."""
    if not isinstance(raw, list):
        raise ValueError("items must be a list")
    return tuple((str(e["variant"]), int(e["quantity"])) for e in raw)


def stats_body(variants: Iterable[Variant]) -> dict[str, dict[str, int]]:
    """``{vid: {"total", "remaining", "sold"}}``, the stats' ``variants``."""
    return {v.id: {"total": v.total, "remaining": max(v.remaining, 0), "sold": v.sold}
            for v in variants}


def totals(variants: Iterable[Variant]) -> Mapping[str, int]:
    """Each variant's total, by id."""
    return {v.id: v.total for v in variants}


def with_sold(variants: Iterable[Variant], orders: Iterable[Items | None]) -> tuple[Variant, ...]:
    """``variants`` (each at its total) with the units the live ``orders`` hold of each sold
    and the rest remaining: what a rebuild from the database puts back. A variant whose
    orders hold more than its total is left with none remaining (its counters then disagree,
    and reconcile says so)."""
    sold: dict[str, int] = {}
    for items in orders:
        for vid, n in items or ():
            sold[vid] = sold.get(vid, 0) + n
    return tuple(dataclasses.replace(v, sold=sold.get(v.id, 0),
                                     remaining=max(0, v.total - sold.get(v.id, 0)))
                 for v in variants)
