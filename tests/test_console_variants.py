"""The console on an activity with variants: the state's row carries each variant's
numbers (sold beside the view's total and remaining), and the activity's card shows a bar per
variant, in headless Chromium against a real gunicorn on Valkey; a single-item card has none.

Screenshots go to ``test-artifacts/``; with ``SECKILL_DOCS_SCREENSHOTS=1`` also to ``docs/``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import urllib3

from edge.identity import mint_user_token
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.api import buy, expect
from tests.support.gateway import gateway_env
from tests.support.screenshots import ARTIFACTS
from tests.support.servers import REPO_ROOT, gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN, ADMIN_TOKEN, JWT_SECRET

SIZES = [{"id": "eu40", "name": "EU 40", "total": 4}, {"id": "eu41", "name": "EU 41", "total": 2}]


def variant_body(**fields: Any) -> dict[str, Any]:
    return {"id": f"cv{uuid.uuid4().hex[:10]}", "name": "Sneaker", "variants": SIZES,
            "per_user_limit": 2, "starts_at": iso(-60), "ends_at": iso(3600), **fields}


def test_the_state_row_has_each_variants_numbers(make_app):
    client = make_app().test_client()
    body = variant_body()
    expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)
    expect(buy(client, body["id"], "ann", {"variant": "eu41", "quantity": 2}), 200)
    expect(buy(client, body["id"], "bob", {"variant": "eu40"}), 200)
    state = expect(client.get("/admin/console/state", headers=ADMIN), 200)
    row = next(a for a in state["activities"] if a["id"] == body["id"])
    assert row["variants"] == [
        {"id": "eu40", "name": "EU 40", "total": 4, "remaining": 3, "sold": 1, "state": "open"},
        {"id": "eu41", "name": "EU 41", "total": 2, "remaining": 0, "sold": 2,
         "state": "sold_out"}]
    assert (row["total"], row["remaining"], row["sold"]) == (6, 3, 3)


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("console-variants")
    env = gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", folder / "data",
                      f"sqlite:///{folder / 'orders.db'}", "1000/second")
    with gunicorn_server(env, workers=1) as base:
        yield base


def call(base: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    response = urllib3.request(method, f"{base}{path}",
                               headers={"Authorization": f"Bearer {token}"},
                               body=None if body is None else orjson.dumps(body),
                               timeout=10, retries=False)
    return response.status, orjson.loads(response.data)


def buy_over_http(base: str, aid: str, uid: str, body: dict[str, Any] | None) -> None:
    token = mint_user_token(uid, JWT_SECRET, 600)
    status, issued = call(base, "GET", f"/seckill/url?activity={aid}", token)
    assert status == 200, issued
    status, bought = call(base, "POST", issued["url"], token, body or {})
    assert status == 200, bought


def test_a_bar_per_variant_on_the_activity_card(gateway: str,
                                               new_page: Callable[..., Any]) -> None:
    from playwright.sync_api import expect as see

    body = variant_body(name="Sneaker drop")
    assert call(gateway, "POST", "/admin/activities", ADMIN_TOKEN, body)[0] == 201
    aid = body["id"]
    single = {**variant_body(name="Phone X"), "total": 5}
    del single["variants"]
    assert call(gateway, "POST", "/admin/activities", ADMIN_TOKEN, single)[0] == 201
    buy_over_http(gateway, aid, "cv-ann", {"variant": "eu41", "quantity": 2})
    buy_over_http(gateway, aid, "cv-bob", {"variant": "eu40"})
    tab = new_page(viewport={"width": 1280, "height": 900})
    tab.goto(f"{gateway}/admin/")
    tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
    tab.get_by_role("button", name="Open the console").click()
    card = tab.locator(f'li[data-activity="{aid}"]')
    see(card).to_contain_text("3 of 6 left")
    bars = card.locator(".variant-bars").get_by_role("progressbar")
    see(bars).to_have_count(2)
    see(bars.nth(0)).to_have_attribute("aria-label", "EU 40: 1 of 4 sold, 3 left")
    see(bars.nth(1)).to_have_attribute("aria-label", "EU 41: 2 of 2 sold, 0 left")
    see(bars.nth(0)).to_have_attribute("aria-valuenow", "1")
    see(bars.nth(1)).to_have_attribute("aria-valuemax", "2")
    rows = card.locator(".variant-bars li")
    see(rows.nth(0)).to_contain_text("EU 40 (eu40)")
    see(rows.nth(0)).to_contain_text("1 of 4 sold · 3 left")
    see(rows.nth(1)).to_contain_text("2 of 2 sold · gone")
    # Live: the next sale of EU 40 moves its bar, and only its bar.
    buy_over_http(gateway, aid, "cv-cy", {"variant": "eu40"})
    see(bars.nth(0)).to_have_attribute("aria-label", "EU 40: 2 of 4 sold, 2 left",
                                       timeout=10_000)
    see(bars.nth(1)).to_have_attribute("aria-label", "EU 41: 2 of 2 sold, 0 left")
    # One item: its card is as before, one bar.
    other = tab.locator(f'li[data-activity="{single["id"]}"]')
    see(other).to_contain_text("5 of 5 left")
    see(other.get_by_role("progressbar")).to_have_count(1)
    see(other.locator(".variant-bars")).to_have_count(0)
    ARTIFACTS.mkdir(exist_ok=True)
    card.screenshot(path=str(ARTIFACTS / "console-variants.png"))
    if os.environ.get("SECKILL_DOCS_SCREENSHOTS") == "1":
        card.screenshot(path=str(REPO_ROOT / "docs" / "console-variants.png"))
