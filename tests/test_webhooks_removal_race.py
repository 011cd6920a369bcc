"""An endpoint removed while the dispatcher fans events out leaves no delivery behind:
the fan-out and the removal are serialized by the database, on SQLite (one writer) and
on PostgreSQL (the fan-out's shared locks on the endpoints' rows)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from seckill.sql import deliveries
from seckill.sql.schema import ensure_schema, webhook_deliveries, webhook_endpoints
from seckill.webhooks.run import dispatcher_engine
from tests.support.timing import wait_until
from tests.support.webhook_receiver import add_endpoint, add_order_events, new_secret

pytestmark = pytest.mark.database


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    made = dispatcher_engine(database_url)
    ensure_schema(made)
    yield made
    made.dispose()


def test_a_removal_during_the_fan_out_leaves_no_delivery_of_the_removed_endpoint(engine):
    gone = add_endpoint(engine, "http://127.0.0.1:9/gone", new_secret())
    kept = add_endpoint(engine, "http://127.0.0.1:9/kept", new_secret())
    add_order_events(engine, [("order.created", "a1:1"), ("order.created", "a1:2")],
                     at_ms=1_800_000_000_000)

    # The removal, as seckill.sql.webhooks does it, held open before its commit.
    removal = engine.connect()
    removal.begin()
    removal.execute(sa.select(webhook_endpoints.c.id).where(webhook_endpoints.c.id == gone)
                    .with_for_update())
    removal.execute(webhook_deliveries.delete().where(webhook_deliveries.c.endpoint_id == gone))
    removal.execute(webhook_endpoints.delete().where(webhook_endpoints.c.id == gone))

    fanned: list[int] = []

    def fan_out() -> None:
        with engine.begin() as conn:
            fanned.append(deliveries.fan_out(conn, 1_800_000_000_000, 100)[0])

    thread = threading.Thread(target=fan_out, daemon=True)
    thread.start()
    try:
        thread.join(1.0)  # it waits for the removal (or, before the fix, did not)
    finally:
        removal.commit()
        removal.close()
    thread.join(30)
    wait_until(lambda: fanned, 5, what="the fan-out to finish")
    assert fanned == [2]
    with engine.connect() as conn:
        made = conn.execute(sa.select(webhook_deliveries.c.endpoint_id,
                                      webhook_deliveries.c.seq)).all()
    assert sorted(endpoint for endpoint, _ in made) == [kept, kept], made
