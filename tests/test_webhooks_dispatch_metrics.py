"""``/metrics`` shows the webhooks' numbers, read from the database at the scrape:
attempts by endpoint and outcome, the pending deliveries, the oldest undelivered event."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from seckill.sql.schema import ensure_schema
from seckill.webhooks.options import DispatchOptions
from seckill.webhooks.run import run_dispatcher
from tests.support.timing import wait_until
from tests.support.tokens import METRICS
from tests.support.webhook_receiver import (
    Clock,
    WebhookReceiver,
    add_endpoint,
    add_order_events,
    new_secret,
)

pytestmark = pytest.mark.database


def scrape(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("seckill_webhook") for s in family.samples}


def test_metrics_show_outcomes_backlog_and_oldest(app: Flask, client: FlaskClient,
                                                  database_url: str) -> None:
    engine: sa.Engine = app.extensions["seckill"].engine
    ensure_schema(engine)
    assert scrape(client) == {("seckill_webhook_backlog", ()): 0.0,
                              ("seckill_webhook_oldest_undelivered_seconds", ()): 0.0}
    clock = Clock()
    good_secret, bad_secret = new_secret(), new_secret()
    with WebhookReceiver(good_secret) as good, WebhookReceiver(bad_secret) as bad:
        bad.fail("500")
        ok_id = add_endpoint(engine, good.url, good_secret, endpoint_id="ep_good")
        add_endpoint(engine, bad.url, bad_secret, endpoint_id="ep_bad")
        add_order_events(engine, [("order.created", f"o{i}") for i in range(3)],
                         int(time.time() * 1000) - 30_000)
        time.sleep(1.1)  # a scrape's reads of the database are kept a second
        before = scrape(client)  # not fanned out yet: no backlog, but 30 s old
        assert before[("seckill_webhook_backlog", ())] == 0
        assert before[("seckill_webhook_oldest_undelivered_seconds", ())] >= 30
        stop = threading.Event()
        thread = threading.Thread(target=run_dispatcher, args=(database_url,), kwargs={
            "stop": stop, "clock": clock, "options": DispatchOptions(idle=0.02)}, daemon=True)
        thread.start()
        try:
            wait_until(lambda: len(good.delivered()) == 3 and len(bad.received()) == 3, 10)
            wait_until(lambda: scrape(client).get(
                ("seckill_webhook_deliveries_total",
                 (("endpoint", "ep_bad"), ("outcome", "retried")))) == 3, 10)
        finally:
            stop.set()
            thread.join(timeout=15)
    found = scrape(client)
    total = "seckill_webhook_deliveries_total"
    assert found[(total, (("endpoint", ok_id), ("outcome", "delivered")))] == 3
    assert found[(total, (("endpoint", ok_id), ("outcome", "retried")))] == 0
    assert found[(total, (("endpoint", "ep_bad"), ("outcome", "failed")))] == 0
    assert found[("seckill_webhook_backlog", ())] == 3  # the bad endpoint's
    assert found[("seckill_webhook_oldest_undelivered_seconds", ())] >= 30
