"""A worker batch's events in one outbox row (the worker's throughput with webhooks): the
batch writes one row for all its events, each with its own webhook-id and its own ``seq``
reserved in the batch's transaction; the fan-out expands the row into the events' own rows, at
those seqs.

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

from seckill.domain.entries import Cancel, Paid
from seckill.domain.events import Event, order_event
from seckill.sql import deliveries
from seckill.sql.book import OrderBook
from seckill.sql.outbox import EventRow, add_events, event_rows
from seckill.sql.schema import outbox, webhook_deliveries, webhook_endpoints
from tests.support.outbox import START_MS, events, open_book, row, save

pytestmark = pytest.mark.database


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


def _body_of(event_type: str, oid: str, aid: str, data: dict[str, Any], at: int) -> str:
    return Event(event_type, f"order:{oid}", aid, data, at).body().decode()


def test_a_batch_row_holds_its_orders_compactly(book: OrderBook) -> None:
    """A batch's row holds each order's values, not a data dict with its keys per order nor
    its webhook-id's time per order: under 100 bytes an order here (the previous layout:
    about 210)."""
    aid = save(book, "obs", total=None)
    book.store([row(aid, f"u{i}") for i in range(200)])
    with book.engine.connect() as conn:
        [body] = conn.execute(sa.select(outbox.c.body)).scalars().all()
    assert len(body) < 200 * 100, len(body) / 200
    assert '"order_id"' not in body and "msg_" not in body[100:]
    assert len(event_rows_of(book)) == 200


def test_compact_rows_give_the_bodies_of_the_events_themselves(book: OrderBook) -> None:
    """Orders of two activities with every optional field, updates folded into the batch's
    own rows and one of an order stored before: each event's body, webhook-id and seq, read
    from the batch's row and after its fan-out, are those of the event made on its own."""
    aid = save(book, "obc", total=20, window=60, variants=(("red", 10), ("blue", 10)))
    other = save(book, "obd", total=None)
    due = START_MS + 61_000
    first = row(aid, "u1", pay_by=due)
    book.store([first])
    a = row(aid, "p" * 43, 2, pay_by=due, items=(("red", 1), ("blue", 1)), account="alice",
            amount=300)
    b, c, d = (row(aid, u, pay_by=due) for u in ("bob", "carol", "dave"))
    e = row(other, "erin")
    book.store([a, b, c, d, e], [Paid(first.order_id, START_MS + 2000, "ref_1"),
                                 Cancel(b.order_id, START_MS + 3000),
                                 Cancel(c.order_id, START_MS + 61_000, expired=True),
                                 Paid(d.order_id, START_MS + 4000, "ref_d")])

    def order(r: Any, status: str = "confirmed", payment: str = "due") -> dict[str, Any]:
        return {"status": status, "order_id": r.order_id, "payment": payment, "pay_by": due,
                "activity": aid, "user": r.user_id, "quantity": 1}

    at = START_MS + 1000  # the rows' created_ms
    expected = [
        ("order.paid", first, order(first, payment="paid"), START_MS + 2000),
        ("order.created", a, {"status": "confirmed", "order_id": a.order_id, "amount": 300,
                              "payment": "due", "pay_by": due,
                              "items": [{"variant": "red", "quantity": 1},
                                        {"variant": "blue", "quantity": 1}],
                              "activity": aid, "user": "alice", "quantity": 2}, at),
        ("order.created", b, order(b), at),
        ("order.cancelled", b, order(b, status="cancelled"), START_MS + 3000),
        ("order.created", c, order(c), at),
        ("order.expired", c, order(c, status="cancelled", payment="expired"), START_MS + 61_000),
        ("order.created", d, order(d), at),
        ("order.paid", d, order(d, payment="paid"), START_MS + 4000),
        ("order.created", e, {"status": "confirmed", "order_id": e.order_id,
                              "activity": other, "user": "erin", "quantity": 1}, at)]
    wanted = [(t, f"order:{r.order_id}", r.activity_id, _body_of(t, r.order_id, r.activity_id,
                                                                   data, when), when)
              for t, r, data, when in expected]
    written = [e for e in event_rows_of(book) if e.type != "order.created"
               or e.subject != f"order:{first.order_id}"]
    assert [(w.type, w.subject, w.activity_id, w.body, w.created_ms) for w in written] == wanted
    assert len({w.event_id for w in written}) == len(written)
    _endpoint(book)
    with book.engine.begin() as conn:
        deliveries.fan_out(conn, START_MS, 1000)
    assert [w for w in event_rows_of(book) if w.seq in {x.seq for x in written}] == written


