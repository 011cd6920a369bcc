"""A worker batch's events in one outbox row (issue #27's worker throughput): the batch writes
one row for all its events, each with its own webhook-id and its own ``seq`` reserved in the
batch's transaction; the fan-out expands the row into the events' own rows, at those seqs.

So an order.paid written by another transaction after the batch committed, and before the
fan-out, still comes after the order's order.created (a lower seq), whichever is fanned
first. On the test's own database (SQLite file, or its own PostgreSQL schema).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from seckill.domain.entries import Paid
from seckill.sql import deliveries
from seckill.sql.book import OrderBook
from seckill.sql.outbox import event_rows
from seckill.sql.schema import outbox, webhook_deliveries, webhook_endpoints
from tests.outbox_helpers import START_MS, events, open_book, row, save


@pytest.fixture
def book(database_url: str) -> Iterator[OrderBook]:
    opened = open_book(database_url)
    yield opened
    opened.engine.dispose()


def _endpoint(book: OrderBook) -> str:
    with book.engine.begin() as conn:
        conn.execute(webhook_endpoints.insert().values(
            id="ep_batches", url="http://127.0.0.1:9/", events='["*"]',
            secret="whsec_" + "A" * 32, created_ms=START_MS))
    return "ep_batches"


def _outbox_rows(book: OrderBook) -> int:
    with book.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one())


def test_a_worker_batch_writes_one_outbox_row(book: OrderBook) -> None:
    """50 orders stored in one batch: one outbox row (the old code wrote 50), and the reader
    still sees 50 order.created, each with its own webhook-id, in the batch's order."""
    aid = save(book, "ob1", total=None)
    batch = [row(aid, f"u{i}") for i in range(50)]
    book.store(batch)
    assert _outbox_rows(book) == 1
    seen = events(book, aid)
    assert [(t, s) for t, s, _ in seen] == [
        ("order.created", f"order:{r.order_id}") for r in batch]
    with book.engine.connect() as conn:
        listed = event_rows(conn)
    assert len({e.event_id for e in listed}) == 50
    assert [e.seq for e in listed] == sorted({e.seq for e in listed})


def test_per_subject_order_holds_when_paid_is_written_before_the_fan_out(
    book: OrderBook,
) -> None:
    """The batch commits; an order.paid of one of its orders is written by another
    transaction; then the fan-out: every event's delivery keeps the seq, webhook-id and body
    it was written with, the created comes before the paid, and while the created is pending
    the paid is held back."""
    aid = save(book, "ob2", total=None, window=60)
    batch = [row(aid, f"u{i}", pay_by=START_MS + 61_000) for i in range(5)]
    book.store(batch)
    book.store([], [Paid(batch[2].order_id, START_MS + 5000, "pay_1")])
    with book.engine.connect() as conn:
        written = event_rows(conn)
    endpoint = _endpoint(book)
    with book.engine.begin() as conn:
        fanned, _ = deliveries.fan_out(conn, START_MS + 6000, 1000)
    assert fanned == 6
    with book.engine.connect() as conn:
        assert event_rows(conn) == written  # expanded: the same events, seqs, ids, bodies
        made = conn.execute(sa.select(webhook_deliveries.c.seq, webhook_deliveries.c.subject)
                            .order_by(webhook_deliveries.c.seq)).all()
        assert conn.execute(sa.select(sa.func.count()).select_from(outbox)
                            .where(outbox.c.fanned.is_(None))).scalar_one() == 0
    assert [(s, subject) for s, subject in made] == [(e.seq, e.subject) for e in written]
    subject = f"order:{batch[2].order_id}"
    mine = [e for e in written if e.subject == subject]
    assert [e.type for e in mine] == ["order.created", "order.paid"]
    assert mine[0].seq < mine[1].seq
    with book.engine.begin() as conn:
        claimed = deliveries.claim(conn, endpoint, "me", START_MS + 6000, 30_000, 100)
    by_seq = {e.seq: e for e in written}
    assert sorted(c.seq for c in claimed) == sorted(e.seq for e in written
                                                    if e.type == "order.created")
    for c in claimed:
        assert (c.event_id, c.body) == (by_seq[c.seq].event_id, by_seq[c.seq].body)
        assert orjson.loads(c.body)["type"] == "order.created"


def test_a_second_fan_out_finds_nothing_left(book: OrderBook) -> None:
    """Expanded once: a second fan-out makes no delivery again, and the rows left are the
    events' own (fanned), none a batch."""
    aid = save(book, "ob3", total=3)
    book.store([row(aid, f"u{i}") for i in range(3)])  # three created, then sold out
    _endpoint(book)
    with book.engine.begin() as conn:
        assert deliveries.fan_out(conn, START_MS, 1000)[0] == 4
    with book.engine.begin() as conn:
        assert deliveries.fan_out(conn, START_MS, 1000)[0] == 0
    assert _outbox_rows(book) == 4
    with book.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(webhook_deliveries)
                            ).scalar_one() == 4
    assert [t for t, _, _ in events(book, aid)] == ["order.created"] * 3 + ["activity.sold_out"]


def test_the_fan_out_takes_about_its_limit_in_seq_order(book: OrderBook) -> None:
    """Two batches and a single event after each: a fan-out of limit 1 takes the first batch
    whole and nothing after it; the next takes the single event; the next the second batch."""
    aid = save(book, "ob4", total=None, window=60)
    first = [row(aid, f"u{i}", pay_by=START_MS + 61_000) for i in range(3)]
    second = [row(aid, f"v{i}", pay_by=START_MS + 61_000) for i in range(4)]
    book.store(first)
    book.store([], [Paid(first[0].order_id, START_MS + 5000, "pay_1")])
    book.store(second)
    _endpoint(book)
    got = []
    for _ in range(4):
        with book.engine.begin() as conn:
            got.append(deliveries.fan_out(conn, START_MS, 1)[0])
    assert got == [3, 1, 4, 0]
    with book.engine.connect() as conn:
        seqs = conn.execute(sa.select(webhook_deliveries.c.seq)
                            .order_by(webhook_deliveries.c.seq)).scalars().all()
    assert seqs == [e.seq for e in event_rows_of(book)]
    assert len(seqs) == 8


def event_rows_of(book: OrderBook) -> list[Any]:
    with book.engine.connect() as conn:
        return list(event_rows(conn))
