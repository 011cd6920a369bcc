"""An activity's meta hash, field by field: the Redis layout the Lua scripts read, written from
and read back into the domain's :class:`~seckill.domain.activities.Activity` (which knows no
Redis field names)."""

from __future__ import annotations

import dataclasses

from seckill.domain import admission as admissions
from seckill.domain import people
from seckill.domain.activities import PACKETS, STOCK, UNLIMITED, Activity
from seckill.domain.product import Product
from seckill.domain.variants import Variant

# Every purchase reads 13 to 16 fields of its activity's meta hash in one HMGET and writes 2
# to 4. Redis keeps a hash of few fields and short values as a listpack (hash-max-listpack-
# entries and -value), where each field is found by a scan of the whole list: a meta hash has
# 12 to 40 fields (5 per variant), and the scans are a measurable part of a purchase's
# instructions in Valkey (``python -m bench.script_cost``; docs/performance.md). One value
# longer than hash-max-listpack-value (64 bytes unless the operator raised it) makes Redis
# store the hash as a hash table, and it never packs it back; the value is written first, and
# again by every AOF replay or rewrite and every rebuild, so a restarted Redis keeps the table
# too.
LAYOUT = ("layout", "a hash table: a value over 64 bytes keeps Redis from packing this hash "
                    "into a listpack, scanned on every read")


def meta_fields(activity: Activity, created_ms: int) -> list[str | int]:
    """The meta hash of the new activity, as a flat list of field names and values."""
    total = UNLIMITED if activity.total is None else activity.total
    remaining = UNLIMITED if activity.remaining is None else activity.remaining
    fields: list[str | int] = [
        *LAYOUT,
        "name", activity.name, "kind", activity.kind,
        "starts_ms", activity.starts_ms, "ends_ms", activity.ends_ms,
        "unlimited", int(activity.total is None), "total", total, "remaining", remaining,
        "per_user_limit", activity.per_user_limit, "sold", 0, "seq", 0,
        "created_ms", created_ms,
    ]
    if activity.kind == PACKETS:
        assert activity.amount is not None
        fields += ["amount", activity.amount, "amount_given", 0]
    if activity.sharded:
        fields += ["shards", activity.shards, "part", 0, "held", 0, "lent", 0, "borrowed", 0]
    if activity.payment_window:
        fields += ["payment_window", activity.payment_window, "paid", 0, "expired", 0]
    if activity.queued:
        fields += ["admission", activity.admission,
                   "queue_opens_ms", activity.queue_opens_ms or 0,
                   "challenge", int(activity.challenge), "draw_seed", activity.draw_seed or "",
                   "admission_factor", f"{activity.admission_factor:g}", "queue_seq", 0,
                   "admitted_total", 0]
    if activity.paused:
        fields += ["paused", 1]
    if activity.rehearsal:
        fields += ["rehearsal", 1]
    if activity.person_salt:  # limit_by person (seckill/domain/people.py)
        fields += ["limit_by", activity.limit_by, "person_salt", activity.person_salt]
    if activity.variants:
        fields += variant_fields(activity.variants)
    for field, value in dataclasses.asdict(activity.product).items():
        if value is not None:
            fields += [field, value]
    return fields


def part_fields(activity: Activity, part: int, total: int | None,
                created_ms: int) -> list[str | int]:
    """The meta hash of part ``part`` of a sharded activity holding ``total`` units (None:
    unlimited): the activity's fields with the part's own stock and order sequence."""
    fields = meta_fields(dataclasses.replace(activity, total=total, remaining=total), created_ms)
    fields[fields.index("part") + 1] = part
    fields[fields.index("seq") + 1] = part  # part j numbers its orders j+n, j+2n, ...
    return fields


def set_field(fields: list[str | int], name: str, value: int) -> list[str | int]:
    """``fields`` (a flat meta hash list) with ``name`` set to ``value``."""
    out = list(fields)
    out[out.index(name) + 1] = value
    return out


def activity_from_meta(aid: str, fields: dict[str, str]) -> Activity:
    """The activity its meta hash ``fields`` describe (no seed: Redis never holds it).
    Only the ``unlimited`` flag says unlimited: a counter is never read as such."""
    unlimited = fields.get("unlimited") == "1"
    total = None if unlimited else int(fields["total"])
    remaining = None if unlimited else int(fields["remaining"])
    return Activity(
        id=aid,
        name=fields.get("name", aid),
        starts_ms=int(fields["starts_ms"]),
        ends_ms=int(fields["ends_ms"]),
        total=total,
        remaining=remaining,
        per_user_limit=int(fields.get("per_user_limit", 1)),
        kind=fields.get("kind", STOCK),
        amount=int(fields["amount"]) if "amount" in fields else None,
        shards=int(fields.get("shards", 1)),
        payment_window=int(fields.get("payment_window", 0)),
        admission=fields.get("admission", admissions.FIRST_COME),
        queue_opens_ms=int(fields["queue_opens_ms"]) if "queue_opens_ms" in fields else None,
        challenge=fields.get("challenge") == "1",
        draw_seed=fields.get("draw_seed") or None,
        admission_factor=float(fields.get("admission_factor", 1)),
        paused=fields.get("paused") == "1",
        product=Product(
            description=fields.get("description"), image_url=fields.get("image_url"),
            price_amount=int(fields["price_amount"]) if "price_amount" in fields else None,
            price_currency=fields.get("price_currency")),
        sold=int(fields.get("sold", 0)),
        unflagged="unlimited" not in fields,
        rehearsal=fields.get("rehearsal") == "1",
        limit_by=fields.get("limit_by", people.BY_USER),
        person_salt=fields.get("person_salt") or None,
        variants=variants_from_meta(fields),
    )


def variant_field(vid: str, name: str) -> str:
    """A variant's field in its activity's meta hash: ``v:<vid>:<name>`` (``name``:
    ``name``, ``total``, ``remaining``, ``sold``, or ``returned``, bumped whenever units come
    back to it, which a sold-out flag of the variant is checked against). In the meta hash,
    not a key of their own: the purchase script reads them with the activity's own fields and
    no more KEYS; the field ``variants`` lists the ids in the operator's order."""
    return f"v:{vid}:{name}"


def variant_fields(variants: tuple[Variant, ...]) -> list[str | int]:
    """The meta fields of an activity's variants, flat (names and values)."""
    fields: list[str | int] = ["variants", ",".join(v.id for v in variants)]
    for v in variants:
        fields += [variant_field(v.id, "name"), v.name, variant_field(v.id, "total"), v.total,
                   variant_field(v.id, "remaining"), v.remaining,
                   variant_field(v.id, "sold"), v.sold, variant_field(v.id, "returned"), 0]
    return fields


def variants_from_meta(fields: dict[str, str]) -> tuple[Variant, ...]:
    """The variants a meta hash holds (() for a single-item activity)."""
    listed = fields.get("variants")
    if not listed:
        return ()
    return tuple(
        Variant(vid, fields.get(variant_field(vid, "name"), vid),
                int(fields[variant_field(vid, "total")]),
                int(fields[variant_field(vid, "remaining")]),
                int(fields.get(variant_field(vid, "sold"), 0)))
        for vid in listed.split(","))
