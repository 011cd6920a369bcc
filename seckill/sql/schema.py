"""The SQL schema (SQLAlchemy Core): activities, orders, and the webhooks' outbox.

The database is written by the orders worker (orders, in batches) and by operator calls
(activities, cancellations); the crowd never reaches it.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from seckill.domain.orders import CONFIRMED

log = logging.getLogger(__name__)

metadata = sa.MetaData()

# The columns of sealed secrets (seckill/sql/sealing.py): a webhook secret of 128 characters
# takes 227 sealed.
SEALED_LENGTH = 255

activities = sa.Table(
    "seckill_activities",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False, server_default="stock"),
    sa.Column("starts_ms", sa.BigInteger, nullable=False),
    sa.Column("ends_ms", sa.BigInteger, nullable=False),
    sa.Column("total", sa.BigInteger, nullable=True),  # NULL: unlimited
    sa.Column("per_user_limit", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    # kind "packets": the amount split (cents), the number of packets (= total), and the
    # split's seed: a rebuild re-derives every packet from these three.
    sa.Column("amount", sa.BigInteger, nullable=True),
    sa.Column("packet_count", sa.Integer, nullable=True),
    sa.Column("seed", sa.BigInteger, nullable=True),  # only in rows written before sealing
    # kind "stock": the number of parts the stock is split into (NULL, as in a database made
    # by an older version: 1).
    sa.Column("shards", sa.Integer, nullable=True),
    # Seconds a buyer has to pay (NULL or 0: a purchase is final).
    sa.Column("payment_window", sa.Integer, nullable=True),
    # Admission (NULL: first_come): queue or draw, when the queue opens, whether joining
    # needs a proof-of-work, the order's secret seed (sealed), and the operator's factor.
    sa.Column("admission", sa.String(16), nullable=True),
    sa.Column("queue_opens_ms", sa.BigInteger, nullable=True),
    sa.Column("challenge", sa.Boolean, nullable=True),
    sa.Column("draw_seed", sa.String(SEALED_LENGTH), nullable=True),
    sa.Column("admission_factor", sa.Float, nullable=True),
    # The operator's pause (NULL: not paused) and what the sale page shows of the product.
    sa.Column("paused", sa.Boolean, nullable=True),
    sa.Column("description", sa.Text, nullable=True),
    sa.Column("image_url", sa.String(2048), nullable=True),
    sa.Column("price_amount", sa.BigInteger, nullable=True),
    sa.Column("price_currency", sa.String(3), nullable=True),
    # A rehearsal (seckill drill --target; NULL: a real sale): left out of the metrics, the
    # console's totals and anything sent to the shop.
    sa.Column("rehearsal", sa.Boolean, nullable=True),
    # Whom the one-purchase rule counts (NULL: "user"); "person": the person's secret salt
    # that keys them (seckill/domain/people.py, sealed), kept for a rebuild.
    sa.Column("limit_by", sa.String(16), nullable=True),
    sa.Column("person_salt", sa.String(SEALED_LENGTH), nullable=True),
    # Webhooks: the units of the stored confirmed orders, kept by the transactions
    # that change them (NULL: not counted yet, e.g. an older database: counted from the orders
    # at the next change); when they last reached the total (its activity.sold_out was written
    # then), NULL while below it (seckill/sql/book.py): one event per sell-out.
    sa.Column("sold_units", sa.BigInteger, nullable=True),
    sa.Column("sold_out_ms", sa.BigInteger, nullable=True),
    # The version of the operator's lever that last set paused, ends_ms and total (NULL:
    # none since creation): a lever is written only over an older one, so a write that
    # arrives late never reverses a later command (lua/lever.lua,
    # seckill/store/sale/activity/levers.py).
    sa.Column("paused_v", sa.BigInteger, nullable=True),
    sa.Column("ends_v", sa.BigInteger, nullable=True),
    sa.Column("total_v", sa.BigInteger, nullable=True),
    # kind "packets": the split's seed, sealed (seckill/sql/sealing.py); a row written before
    # sealing has it in ``seed`` instead, until the rows are sealed.
    sa.Column("sealed_seed", sa.String(SEALED_LENGTH), nullable=True),
)


orders = sa.Table(
    "seckill_orders",
    metadata,
    sa.Column("order_id", sa.String(100), primary_key=True),
    sa.Column("activity_id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.String(64), nullable=False),
    sa.Column("quantity", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),  # when the script decided it
    sa.Column("stored_ms", sa.BigInteger, nullable=False),  # when the worker committed it
    sa.Column("cancelled_ms", sa.BigInteger, nullable=True),
    sa.Column("amount", sa.BigInteger, nullable=True),  # a packet's amount, cents
    # With a payment window: "due" until "paid" or "expired" (then status is cancelled);
    # NULL when the activity has none.
    sa.Column("payment", sa.String(16), nullable=True),
    sa.Column("pay_by", sa.BigInteger, nullable=True),
    sa.Column("payment_ref", sa.String(128), nullable=True),
    sa.Column("paid_ms", sa.BigInteger, nullable=True),
    # What the payment provider said it charged, cents (POST /payments/webhook's optional
    # "amount"); NULL when it did not say, or the operator's pay call recorded the payment.
    sa.Column("paid_amount", sa.BigInteger, nullable=True),
    # A person-limited activity's order: user_id is the person's key, this the account that
    # bought (NULL otherwise: user_id is the account).
    sa.Column("account", sa.String(64), nullable=True),
    # An activity with variants: the variant of every unit, JSON [{"variant", "quantity"}]
    # (NULL for a single-item activity's order).
    sa.Column("items", sa.Text, nullable=True),
    # Who made the order's last change by hand: the operator who cancelled it, or recorded
    # its payment (an operator's name, or the command's "cli:<login>"); NULL otherwise.
    sa.Column("changed_by", sa.String(80), nullable=True),
    sa.CheckConstraint("quantity >= 1", name="ck_seckill_orders_quantity"),
    sa.CheckConstraint("amount IS NULL OR amount >= 1", name="ck_seckill_orders_amount"),
    sa.CheckConstraint("status IN ('confirmed', 'cancelled')", name="ck_seckill_orders_status"),
)

# One live order per (activity, user). Partial, because a cancelled order gives the user the
# right to buy again (the contract); a cancelled row must not block the new one.
sa.Index(
    "uq_seckill_orders_live_buyer",
    orders.c.activity_id,
    orders.c.user_id,
    unique=True,
    postgresql_where=orders.c.status == CONFIRMED,
    sqlite_where=orders.c.status == CONFIRMED,
)
sa.Index("ix_seckill_orders_activity", orders.c.activity_id, orders.c.status)

# An activity's variants, one row each: its name, its position in the operator's
# list and its total, which a restock of the variant moves (a row per variant, so that two
# restocks of two variants never overwrite each other). A rebuild takes them from here.
variants = sa.Table(
    "seckill_variants",
    metadata,
    sa.Column("activity_id", sa.String(64), primary_key=True),
    sa.Column("variant_id", sa.String(32), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("total", sa.BigInteger, nullable=False),
)


# Webhooks. The outbox: one row per event, written in the same transaction as the
# change it reports (seckill/sql/outbox.py); ``seq`` orders events, ``subject`` groups the
# events that must arrive in order (one order's, one activity's), ``body`` is the JSON sent,
# byte for byte, on every attempt and replay; ``dedupe`` makes an event that must exist once
# per cause (a refund per payment_ref) idempotent. ``fanned`` is NULL until the dispatcher
# has made the event's deliveries (one per endpoint subscribed at that moment).
outbox = sa.Table(
    "seckill_outbox",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
              primary_key=True, autoincrement=True),
    # The webhook-id: unique by construction (the time and 80 random bits), not by an index,
    # which would be one more write per event in the worker's batch; nothing looks it up.
    sa.Column("event_id", sa.String(64), nullable=False),
    sa.Column("type", sa.String(32), nullable=False),
    sa.Column("subject", sa.String(128), nullable=False),
    sa.Column("activity_id", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("fanned", sa.Boolean, nullable=True),
    sa.Column("dedupe", sa.String(256), nullable=True),
)
# Unique where set: the few events with a dedupe key pay for this index, not every order.
sa.Index("uq_seckill_outbox_dedupe", outbox.c.dedupe, unique=True,
         postgresql_where=outbox.c.dedupe.isnot(None), sqlite_where=outbox.c.dedupe.isnot(None))
sa.Index("ix_seckill_outbox_unfanned", outbox.c.seq,
         postgresql_where=outbox.c.fanned.is_(None), sqlite_where=outbox.c.fanned.is_(None))
# No index on created_ms: a replay --since and the retention's prune are rare operator and
# housekeeping reads (a scan), while every stored order would pay for the index.

# The shop's endpoints: where events go, which types, the signing secret (``whsec_...``),
# and the attempts by outcome (counters for /metrics that survive restarts and pruning).
webhook_endpoints = sa.Table(
    "seckill_webhook_endpoints",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("events", sa.Text, nullable=False),  # JSON list of types, or ["*"]
    sa.Column("secret", sa.String(SEALED_LENGTH), nullable=False),  # sealed
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("delivered", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("retried", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("failed", sa.BigInteger, nullable=False, server_default="0"),
)

# One event's delivery to one endpoint: pending (due at ``next_ms``; while leased, by one
# dispatcher until ``lease_ms``), delivered or failed; the last attempt's answer for the
# operator. ``subject`` is the event's: a pending delivery holds back the later deliveries
# of its subject to the same endpoint.
webhook_deliveries = sa.Table(
    "seckill_webhook_deliveries",
    metadata,
    sa.Column("endpoint_id", sa.String(40), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("subject", sa.String(128), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_ms", sa.BigInteger, nullable=False),
    sa.Column("first_ms", sa.BigInteger, nullable=True),
    sa.Column("lease_owner", sa.String(64), nullable=True),
    sa.Column("lease_ms", sa.BigInteger, nullable=True),
    sa.Column("last_ms", sa.BigInteger, nullable=True),
    sa.Column("last_code", sa.Integer, nullable=True),
    sa.Column("last_error", sa.String(300), nullable=True),
    sa.Column("done_ms", sa.BigInteger, nullable=True),
)
sa.Index("ix_seckill_deliveries_due", webhook_deliveries.c.status, webhook_deliveries.c.next_ms)
sa.Index("ix_seckill_deliveries_subject", webhook_deliveries.c.endpoint_id,
         webhook_deliveries.c.subject, webhook_deliveries.c.seq)


def ensure_schema(engine: sa.Engine) -> None:
    """Create the tables if missing, and add the nullable columns a database created by an
    older version lacks. Several processes may race here at start-up; the loser's "already
    exists" error is harmless, so one retry settles it."""
    for attempt in range(3):
        try:
            metadata.create_all(engine, checkfirst=True)
            _add_missing_columns(engine)
            _widen_columns(engine)
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
            # SQLite says "already exists" with an OperationalError; any other one (no
            # connection, a timeout, a lock) is the database away: no retry, which would
            # multiply the caller's bound.
            raced = not isinstance(exc, sa.exc.OperationalError) or "already exists" in str(exc)
            if attempt == 2 or not raced:
                raise
            log.info("schema creation raced with another process (%s); checking again",
                     exc.orig or exc)


def _add_missing_columns(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    for table in metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            if not column.nullable:
                raise RuntimeError(f"{table.name} lacks the required column {column.name}")
            kind = column.type.compile(dialect=engine.dialect)
            log.warning("adding column %s.%s (%s) to an older database",
                        table.name, column.name, kind)
            with engine.begin() as conn:
                conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))


def _widen_columns(engine: sa.Engine) -> None:
    """Give a column that an older version made narrower its length now (the sealed secrets'
    columns). PostgreSQL only: SQLite enforces no length. Widening a varchar rewrites nothing."""
    if engine.dialect.name != "postgresql":
        return
    inspector = sa.inspect(engine)
    for table in metadata.sorted_tables:
        found = {c["name"]: c["type"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            wanted = getattr(column.type, "length", None)
            now = getattr(found.get(column.name), "length", None)
            if wanted is None or now is None or now >= wanted:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            log.warning("widening column %s.%s to %s", table.name, column.name, kind)
            with engine.begin() as conn:
                conn.execute(sa.text(
                    f"ALTER TABLE {table.name} ALTER COLUMN {column.name} TYPE {kind}"))
