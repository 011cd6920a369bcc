"""The database side of orders and activities (SQLAlchemy Core), and the events its
transactions write.

Writes are idempotent: an order is inserted with ``ON CONFLICT DO NOTHING`` on its id and on
the one-live-order-per-buyer index, so a redelivered stream entry never creates a second
order; a cancellation is an UPDATE that only moves ``confirmed`` to ``cancelled``, a payment
one that only moves ``due`` to ``paid`` (:func:`update_of`): a repeat matches no row, and
RETURNING tells the one transaction that changed the row, which writes its event. An update
may arrive before its order (the purchase entry left pending by a killed worker, reclaimed
later): the book says so, and the worker keeps the update until the order is stored
(``seckill.worker.orders``).

Every change writes its events to the outbox (``seckill/sql/outbox.py``) in its own
transaction, one per change: order.created for each row actually inserted, order.paid,
order.expired or order.cancelled for each UPDATE that changed a row, activity.sold_out when
the stored orders reach the total. In a worker's batch (:meth:`OrderBook.store`) an update of
an order in the batch itself is folded into the row about to be inserted (:meth:`Batch.fold`):
the row goes in in its final state, and, if the insert actually stores it (:func:`insert_rows`
says which), its events are its order.created as it was decided, then each change in stream
order (:meth:`Batch.events`).

``activity.sold_out`` is written by the transaction whose stored confirmed orders reach the
activity's total, when the activity's ``sold_out_ms`` says it was below it until then; a
transaction that takes the count below the total clears it. The count (``sold_units``) is
kept by the same transactions, one conditional UPDATE each, which locks the activity's row
(PostgreSQL; SQLite has one writer): concurrent writers add up, none misses a sell-out, none
sends it twice, and no batch re-counts the orders (:func:`sold_out_events`). A rehearsal's
activity writes nothing (:class:`Rehearsals`).

What an order's event says (its data, and the outbox row's layout of it) is
``seckill/sql/order_events.py``: the outbox reads it back too, and this module imports the
outbox.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from seckill.domain import errors
from seckill.domain.activities import PACKETS, Activity
from seckill.domain.admission import FIRST_COME
from seckill.domain.clock import now_ms
from seckill.domain.entries import Cancel, Paid
from seckill.domain.events import (
    ACTIVITY_SOLD_OUT,
    ORDER_CANCELLED,
    ORDER_CREATED,
    ORDER_EXPIRED,
    ORDER_PAID,
    Event,
    activity_subject,
    order_event,
)
from seckill.domain.orders import (
    CANCELLED,
    CONFIRMED,
    DUE,
    EXPIRED,
    PAID,
    OrderRow,
    StoredOrder,
)
from seckill.domain.people import BY_USER
from seckill.domain.product import Product
from seckill.domain.variants import Items, Variant, items_body, items_from_body
from seckill.sql.order_events import ORDER_COLUMNS, OrderChange, order_data
from seckill.sql.outbox import add_events
from seckill.sql.schema import activities, ensure_schema, orders, variants
from seckill.sql.sealed_rows import DRAW_SEED, PACKET_SEED, PERSON_SALT, SealedColumn, check
from seckill.sql.sealing import Keyring


@dataclasses.dataclass(frozen=True)
class Stored:
    """What :meth:`OrderBook.store` left undone: the orders not stored because their buyer
    holds another live order, and the order ids of updates whose order is not stored."""

    conflicted: set[str]
    orphans: set[str]


# A lever's field -> its column and the column of its version.
LEVER_COLUMNS = {"paused": ("paused", "paused_v"), "ends_ms": ("ends_ms", "ends_v"),
                 "total": ("total", "total_v")}


class OrderBook:
    """Activities and orders in the database; the schema is made ready on first use. An
    activity's secrets are sealed with ``keys`` (default: the process's environment's)."""

    def __init__(self, engine: sa.Engine, keys: Keyring | None = None) -> None:
        self.engine = engine
        self.keys = keys or Keyring.from_environment()
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._rehearsals = Rehearsals()
        # Whether changes write their events; only the bench turns it off, to
        # measure what the outbox costs the worker.
        self.outbox = True

    def ready(self) -> OrderBook:
        """Create (or complete) the schema, once per book, and check that the environment's
        keys open every sealed secret (DataKeyError otherwise); returns the book."""
        if not self._schema_ready:
            with self._schema_lock:
                if not self._schema_ready:
                    ensure_schema(self.engine)
                    check(self.engine, self.keys)
                    self._schema_ready = True
        return self

    # -- activities -------------------------------------------------------------------

    def save_activity(self, activity: Activity) -> None:
        """Insert a new activity; ActivityExists if the database already has its id."""
        self.ready()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    activities.insert().values(
                        id=activity.id,
                        name=activity.name,
                        kind=activity.kind,
                        starts_ms=activity.starts_ms,
                        ends_ms=activity.ends_ms,
                        total=activity.total,
                        per_user_limit=activity.per_user_limit,
                        created_ms=now_ms(),
                        amount=activity.amount,
                        packet_count=activity.total if activity.kind == PACKETS else None,
                        sealed_seed=self._seal(PACKET_SEED, activity.id, activity.seed),
                        shards=activity.shards,
                        payment_window=activity.payment_window or None,
                        admission=activity.admission if activity.queued else None,
                        queue_opens_ms=activity.queue_opens_ms,
                        challenge=activity.challenge if activity.queued else None,
                        draw_seed=self._seal(DRAW_SEED, activity.id, activity.draw_seed),
                        paused=activity.paused or None,
                        rehearsal=activity.rehearsal or None,
                        limit_by=activity.limit_by if activity.person_salt else None,
                        person_salt=self._seal(PERSON_SALT, activity.id,
                                               activity.person_salt),
                        **dataclasses.asdict(activity.product),
                    )
                )
                if activity.variants:
                    conn.execute(variants.insert(), [
                        {"activity_id": activity.id, "variant_id": v.id, "position": i,
                         "name": v.name, "total": v.total}
                        for i, v in enumerate(activity.variants)])
        except sa.exc.IntegrityError:
            raise errors.ActivityExists(activity=activity.id) from None

    def set_total(self, aid: str, total: int) -> None:
        """Set an activity's total (after a restock)."""
        self.ready()
        with self.engine.begin() as conn:
            conn.execute(activities.update().where(activities.c.id == aid).values(total=total))
            self._sold_out(conn, {aid: 0})

    def record_lever(self, aid: str, field: str, value: int | bool, version: int) -> bool:
        """Write a lever's ``value`` (``paused``, ``ends_ms`` or ``total``) with its
        ``version``, only over an older version: a write that arrives late never reverses a
        later command. False when the row holds a newer one (or is unknown)."""
        self.ready()
        column, stamp = LEVER_COLUMNS[field]
        values: dict[str, Any] = {column: (value or None) if field == "paused" else value,
                                  stamp: version}
        with self.engine.begin() as conn:
            done = conn.execute(activities.update().where(
                activities.c.id == aid,
                sa.or_(activities.c[stamp].is_(None), activities.c[stamp] < version),
            ).values(**values))
            if field == "total" and done.rowcount:
                self._sold_out(conn, {aid: 0})
        return bool(done.rowcount)

    def set_variant_total(self, aid: str, vid: str, total: int, whole: int) -> None:
        """Set a variant's total and its activity's (after a restock of the variant)."""
        self.ready()
        with self.engine.begin() as conn:
            conn.execute(variants.update().where(variants.c.activity_id == aid,
                                                 variants.c.variant_id == vid)
                         .values(total=total))
            conn.execute(activities.update().where(activities.c.id == aid).values(total=whole))
            self._sold_out(conn, {aid: 0})

    def set_admission_factor(self, aid: str, factor: float) -> None:
        """Keep an activity's admission factor (the operator's), for a rebuild."""
        self.update_activity(aid, admission_factor=factor)

    def update_activity(self, aid: str, **values: Any) -> bool:
        """Set columns of an activity's row (the operator's controls); False if unknown."""
        self.ready()
        with self.engine.begin() as conn:
            done = conn.execute(activities.update().where(activities.c.id == aid).values(**values))
        return bool(done.rowcount)

    def load_activity(self, aid: str) -> Activity | None:
        """The activity as the database holds it (remaining: its total), or None if unknown."""
        self.ready()
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(activities).where(activities.c.id == aid)).first()
            found = [] if row is None else conn.execute(
                sa.select(variants.c.variant_id, variants.c.name, variants.c.total)
                .where(variants.c.activity_id == aid).order_by(variants.c.position)).all()
        if row is None:
            return None
        return Activity(
            id=row.id,
            name=row.name,
            starts_ms=int(row.starts_ms),
            ends_ms=int(row.ends_ms),
            total=None if row.total is None else int(row.total),
            remaining=None if row.total is None else int(row.total),
            per_user_limit=int(row.per_user_limit),
            kind=row.kind,
            amount=None if row.amount is None else int(row.amount),
            seed=self._packet_seed(row),
            shards=int(row.shards or 1),
            payment_window=int(row.payment_window or 0),
            admission=row.admission or FIRST_COME,
            queue_opens_ms=None if row.queue_opens_ms is None else int(row.queue_opens_ms),
            challenge=bool(row.challenge),
            draw_seed=self._open(DRAW_SEED, row.id, row.draw_seed),
            admission_factor=float(row.admission_factor or 1.0),
            paused=bool(row.paused),
            rehearsal=bool(row.rehearsal),
            limit_by=row.limit_by or BY_USER,
            person_salt=self._open(PERSON_SALT, row.id, row.person_salt),
            product=Product(
                description=row.description, image_url=row.image_url,
                price_amount=None if row.price_amount is None else int(row.price_amount),
                price_currency=row.price_currency),
            variants=tuple(Variant(v[0], v[1], int(v[2]), int(v[2])) for v in found),
        )

    def _seal(self, column: SealedColumn, aid: str, secret: str | int | None) -> str | None:
        return None if secret is None else self.keys.seal(str(secret), column.context(aid))

    def _open(self, column: SealedColumn, aid: str, stored: str | None) -> str | None:
        return None if stored is None else self.keys.open(stored, column.context(aid))

    def _packet_seed(self, row: Any) -> int | None:
        """The split's seed: sealed, or in the plain column of a row written before sealing."""
        if row.sealed_seed is not None:
            return int(self.keys.open(row.sealed_seed, PACKET_SEED.context(row.id)))
        return None if row.seed is None else int(row.seed)

    def activity_ids(self) -> set[str]:
        """The ids of every activity the database knows."""
        self.ready()
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(sa.select(activities.c.id))}

    def activity_ids_after(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` activity ids in id order, those after ``after`` (a page's cursor)."""
        self.ready()
        query = sa.select(activities.c.id).order_by(activities.c.id).limit(limit)
        if after is not None:
            query = query.where(activities.c.id > after)
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(query)]

    def activity_ends(self) -> dict[str, tuple[int, int]]:
        """Every activity the database knows: its id -> (its end, ms since the epoch; the
        number of parts its stock is split into)."""
        self.ready()
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(activities.c.id, activities.c.ends_ms, activities.c.shards))
            return {r[0]: (int(r[1]), int(r[2] or 1)) for r in rows}

    def windowed_activities(self, since_ms: int) -> dict[str, int]:
        """The activities with a payment window whose holds may still be due at ``since_ms``
        (the last possible pay_by, the end plus the window, not before it): id -> parts."""
        self.ready()
        window_ms = activities.c.payment_window * 1000
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(activities.c.id, activities.c.shards)
                .where(activities.c.payment_window > 0,
                       activities.c.ends_ms + window_ms >= since_ms))
            return {r[0]: int(r[1] or 1) for r in rows}

    # -- orders -----------------------------------------------------------------------

    def _insert(self) -> Any:
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return postgresql.insert(orders).on_conflict_do_nothing()
        if dialect == "sqlite":
            return sqlite.insert(orders).on_conflict_do_nothing()
        return orders.insert().prefix_with("IGNORE")  # MySQL / MariaDB

    def store_batch(
        self, rows: Sequence[OrderRow], cancels: Sequence[Cancel | Paid] = ()
    ) -> set[str]:
        """:meth:`store`, for callers that only want the orders not stored."""
        return self.store(rows, cancels).conflicted

    def store(self, rows: Sequence[OrderRow], updates: Sequence[Cancel | Paid] = ()) -> Stored:
        """Insert orders and apply cancellations and payments (in stream order) in one
        transaction; a redelivered entry changes nothing more.

        The updates go first, to the orders already stored; an update of an order in
        ``rows`` is folded into its row, which is inserted in its final state (cancelled,
        expired, paid): a batch may hold "buy, cancel, buy again" by one user, and an order
        reclaimed late may come after its own cancel and its buyer's next order. What is
        left undone is returned (:class:`Stored`): the caller keeps an update whose order is
        not in the database yet (its purchase entry may still wait in a dead consumer's
        pending list) rather than acknowledge it, and dead-letters a conflicted order.
        """
        self.ready()
        stored = now_ms()
        values: dict[str, dict[str, Any]] = {
            r.order_id: {
                "order_id": r.order_id,
                "activity_id": r.activity_id,
                "user_id": r.user_id,
                "quantity": r.quantity,
                "status": CONFIRMED,
                "created_ms": r.created_ms,
                "stored_ms": stored,
                "amount": r.amount,
                "payment": None if r.pay_by is None else DUE,
                "pay_by": r.pay_by,
                "cancelled_ms": None,
                "payment_ref": None,
                "paid_ms": None,
                "paid_amount": None,
                "account": r.account,
                "items": _items_text(r.items),
                "changed_by": None,
            }
            for r in rows
        }
        batch = Batch(values, self.outbox)
        batch.fold(updates)
        wanted = list(values) + [u.order_id for u in updates if u.order_id not in values]
        with self.engine.begin() as conn:
            changed: list[tuple[str, int, Any]] = []
            for update in updates:
                if not self.outbox:
                    conn.execute(update_of(update))
                    continue
                done = conn.execute(update_of(update).returning(*ORDER_COLUMNS)).first()
                if done is not None:
                    changed.append((kind_of(update), update.at_ms, done._mapping))
            inserted: list[str] = []
            if values and self.outbox:
                inserted = insert_rows(conn, self._insert(), values)
            elif values:
                conn.execute(self._insert(), list(values.values()))
            if changed or inserted:
                self._write(conn, *batch.events(changed, inserted), stored, batch=True)
            present: set[str] = set()
            for start in range(0, len(wanted), 500):  # bounded IN lists
                present.update(r[0] for r in conn.execute(
                    sa.select(orders.c.order_id)
                    .where(orders.c.order_id.in_(wanted[start:start + 500]))))
        return Stored(conflicted={r.order_id for r in rows} - present,
                      orphans={u.order_id for u in updates} - present)

    def mark_cancelled(self, order_id: str, at_ms: int | None = None,
                       operator: str | None = None) -> bool:
        """Cancel a confirmed order (at ``at_ms``, default now; by ``operator``); whether a
        row changed (the one transaction that changed it writes its order.cancelled)."""
        self.ready()
        at = at_ms or now_ms()
        with self.engine.begin() as conn:
            done = conn.execute(
                orders.update()
                .where(orders.c.order_id == order_id, orders.c.status == CONFIRMED)
                .values(status=CANCELLED, cancelled_ms=at, changed_by=operator)
                .returning(*ORDER_COLUMNS)
            ).first()
            if done is not None and self.outbox:
                self._write(conn, [order_event(ORDER_CANCELLED, order_data(done._mapping), at)],
                            {done.activity_id: -int(done.quantity)}, at)
        return done is not None

    def _write(self, conn: sa.Connection, events: Sequence[Event | OrderChange],
               counted: dict[str, int], at_ms: int, batch: bool = False) -> None:
        """Write the events of a change (leaving out rehearsals'; ``batch``: a worker's, in
        one outbox row), and count the confirmed units it changed (``counted``: activity ->
        units) with their sell-outs."""
        aids = {e.activity_id for e in events} | set(counted)
        real = self._rehearsals.real(conn, aids)
        if len(real) < len(aids):
            events = [e for e in events if e.activity_id in real]
        add_events(conn, events, batch=batch)
        self._sold_out(conn, {a: n for a, n in counted.items() if a in real}, at_ms,
                       checked=True)

    def _sold_out(self, conn: sa.Connection, deltas: dict[str, int], at_ms: int | None = None,
                  checked: bool = False) -> None:
        """Count the confirmed units changed (``deltas``; 0: a total changed) and write the
        activity.sold_out of the activities that sold out now, in the change's transaction;
        ``checked``: rehearsals already left out."""
        if not self.outbox or not deltas:
            return
        real = set(deltas) if checked else self._rehearsals.real(conn, deltas)
        add_events(conn, sold_out_events(conn, {a: deltas[a] for a in real}, at_ms or now_ms()))

    def find_order(self, order_id: str) -> StoredOrder | None:
        """The stored order with this id, or None."""
        self.ready()
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(*_STORED).where(orders.c.order_id == order_id)
            ).first()
        if row is None:
            return None
        return _stored(row)

    def counts(self, aid: str) -> dict[str, int]:
        """An activity's number of confirmed orders and of cancelled ones."""
        return self.counts_of([aid])[aid]

    def counts_of(self, aids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Each of ``aids``' numbers of confirmed and cancelled orders (:meth:`counts`), in one
        query whatever their number (the census reads every recent activity's)."""
        found = {aid: {CONFIRMED: 0, CANCELLED: 0} for aid in aids}
        if not found:
            return found
        self.ready()
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(orders.c.activity_id, orders.c.status, sa.func.count())
                .where(orders.c.activity_id.in_(list(found)),
                       orders.c.status.in_((CONFIRMED, CANCELLED)))
                .group_by(orders.c.activity_id, orders.c.status)
            ).all()
        for aid, status, n in rows:
            found[aid][status] = int(n)
        return found

    def orders_of(self, aid: str) -> list[StoredOrder]:
        """Every stored order of an activity, oldest first."""
        self.ready()
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(*_STORED)
                .where(orders.c.activity_id == aid)
                .order_by(orders.c.created_ms, orders.c.order_id)
            ).all()
        return [_stored(r) for r in rows]


# -- a worker's batch: what it changes, and the events it writes ----------------------


def kind_of(entry: Cancel | Paid) -> str:
    """The event of the change an update makes."""
    if isinstance(entry, Paid):
        return ORDER_PAID
    return ORDER_EXPIRED if entry.expired else ORDER_CANCELLED


def update_of(entry: Cancel | Paid) -> Any:
    """The UPDATE a cancellation or a payment makes; a repeat matches no row."""
    if isinstance(entry, Paid):
        return (orders.update()
                .where(orders.c.order_id == entry.order_id, orders.c.payment == DUE)
                .values(payment=PAID, payment_ref=entry.ref, paid_ms=entry.at_ms,
                        paid_amount=entry.amount, changed_by=entry.operator))
    values: dict[str, Any] = {"status": CANCELLED, "cancelled_ms": entry.at_ms,
                              "changed_by": entry.operator}
    if entry.expired:
        values["payment"] = EXPIRED
    return (orders.update()
            .where(orders.c.order_id == entry.order_id, orders.c.status == CONFIRMED)
            .values(**values))


def insert_rows(conn: sa.Connection, insert: Any, values: dict[str, dict[str, Any]]) -> list[str]:
    """Insert a batch's rows (``values``: order id -> columns) with ``insert`` (which skips
    the rows it cannot store); the ids of the ones actually inserted, in order. SQLite: the
    plain executemany (RETURNING made SQLAlchemy fetch a row per order) and its count: all
    of them (most batches), none, or else the rows that took the last rowids (one writer,
    and a rowid table gives each new row the largest rowid + 1: the rows inserted now are
    the last ``count``). Elsewhere: RETURNING."""
    if conn.dialect.name != "sqlite":
        return [r[0] for r in conn.execute(insert.returning(orders.c.order_id),
                                           list(values.values()))]
    count = conn.execute(insert, list(values.values())).rowcount
    if count == len(values):
        return list(values)
    if count <= 0:
        return []
    return list(conn.execute(sa.text(
        f"SELECT order_id FROM {orders.name} WHERE rowid > "
        f"(SELECT max(rowid) FROM {orders.name}) - :count ORDER BY rowid"),
        {"count": count}).scalars())


def fold(row: dict[str, Any], entry: Cancel | Paid) -> bool:
    """Apply a cancellation or a payment to a row about to be inserted, as :func:`update_of`
    would once it is stored (the same conditions: a repeat changes nothing); whether it
    changed the row."""
    if isinstance(entry, Paid):
        if row["payment"] != DUE:
            return False
        row.update(payment=PAID, payment_ref=entry.ref, paid_ms=entry.at_ms,
                   paid_amount=entry.amount, changed_by=entry.operator)
        return True
    if row["status"] != CONFIRMED:
        return False
    row.update(status=CANCELLED, cancelled_ms=entry.at_ms, changed_by=entry.operator)
    if entry.expired:
        row["payment"] = EXPIRED
    return True


class Batch:
    """The rows of a batch about to be inserted (order id -> column values), with the
    updates folded into them; ``track``: keep what the events need (off for the bench)."""

    def __init__(self, values: dict[str, dict[str, Any]], track: bool) -> None:
        self.values = values
        self._track = track
        self._decided: dict[str, dict[str, Any]] = {}
        self._folded: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}

    def fold(self, updates: Sequence[Cancel | Paid]) -> None:
        """Fold the updates of the batch's own orders into their rows, in stream order."""
        for update in updates:
            row = self.values.get(update.order_id)
            if row is None:
                continue
            before = dict(row) if self._track else row
            if fold(row, update) and self._track:
                self._decided.setdefault(update.order_id, before)
                self._folded.setdefault(update.order_id, []).append(
                    (kind_of(update), update.at_ms, dict(row)))

    def events(
        self, changed: Sequence[tuple[str, int, Mapping[Any, Any]]], inserted: Sequence[str]
    ) -> tuple[list[OrderChange], dict[str, int]]:
        """The events of a batch: the updates that changed stored rows (``changed``: kind,
        when, the row after), then each inserted row's; and the confirmed units it changed
        per activity (for the sell-outs). Each event holds its row (:class:`OrderChange`:
        the outbox writes the row's values; no data dict is made per order)."""
        events = [OrderChange(kind, row["activity_id"], row, at) for kind, at, row in changed]
        units: dict[str, int] = {}
        for _, _, row in changed:
            if row["status"] == CANCELLED:
                aid = row["activity_id"]
                units[aid] = units.get(aid, 0) - int(row["quantity"])
        values, decided, folded = self.values, self._decided, self._folded
        add = events.append
        for order_id in inserted:  # hundreds a batch: kept lean
            row = values[order_id]
            aid = row["activity_id"]
            add(OrderChange(ORDER_CREATED, aid, decided.get(order_id, row) if decided else row,
                            row["created_ms"]))
            if folded and order_id in folded:
                events.extend(OrderChange(kind, aid, after, at)
                              for kind, at, after in folded[order_id])
            if row["status"] == CONFIRMED:
                units[aid] = units.get(aid, 0) + int(row["quantity"])
        return events, units


# -- sell-outs, and the rehearsals that write nothing ---------------------------------


class Rehearsals:
    """Which activities are rehearsals (they send nothing): read once per activity, as the
    flag never changes after the activity is created."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()

    def real(self, conn: sa.Connection, aids: Iterable[str]) -> set[str]:
        """The activities of ``aids`` that are not rehearsals (an activity the database does
        not know counts as real, and is asked again next time)."""
        wanted = set(aids)
        missing = [a for a in wanted if a not in self._known]
        if missing:
            found = {r[0]: bool(r[1]) for r in conn.execute(
                sa.select(activities.c.id, activities.c.rehearsal)
                .where(activities.c.id.in_(missing)))}
            with self._lock:
                self._known.update(found)
        return {a for a in wanted if not self._known.get(a, False)}


# Built once: every worker batch runs it, and building it is a visible part of a batch.
_COUNT = (activities.update().where(activities.c.id == sa.bindparam("aid"))
          .values(sold_units=activities.c.sold_units + sa.bindparam("delta"))
          .returning(activities.c.total, activities.c.sold_units, activities.c.sold_out_ms))


def sold_out_events(conn: sa.Connection, deltas: Mapping[str, int], at_ms: int) -> list[Event]:
    """After a change of the confirmed units of ``deltas``' activities (by these many; 0
    after a change of their totals), in the same transaction: count them (``sold_units``)
    and return the activity.sold_out of each activity whose count reached its total now,
    keeping ``sold_out_ms`` in step. One UPDATE per activity, in id order, which takes its
    row lock first (PostgreSQL; two writers lock in the same order): a concurrent writer
    waits, then adds to the count this one left, so neither misses nor doubles a sell-out."""
    found: list[Event] = []
    for aid in sorted(deltas):
        state = conn.execute(_COUNT, {"aid": aid, "delta": deltas[aid]}).first()
        if state is None or state.total is None:
            continue  # unknown, or unlimited: never sold out
        sold = state.sold_units
        if sold is None:  # not counted yet (an older database): count it, row locked
            sold = conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(orders.c.quantity), 0))
                .where(orders.c.activity_id == aid, orders.c.status == CONFIRMED)).scalar_one()
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_units=sold))
        total, sold = int(state.total), int(sold)
        if sold >= total and state.sold_out_ms is None:
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_out_ms=at_ms))
            found.append(Event(ACTIVITY_SOLD_OUT, activity_subject(aid), aid,
                               {"activity": aid, "total": total, "sold": sold}, at_ms))
        elif sold < total and state.sold_out_ms is not None:
            conn.execute(activities.update().where(activities.c.id == aid)
                         .values(sold_out_ms=None))
    return found

_STORED = (orders.c.order_id, orders.c.activity_id, orders.c.user_id, orders.c.quantity,
           orders.c.status, orders.c.amount, orders.c.payment, orders.c.pay_by,
           orders.c.payment_ref, orders.c.paid_ms, orders.c["items"])


def _items_text(items: Items | None) -> str | None:
    """An order's items as its ``items`` column holds them: JSON ``[{"variant",
    "quantity"}]`` (NULL without variants)."""
    return None if items is None else json.dumps(items_body(items), separators=(",", ":"))


def _stored(row: Any) -> StoredOrder:
    def number(value: Any) -> int | None:
        return None if value is None else int(value)

    return StoredOrder(row[0], row[1], row[2], int(row[3]), row[4], number(row[5]), row[6],
                       number(row[7]), row[8], number(row[9]),
                       items=None if row[10] is None else items_from_body(json.loads(row[10])))