def _old_layout_rows(book: OrderBook, aid: str) -> list[EventRow]:
    """Two batch rows as the previous version wrote them (a JSON array of [seq, webhook-id,
    type, subject, activity, created_ms, data]): SQLite's (seqs null: the ones just below the
    row's) and PostgreSQL's (seqs given); the events they hold."""
    made = [("order.created", "o", {"status": "confirmed", "order_id": "o", "amount": 5,
                                    "activity": aid, "user": "u1", "quantity": 1}),
            ("order.paid", "o", {"status": "confirmed", "order_id": "o", "payment": "paid",
                                 "pay_by": START_MS + 9, "activity": aid, "user": "u1",
                                 "quantity": 1}),
            ("activity.sold_out", None, {"activity": aid, "total": 1, "sold": 1})]
    found: list[EventRow] = []
    for top, seqs in ((1000, [None, None, None]), (2004, [2001, 2002, 2004])):
        parts = []
        for k, ((kind, oid, data), seq) in enumerate(zip(made, seqs, strict=True)):
            if oid is not None:  # each row's order its own
                oid, data = f"o{top}", {**data, "order_id": f"o{top}"}
            subject = f"activity:{aid}" if oid is None else f"order:{oid}"
            event_id, when = f"msg_{top:012x}{k:020x}", START_MS + k
            parts.append([seq, event_id, kind, subject, aid, when, data])
            body = Event(kind, subject, aid, data, when).body().decode()
            found.append(EventRow(top - 2 + k if seq is None else seq, event_id, kind, subject,
                                  aid, body, when))
        with book.engine.begin() as conn:
            conn.execute(outbox.insert().values(
                seq=top, event_id=parts[0][1], type="outbox.batch", subject="outbox.batch",
                activity_id=aid, body=orjson.dumps(parts).decode(), created_ms=START_MS))
    return found


def test_a_batch_row_of_the_previous_layout_is_read_and_expanded_as_before(
    book: OrderBook,
) -> None:
    """Rows written by the previous version (a database upgraded with a backlog): their
    events read, fanned out and claimed with the seqs, webhook-ids and bodies they had."""
    aid = save(book, "obo", total=None)
    old = _old_layout_rows(book, aid)
    assert event_rows_of(book) == old
    endpoint = _endpoint(book)
    with book.engine.begin() as conn:
        assert deliveries.fan_out(conn, START_MS, 1000)[0] == 6
    assert event_rows_of(book) == old
    with book.engine.begin() as conn:
        claimed = deliveries.claim(conn, endpoint, "me", START_MS, 30_000, 100)
    first: dict[str, EventRow] = {}
    for e in old:  # each subject's earliest is claimed, the later ones wait for it
        first.setdefault(e.subject, e)
    assert sorted((c.seq, c.event_id, c.body) for c in claimed) == sorted(
        (e.seq, e.event_id, e.body) for e in first.values())


def test_any_events_written_as_a_batch_come_out_as_written(book: OrderBook) -> None:
    """Events that are not a stored order's (here a sell-out, and an order event whose data
    has more than the order's fields) in a batch's row: the bodies they were made with."""
    aid = save(book, "obg", total=None)
    made = [Event("activity.sold_out", f"activity:{aid}", aid,
                  {"activity": aid, "total": 3, "sold": 3}, START_MS + 5),
            order_event("order.refund_due", {"status": "cancelled", "order_id": "o9",
                                             "activity": aid, "user": "u9", "quantity": 1,
                                             "payment_ref": "r", "payment_amount": 7},
                        START_MS + 6)]
    with book.engine.begin() as conn:
        add_events(conn, made, batch=True)
    assert _outbox_rows(book) == 1
    got = event_rows_of(book)
    assert [(g.type, g.subject, g.activity_id, g.body, g.created_ms) for g in got] == [
        (m.type, m.subject, m.activity_id, m.body().decode(), m.at_ms) for m in made]
