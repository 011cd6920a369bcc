"""The transactional outbox's order events: written by the transaction that
changes the order row, exactly once per change, on SQLite and PostgreSQL.

A real OrderBook on the test's own database (SQLite file, or its own PostgreSQL schema when
``SECKILL_TEST_POSTGRES`` is set); the worker's batches are ``book.store(rows, updates)`` as the
worker calls it, redelivered batches are the same call again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from seckill.domain.entries import Cancel, Paid
from seckill.sql.book import OrderBook
from tests.support.outbox import START_MS, events, kinds, open_book, row, save, together

pytestmark = pytest.mark.database


@pytest.fixture
def book(database_url: str) -> Iterator[OrderBook]:
    opened = open_book(database_url)
    yield opened
    opened.engine.dispose()


def test_created_once_per_inserted_row_never_for_a_skipped_one(book: OrderBook) -> None:
    """A batch's rows get one order.created each; the same batch again (a redelivery) and a
    row the live-buyer index skips (the buyer holds another live order) get none."""
    aid = save(book, "oc1", total=None)
    batch = [row(aid, f"u{i}") for i in range(5)]
    assert book.store(batch).conflicted == set()
    book.store(batch)
    book.store(batch[2:])
    second, fresh = row(aid, "u0"), row(aid, "u9")  # u0 holds a live order: skipped
    assert book.store([second, fresh]).conflicted == {second.order_id}
    book.store([second, fresh])
    assert [(t, s) for t, s, _ in events(book, aid)] == [
        ("order.created", f"order:{r.order_id}") for r in [*batch, fresh]]


def test_event_data_is_the_order_status_with_activity_user_quantity(book: OrderBook) -> None:
    """user is the account for a person-limited order; items, pay_by, payment, amount when the
    row has them; the created event tells the order as it was stored."""
    aid = save(book, "oc2", total=10, window=60, variants=(("red", 5), ("blue", 5)))
    bought = row(aid, "p" * 43, 2, pay_by=START_MS + 61_000, items=(("red", 1), ("blue", 1)),
                 account="alice", amount=300)
    book.store([bought])
    [(kind, subject, data)] = events(book, aid)
    assert (kind, subject) == ("order.created", f"order:{bought.order_id}")
    assert data == {"status": "confirmed", "order_id": bought.order_id, "amount": 300,
                    "payment": "due", "pay_by": START_MS + 61_000,
                    "items": [{"variant": "red", "quantity": 1},
                              {"variant": "blue", "quantity": 1}],
                    "activity": aid, "user": "alice", "quantity": 2}
    plain = row(aid, "bob")
    book.store([plain])
    assert events(book, aid)[-1][2] == {"status": "confirmed", "order_id": plain.order_id,
                                         "activity": aid, "user": "bob", "quantity": 1}
    book.store([], [Paid(bought.order_id, START_MS + 5000, "pay_1")])
    assert events(book, aid)[-1][0] == "order.paid"
    assert events(book, aid)[-1][2]["payment"] == "paid"


def test_paid_expired_cancelled_once_per_change(book: OrderBook) -> None:
    """Each update writes its event once however often it is redelivered; an expiry sends
    order.expired and not also order.cancelled; a cancel of a cancelled order sends nothing."""
    aid = save(book, "oc3", total=10, window=60)
    paid, lapsed, dropped = (row(aid, u, pay_by=START_MS + 61_000) for u in ("a", "b", "c"))
    book.store([paid, lapsed, dropped])
    for _ in range(3):
        book.store([], [Paid(paid.order_id, START_MS + 2000, "ref_1"),
                        Cancel(lapsed.order_id, START_MS + 61_000, expired=True),
                        Cancel(dropped.order_id, START_MS + 3000)])
        book.mark_cancelled(dropped.order_id)
        book.mark_cancelled(lapsed.order_id)
    book.store([], [Paid(paid.order_id, START_MS + 4000, "ref_2")])  # not due any more
    assert kinds(book, paid.order_id) == ["order.created", "order.paid"]
    assert kinds(book, lapsed.order_id) == ["order.created", "order.expired"]
    assert kinds(book, dropped.order_id) == ["order.created", "order.cancelled"]
    expired = [d for t, _, d in events(book, aid) if t == "order.expired"]
    assert expired[0]["status"] == "cancelled" and expired[0]["payment"] == "expired"
    book.mark_cancelled(paid.order_id)  # the operator cancels a paid order
    assert kinds(book, paid.order_id) == ["order.created", "order.paid", "order.cancelled"]


def test_folded_rows_get_created_then_their_later_events_in_order(book: OrderBook) -> None:
    """An order inserted already paid / expired / cancelled in the batch that stores it: its
    order.created (as decided) then each change, in stream order; the batch again: nothing."""
    aid = save(book, "oc4", total=10, window=60)
    paid, lapsed, bought, rebuy = (row(aid, u, pay_by=START_MS + 61_000)
                                   for u in ("a", "b", "c", "c"))
    updates: list[Cancel | Paid] = [Paid(paid.order_id, START_MS + 2000, "r1"),
               Cancel(lapsed.order_id, START_MS + 61_000, expired=True),
               Cancel(bought.order_id, START_MS + 3000),
               Cancel(paid.order_id, START_MS + 4000)]
    for _ in range(2):
        assert book.store([paid, lapsed, bought, rebuy], updates).conflicted == set()
    assert kinds(book, paid.order_id) == ["order.created", "order.paid", "order.cancelled"]
    assert kinds(book, lapsed.order_id) == ["order.created", "order.expired"]
    assert kinds(book, bought.order_id) == ["order.created", "order.cancelled"]
    assert kinds(book, rebuy.order_id) == ["order.created"]
    of_paid = [d for t, s, d in events(book, aid) if s == f"order:{paid.order_id}"]
    assert [(d["status"], d.get("payment")) for d in of_paid] == [
        ("confirmed", "due"), ("confirmed", "paid"), ("cancelled", "paid")]


def test_a_stored_order_redelivered_with_its_cancel_gets_one_cancelled(book: OrderBook) -> None:
    """The purchase was stored but not acknowledged; it comes again with its cancel: the
    UPDATE of the stored row writes order.cancelled, the skipped insert writes nothing."""
    aid = save(book, "oc5", total=10)
    bought = row(aid, "a")
    book.store([bought])
    book.store([bought], [Cancel(bought.order_id, START_MS + 3000)])
    book.store([bought], [Cancel(bought.order_id, START_MS + 3000)])
    assert kinds(book, bought.order_id) == ["order.created", "order.cancelled"]


def test_both_cancel_paths_racing_write_one_cancelled(database_url: str) -> None:
    """The operator's cancel (mark_cancelled) and the worker's Cancel entry (store) of the same
    order at the same moment, on connections of their own: exactly one order.cancelled."""
    books = [open_book(database_url) for _ in range(2)]
    try:
        aid = save(books[0], "oc6", total=None)
        bought = [row(aid, f"u{i}") for i in range(30)]
        books[0].store(bought)
        for order in bought:
            oid = order.order_id
            together([functools.partial(books[0].mark_cancelled, oid, START_MS + 5000),
                      functools.partial(books[1].store, [], [Cancel(oid, START_MS + 5000)])])
        for order in bought:
            assert kinds(books[0], order.order_id) == ["order.created", "order.cancelled"]
    finally:
        for opened in books:
            opened.engine.dispose()


def test_a_rehearsal_writes_no_event(book: OrderBook) -> None:
    """Created, paid, expired, cancelled, sold out: a rehearsal's orders send nothing."""
    aid = save(book, "oc7", total=3, rehearsal=True, window=60)
    a, b, c = (row(aid, u, pay_by=START_MS + 61_000) for u in ("a", "b", "c"))
    book.store([a, b, c], [Paid(a.order_id, START_MS + 1, "r")])
    book.store([], [Cancel(b.order_id, START_MS + 2, expired=True)])
    book.mark_cancelled(c.order_id)
    book.set_total(aid, 1)
    assert events(book, aid) == []
    other = save(book, "oc7real", total=3)
    book.store([row(other, "a")])
    assert [t for t, _, _ in events(book)] == ["order.created"]
