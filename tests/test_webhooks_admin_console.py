"""The console's Webhooks panel: each endpoint's URL and events, its last attempt
(when, the answer's code), its failures and its backlog, live, in headless Chromium against a
real gunicorn on Valkey and a SQLite file. The deliveries the dispatcher would make are written
as rows of their table (``tests/support/webhook_rows.py``).

Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
import urllib3

from seckill.domain.clock import now_ms
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.sql.engine import make_engine
from seckill.sql.schema import ensure_schema
from tests.support.gateway import gateway_env
from tests.support.screenshots import ARTIFACTS
from tests.support.servers import gunicorn_server
from tests.support.tokens import ADMIN_TOKEN
from tests.support.webhook_rows import delivery, event


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, sa.Engine]]:
    folder = tmp_path_factory.mktemp("console-webhooks")
    database = f"sqlite:///{folder / 'orders.db'}"
    env = gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", folder / "data", database,
                      "1000/second")
    engine = make_engine(database)
    ensure_schema(engine)
    with gunicorn_server(env, workers=1) as base:
        yield base, engine
    engine.dispose()


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = urllib3.request(method, f"{base}{path}",
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                               body=None if body is None else orjson.dumps(body),
                               timeout=10, retries=False)
    return response.status, orjson.loads(response.data)


def test_the_webhooks_panel_shows_each_endpoints_last_attempt_failures_and_backlog(
        gateway: tuple[str, sa.Engine], new_page: Callable[..., Any]) -> None:
    from playwright.sync_api import expect as see

    base, engine = gateway
    status, down = call(base, "POST", "/admin/webhooks",
                        {"url": "http://10.0.0.9:8000/hooks", "events": ["order.paid"]})
    assert status == 201, down
    status, fine = call(base, "POST", "/admin/webhooks",
                        {"url": "https://shop.example/seckill", "events": ["*"]})
    assert status == 201, fine
    at = now_ms() - 90_000
    first, _ = event(engine, "order.paid", "o1", at)
    second, _ = event(engine, "order.paid", "o2", at + 1)
    delivery(engine, down["id"], first, "order:o1", "failed", attempts=30, last_ms=at + 10,
             last_code=None, last_error="ConnectTimeoutError", done_ms=at + 10)
    delivery(engine, down["id"], second, "order:o2", "pending", attempts=3, last_ms=at + 20,
             last_code=500, next_ms=at + 60_000)
    delivery(engine, fine["id"], first, "order:o1", "delivered", attempts=1, last_ms=at + 5,
             last_code=204, done_ms=at + 5)
    tab = new_page(viewport={"width": 1280, "height": 900})
    tab.goto(f"{base}/admin/")
    tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
    tab.get_by_role("button", name="Open the console").click()
    see(tab.locator("#h-webhooks")).to_have_text("Webhooks (2)")
    bad = tab.locator(f'tr[data-webhook="{down["id"]}"] td')
    see(bad).to_have_count(5)
    see(bad.nth(0)).to_have_text("http://10.0.0.9:8000/hooks")
    see(bad.nth(1)).to_have_text("order.paid")
    see(bad.nth(2)).to_contain_text("HTTP 500")
    see(bad.nth(2)).to_have_class("down")
    see(bad.nth(3)).to_have_text("1")
    see(bad.nth(4)).to_contain_text("1 (oldest ")
    good = tab.locator(f'tr[data-webhook="{fine["id"]}"] td')
    see(good.nth(1)).to_have_text("every event")
    see(good.nth(2)).to_contain_text("HTTP 204")
    see(good.nth(3)).to_have_text("0")
    see(good.nth(4)).to_have_text("0")
    ARTIFACTS.mkdir(exist_ok=True)
    tab.locator("#h-webhooks").locator("..").screenshot(
        path=str(Path(ARTIFACTS) / "console-webhooks.png"))
    # Live: the backlog goes, the endpoint is removed: the panel follows.
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE seckill_webhook_deliveries SET status = 'delivered',"
                             " last_code = 200, last_ms = :at WHERE seq = :seq"),
                     {"at": now_ms(), "seq": second})
    see(bad.nth(2)).to_contain_text("HTTP 200", timeout=10_000)
    see(bad.nth(4)).to_have_text("0")
    assert call(base, "DELETE", f"/admin/webhooks/{fine['id']}")[0] == 200
    see(tab.locator("#h-webhooks")).to_have_text("Webhooks (1)", timeout=10_000)
    see(tab.locator(f'tr[data-webhook="{fine["id"]}"]')).to_have_count(0)
