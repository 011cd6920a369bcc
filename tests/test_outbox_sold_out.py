"""activity.sold_out: written by the transaction whose stored confirmed orders
reach the activity's total, once per sell-out: again only after the count went below the total
(a cancel, an expiry, a restock) and reached it again; never for an unlimited activity. The
state is in the database: a new book (a restarted worker) and concurrent writers on
connections of their own (two workers on PostgreSQL) neither miss nor double it.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest
import sqlalchemy as sa

from seckill.domain.entries import Cancel
from seckill.sql.book import OrderBook
from seckill.sql.schema import activities, orders
from tests.support.outbox import START_MS, events, open_book, row, save, sold_outs, together

pytestmark = pytest.mark.database


@pytest.fixture
def book(database_url: str) -> Iterator[OrderBook]:
    opened = open_book(database_url)
    yield opened
    opened.engine.dispose()


def test_sold_out_once_when_the_stored_orders_reach_the_total(book: OrderBook) -> None:
    aid = save(book, "so1", total=5)
    first, second = row(aid, "a", 2), row(aid, "b", 2)
    book.store([first, second])
    assert sold_outs(book, aid) == []
    last = row(aid, "c")
    for _ in range(3):  # redelivered: no second one
        book.store([last])
    assert sold_outs(book, aid) == [{"activity": aid, "total": 5, "sold": 5}]
    # after the order.created of the order that sold it out, in the same transaction
    assert [t for t, _, _ in events(book, aid)][-2:] == ["order.created", "activity.sold_out"]


def test_sold_out_again_after_a_cancel_an_expiry_and_a_restock(database_url: str) -> None:
    book = open_book(database_url)
    try:
        aid = save(book, "so2", total=2, window=60)
        a, b = row(aid, "a", pay_by=START_MS + 61_000), row(aid, "b", pay_by=START_MS + 61_000)
        book.store([a, b])
        assert len(sold_outs(book, aid)) == 1
        book.mark_cancelled(a.order_id)  # units back: below the total
        book.mark_cancelled(a.order_id)
        book.store([row(aid, "c")])
        assert len(sold_outs(book, aid)) == 2
        book.store([], [Cancel(b.order_id, START_MS + 61_000, expired=True)])
        book.store([row(aid, "d")])
        assert len(sold_outs(book, aid)) == 3
    finally:
        book.engine.dispose()
    book = open_book(database_url)  # a restarted worker: the state is the database's
    try:
        book.store([row(aid, "e")])  # over the total (never from the script): no second send
        assert len(sold_outs(book, aid)) == 3
        book.set_total(aid, 5)  # restock: 3 of 5
        book.store([row(aid, "f"), row(aid, "g")])
        assert sold_outs(book, aid)[-1] == {"activity": aid, "total": 5, "sold": 5}
        assert len(sold_outs(book, aid)) == 4
    finally:
        book.engine.dispose()


def test_a_restock_of_a_variant_and_a_cut_total(book: OrderBook) -> None:
    """set_variant_total moves the activity's total: sold out again when the new units go; a
    total set down to what is sold is a sell-out by itself."""
    aid = save(book, "so3", total=2, variants=(("red", 1), ("blue", 1)))
    book.store([row(aid, "a", items=(("red", 1),)), row(aid, "b", items=(("blue", 1),))])
    assert len(sold_outs(book, aid)) == 1
    book.set_variant_total(aid, "red", 2, 3)
    assert len(sold_outs(book, aid)) == 1
    book.store([row(aid, "c", items=(("red", 1),))])
    assert sold_outs(book, aid)[-1] == {"activity": aid, "total": 3, "sold": 3}
    book.set_total(aid, 4)
    book.store([row(aid, "d")])
    book.set_total(aid, 4)
    assert len(sold_outs(book, aid)) == 3


def test_an_unlimited_activity_never_sells_out(book: OrderBook) -> None:
    aid = save(book, "so4", total=None)
    book.store([row(aid, f"u{i}", 3) for i in range(20)])
    assert sold_outs(book, aid) == []


def test_concurrent_writers_never_double_nor_miss_it(database_url: str) -> None:
    """Six writers, each on its own engine, store the last units of an activity at the same
    moment: exactly one sell-out; they all cancel one at the same moment, then buy again at
    the same moment: exactly one more. Twelve rounds."""
    writers = [open_book(database_url) for _ in range(6)]
    try:
        for n in range(12):
            aid = save(writers[0], f"so5-{n}", total=12)
            batches = [[row(aid, f"w{w}u{i}") for i in range(2)] for w in range(6)]
            together([partial(w.store, b) for w, b in zip(writers, batches, strict=True)])
            assert len(sold_outs(writers[0], aid)) == 1, n
            together([partial(w.store, [], [Cancel(b[0].order_id, START_MS + 9000)])
                      for w, b in zip(writers, batches, strict=True)])
            together([partial(w.store, [row(aid, f"w{i}again")])
                      for i, w in enumerate(writers)])
            assert sold_outs(writers[0], aid) == [{"activity": aid, "total": 12, "sold": 12}] * 2
            assert _counted(writers[0], aid) == (12, 12)
    finally:
        for writer in writers:
            writer.engine.dispose()


def test_an_activity_not_counted_yet_is_counted_from_its_orders(book: OrderBook) -> None:
    """A database from before the count (sold_units NULL, orders stored): the next change
    counts the stored orders, and the sell-out comes when they reach the total."""
    aid = save(book, "so6", total=4)
    book.store([row(aid, "a", 2)])
    with book.engine.begin() as conn:
        conn.execute(activities.update().where(activities.c.id == aid).values(sold_units=None))
    book.store([row(aid, "b")])
    assert sold_outs(book, aid) == []
    book.store([row(aid, "c")])
    assert sold_outs(book, aid) == [{"activity": aid, "total": 4, "sold": 4}]
    assert _counted(book, aid) == (4, 4)


def _counted(book: OrderBook, aid: str) -> tuple[int, int]:
    """(the activity's kept count, the units of its stored confirmed orders)."""
    with book.engine.connect() as conn:
        kept = conn.execute(sa.select(activities.c.sold_units)
                            .where(activities.c.id == aid)).scalar_one()
        units = conn.execute(sa.select(sa.func.sum(orders.c.quantity)).where(
            orders.c.activity_id == aid, orders.c.status == "confirmed")).scalar_one()
    return int(kept), int(units)
