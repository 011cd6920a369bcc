"""The outbox's own helpers: ``record_refund_due`` (one order.refund_due per
payment_ref, whoever calls it how often) and ``prune`` (retention), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from seckill.domain import errors
from seckill.domain.entries import Cancel
from seckill.sql.book import OrderBook
from seckill.sql.outbox import prune, record_refund_due
from seckill.sql.schema import outbox, webhook_deliveries
from tests.support.outbox import START_MS, events, open_book, row, save

pytestmark = pytest.mark.database


@pytest.fixture
def book(database_url: str) -> Iterator[OrderBook]:
    opened = open_book(database_url)
    yield opened
    opened.engine.dispose()


def test_one_refund_due_per_payment_ref(book: OrderBook) -> None:
    aid = save(book, "rf1", total=10, window=60)
    late = row(aid, "a", pay_by=START_MS + 61_000, account="acct-a")
    book.store([late], [Cancel(late.order_id, START_MS + 61_000, expired=True)])
    assert record_refund_due(book.engine, late.order_id, "pay_1", 1999, START_MS + 70_000)
    assert not record_refund_due(book.engine, late.order_id, "pay_1", 1999, START_MS + 71_000)
    with book.engine.begin() as conn:  # in the caller's transaction
        assert record_refund_due(conn, late.order_id, "pay_2", None, START_MS + 72_000)
    refunds = [(s, d) for t, s, d in events(book, aid) if t == "order.refund_due"]
    assert refunds == [
        (f"order:{late.order_id}",
         {"status": "cancelled", "order_id": late.order_id, "payment": "expired",
          "pay_by": START_MS + 61_000, "activity": aid, "user": "acct-a", "quantity": 1,
          "payment_ref": "pay_1", "payment_amount": 1999}),
        (f"order:{late.order_id}",
         {"status": "cancelled", "order_id": late.order_id, "payment": "expired",
          "pay_by": START_MS + 61_000, "activity": aid, "user": "acct-a", "quantity": 1,
          "payment_ref": "pay_2"})]


def test_refund_due_racing_callers_write_it_once(database_url: str) -> None:
    books = [open_book(database_url) for _ in range(4)]
    try:
        aid = save(books[0], "rf2", total=10)
        order = row(aid, "a")
        books[0].store([order])
        start = threading.Barrier(4)
        answers: list[bool] = []

        def call(b: OrderBook) -> None:
            start.wait(10)
            answers.append(record_refund_due(b.engine, order.order_id, "dup", 5, START_MS))

        threads = [threading.Thread(target=call, args=(b,)) for b in books]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(answers) == [False, False, False, True]
        assert [t for t, _, _ in events(books[0], aid)] == ["order.created", "order.refund_due"]
    finally:
        for opened in books:
            opened.engine.dispose()


def test_refund_due_of_a_rehearsal_or_an_unknown_order(book: OrderBook) -> None:
    aid = save(book, "rf3", total=10, rehearsal=True)
    order = row(aid, "a")
    book.store([order])
    assert not record_refund_due(book.engine, order.order_id, "p", None, START_MS)
    assert events(book) == []
    with pytest.raises(errors.UnknownOrder):
        record_refund_due(book.engine, "rf3-1700000000000-999999", "p", None, START_MS)


def test_prune_keeps_what_is_undelivered_or_recent(book: OrderBook) -> None:
    """Retention: done deliveries older than the cut go; events older than it go once they
    are fanned out and no delivery of theirs is left; everything else stays."""
    aid = save(book, "rf4", total=None)
    old = START_MS
    for i in range(6):  # six batches of one: six rows (a batch of many writes one row)
        book.store([row(aid, f"u{i}")])
    with book.engine.begin() as conn:
        seqs = [r[0] for r in conn.execute(sa.select(outbox.c.seq).order_by(outbox.c.seq))]
        conn.execute(outbox.update().values(created_ms=old))
        conn.execute(outbox.update().where(outbox.c.seq != seqs[0]).values(fanned=True))
        conn.execute(outbox.update().where(outbox.c.seq == seqs[5])
                     .values(created_ms=old + 10_000))

        def delivery(seq: int, status: str, done: int | None) -> dict[str, object]:
            return {"endpoint_id": "ep", "seq": seq, "subject": "s", "status": status,
                    "attempts": 1, "next_ms": old, "done_ms": done}

        conn.execute(webhook_deliveries.insert(), [
            delivery(seqs[1], "delivered", old + 1),      # done long ago: both go
            delivery(seqs[2], "pending", None),           # pending: the event stays
            delivery(seqs[3], "failed", old + 9_000),     # done after the cut: both stay
            delivery(seqs[4], "delivered", old + 2)])     # seqs[4]: also another endpoint's
        conn.execute(webhook_deliveries.insert(), [
            {**delivery(seqs[4], "pending", None), "endpoint_id": "ep2"}])
    # seqs[0]: not fanned, stays; seqs[5]: after the cut, stays
    assert prune(book.engine, old + 5_000) == 1
    with book.engine.connect() as conn:
        left = {r[0] for r in conn.execute(sa.select(outbox.c.seq))}
        kept = {(r[0], r[1]) for r in conn.execute(
            sa.select(webhook_deliveries.c.endpoint_id, webhook_deliveries.c.seq))}
    assert left == set(seqs) - {seqs[1]}
    assert kept == {("ep", seqs[2]), ("ep", seqs[3]), ("ep2", seqs[4])}
    with book.engine.begin() as conn:
        assert prune(conn, old + 5_000) == 0
    assert prune(book.engine, old + 20_000) == 2  # seqs[3] (its failure now old), seqs[5]
