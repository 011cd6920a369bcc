"""An activity's meta hash, field by field: the Redis layout the Lua scripts read, written from
and read back into the domain's :class:`~seckill.domain.activities.Activity` (which knows no
Redis field names)."""

from __future__ import annotations

import dataclasses

from seckill.domain import admission as admissions
from seckill.domain.activities import PACKETS, STOCK, UNLIMITED, Activity
from seckill.domain.product import Product


def meta_fields(activity: Activity, created_ms: int) -> list[str | int]:
    """The meta hash of the new activity, as a flat list of field names and values."""
    total = UNLIMITED if activity.total is None else activity.total
    remaining = UNLIMITED if activity.remaining is None else activity.remaining
    fields: list[str | int] = [
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
    )
