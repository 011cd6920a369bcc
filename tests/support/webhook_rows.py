"""Rows of the webhooks' tables as the outbox and the dispatcher write them, for the tests of
what reads them (the operator's lists, the replay, the console's summary)."""

from __future__ import annotations

from typing import Any

import orjson
import sqlalchemy as sa
from flask import Flask

from seckill.domain.clock import iso_from_ms
from seckill.domain.events import new_event_id
from seckill.sql.schema import ensure_schema, outbox, webhook_deliveries


def engine_of(app: Flask) -> sa.Engine:
    """The app's database engine, its schema made."""
    engine: sa.Engine = app.extensions["seckill"].engine
    ensure_schema(engine)
    return engine


def event(engine: sa.Engine, kind: str, order_id: str, at_ms: int, *,
          subject: str | None = None, fanned: bool = True) -> tuple[int, str]:
    """An event in the outbox (fanned out already unless ``fanned`` is false): its seq and
    its webhook-id."""
    event_id = new_event_id()
    body = {"type": kind, "timestamp": iso_from_ms(at_ms),
            "data": {"order_id": order_id, "activity": "p1"}}
    with engine.begin() as conn:
        seq = conn.execute(outbox.insert().values(
            event_id=event_id, type=kind, subject=subject or f"order:{order_id}",
            activity_id="p1", body=orjson.dumps(body).decode(), created_ms=at_ms,
            fanned=True if fanned else None).returning(outbox.c.seq)).scalar_one()
    return int(seq), event_id


def delivery(engine: sa.Engine, endpoint_id: str, seq: int, subject: str, status: str,
             **fields: Any) -> None:
    """A delivery of event ``seq`` to ``endpoint_id`` (due now unless ``next_ms`` is given)."""
    values = {"endpoint_id": endpoint_id, "seq": seq, "subject": subject, "status": status,
              "attempts": 0, "next_ms": 0, **fields}
    with engine.begin() as conn:
        conn.execute(webhook_deliveries.insert().values(**values))


def deliveries_of(engine: sa.Engine, endpoint_id: str) -> list[dict[str, Any]]:
    """Every delivery row of ``endpoint_id``, in event order."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(webhook_deliveries)
                            .where(webhook_deliveries.c.endpoint_id == endpoint_id)
                            .order_by(webhook_deliveries.c.seq)).mappings().all()
    return [dict(row) for row in rows]
