"""What the drill reads of its own stack's database (read-only): every order of its
activities, with the account behind a person's order and the variant of every unit, and each
variant's units in live orders next to the counters Redis keeps for it.

``seckill reconcile`` compares an activity's stock and buyers with the database, not its
variants one by one: the drill does that part itself (:func:`variant_books`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa

from seckill.domain.variants import items_from_body
from seckill.ops.drill.checks import StoredRow, VariantBooks, books_agree
from seckill.ops.drill.faults import Operator
from seckill.sql.engine import make_engine
from seckill.sql.schema import activities, orders


def _items(text: str | None) -> tuple[tuple[str, int], ...]:
    if text is None:
        return ()
    try:
        return tuple(items_from_body(json.loads(text)))
    except (ValueError, KeyError, TypeError):
        return (("(unreadable items)", 0),)  # named as an unknown variant by the checks


def stored_in_database(database_url: str, aids: list[str]) -> dict[str, list[StoredRow]]:
    """Every stored order of each activity (its status, units, account and items)."""
    engine = make_engine(database_url)
    found: dict[str, list[StoredRow]] = {aid: [] for aid in aids}
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(orders.c.order_id, orders.c.activity_id, orders.c.user_id,
                          orders.c.status, orders.c.quantity, orders.c.account,
                          orders.c["items"])
                .where(orders.c.activity_id.in_(aids))
                .order_by(orders.c.created_ms, orders.c.order_id)).all()
    finally:
        engine.dispose()
    for r in rows:
        found[r[1]].append(StoredRow(r[0], r[1], r[2], r[3], int(r[4]), r[5] or "",
                                     _items(r[6])))
    return found


def _read(database_url: str, query: sa.Select[Any]) -> list[Any]:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(query).all())
    finally:
        engine.dispose()


def decision_times(database_url: str, aid: str) -> dict[str, int]:
    """order id -> when the sale decided it (epoch ms), for every stored order of ``aid``."""
    rows = _read(database_url, sa.select(orders.c.order_id, orders.c.created_ms)
                 .where(orders.c.activity_id == aid))
    return {str(r[0]): int(r[1]) for r in rows}


def activity_row(database_url: str, aid: str) -> dict[str, Any]:
    """The activity's ``paused`` and ``ends_ms`` as the database holds them."""
    rows = _read(database_url, sa.select(activities.c.paused, activities.c.ends_ms)
                 .where(activities.c.id == aid))
    return {"paused": bool(rows[0][0]), "ends_ms": int(rows[0][1])} if rows else {}


def live_units(rows: list[StoredRow]) -> dict[str, int]:
    """Units of each variant in the confirmed (not cancelled, not expired) orders."""
    units: dict[str, int] = {}
    for row in rows:
        if row.status == "confirmed":
            for vid, n in row.items:
                units[vid] = units.get(vid, 0) + n
    return units


def variant_books(operator: Operator, database_url: str, bodies: dict[str, dict[str, Any]],
                  settle_s: float = 30.0) -> VariantBooks:
    """Each variant activity's stats and its live stored units per variant (the database),
    read one after the other, again every second until they agree (:func:`books_agree`) or
    ``settle_s`` have passed: a hold that expires between two readings moves each, only not
    at the same instant (nor the activity's counters and its variants' in the stats)."""
    aids = sorted(aid for aid, body in bodies.items() if body.get("variants"))
    deadline = time.monotonic() + settle_s
    while True:
        stats = operator.all_stats(aids)
        stored = stored_in_database(database_url, aids)
        books = {aid: (stats[aid], live_units(stored[aid])) for aid in aids}
        if all(books_agree(*pair) for pair in books.values()) or time.monotonic() > deadline:
            return books
        time.sleep(1.0)
