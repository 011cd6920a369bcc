"""Helpers for the outbox tests: a real OrderBook on the test's own database (its
SQLite file or PostgreSQL schema), activities saved in it, and the events it holds."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import sqlalchemy as sa

from seckill.domain.activities import Activity
from seckill.domain.orders import OrderRow
from seckill.domain.variants import Variant
from seckill.sql import engine as db
from seckill.sql.book import OrderBook
from seckill.sql.outbox import event_rows
from seckill.sql.schema import orders

START_MS = 1_700_000_000_000
_seq = itertools.count(1)


def open_book(database_url: str) -> OrderBook:
    """A book on an engine of its own (dispose it with ``book.engine.dispose()``)."""
    return OrderBook(db.make_engine(database_url)).ready()


def save(book: OrderBook, aid: str, total: int | None = 10, *, rehearsal: bool = False,
         window: int = 0, variants: tuple[tuple[str, int], ...] = ()) -> str:
    """Save an activity; returns its id."""
    book.save_activity(Activity(
        id=aid, name=aid, starts_ms=START_MS, ends_ms=START_MS + 3_600_000, total=total,
        remaining=total, rehearsal=rehearsal, payment_window=window,
        variants=tuple(Variant(v, v, n, n) for v, n in variants)))
    return aid


def row(aid: str, uid: str, quantity: int = 1, **fields: Any) -> OrderRow:
    """A decided purchase of ``uid`` (a fresh order id)."""
    return OrderRow(order_id=f"{aid}-{START_MS}-{next(_seq)}", activity_id=aid, user_id=uid,
                    quantity=quantity, created_ms=START_MS + 1000, **fields)


def events(book: OrderBook, aid: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, subject, data) of every event, in the outbox's order (of ``aid`` if given)."""
    with book.engine.connect() as conn:  # a worker batch's row holds many (event_rows)
        return [(e.type, e.subject, orjson.loads(e.body)["data"]) for e in event_rows(conn)
                if aid is None or e.activity_id == aid]


def kinds(book: OrderBook, order_id: str) -> list[str]:
    """The types of one order's events, in order."""
    return [t for t, s, _ in events(book) if s == f"order:{order_id}"]


def sold_outs(book: OrderBook, aid: str) -> list[dict[str, Any]]:
    """The data of an activity's activity.sold_out events."""
    return [d for t, _, d in events(book, aid) if t == "activity.sold_out"]


def order_rows(book: OrderBook, aid: str) -> Iterator[Any]:
    """Every stored row of an activity."""
    with book.engine.connect() as conn:
        yield from conn.execute(sa.select(orders).where(orders.c.activity_id == aid))


def together(calls: list[Callable[[], object]]) -> None:
    """Run the calls in threads released at the same moment; re-raise the first error."""
    start = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            start.wait(10)
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
