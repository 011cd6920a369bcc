"""The operator console (``GET /admin/``): its state endpoint in-process, and the page in
headless Chromium on a real ``seckill up`` (nginx, two instances, Valkey) during a sale:
sign in, watch the stock and the answers per second, pause, resume, end."""

from __future__ import annotations

import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from seckill.ops.stack.ports import free_listen_port
from tests.support.api import buy, create_activity, expect
from tests.support.cli import call
from tests.support.screenshots import shoot
from tests.support.tokens import ADMIN, ADMIN_TOKEN, user_headers
from tests.support.upstack import UpStack, running_up, user_token


def test_the_state_says_stock_outcomes_backlog_and_instances(make_app):
    dead = f"127.0.0.1:{free_listen_port()}"
    app = make_app(SECKILL_INSTANCES=dead)
    client = app.test_client()
    aid = create_activity(client, name="Phone X", total=3)["id"]
    assert buy(client, aid, "alice").status_code == 200
    expect(buy(client, aid, "alice"), 409, "already_purchased")
    expect(client.get("/admin/console/state"), 401, "unauthenticated")
    expect(client.get("/admin/console/state", headers=user_headers("alice")), 401,
           "unauthenticated")
    state = expect(client.get("/admin/console/state", headers=ADMIN), 200)
    row = next(a for a in state["activities"] if a["id"] == aid)
    assert (row["name"], row["total"], row["remaining"], row["sold"], row["state"]) == (
        "Phone X", 3, 2, 1, "open")
    assert row["orders"]["pending"] == 1  # no worker here
    assert row["outcomes"]["ok"] == 3  # two URLs and the first purchase
    assert row["outcomes"]["already_purchased"] == 1
    assert state["redis_up"] is True
    assert state["instances"] == [{"instance": dead, "ok": False,
                                   "error": state["instances"][0]["error"]}]


def test_the_page_and_its_files_load_without_a_token_and_nothing_else_does(client):
    page = client.get("/admin/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert b"/admin/console/console.js" in page.get_data()
    for name, kind in (("console.js", "javascript"), ("console.css", "css"),
                       ("vendor/uPlot.iife.min.js", "javascript")):
        asset = client.get(f"/admin/console/{name}")
        assert asset.status_code == 200 and kind in asset.mimetype, name
    expect(client.get("/admin/console/../wsgi.py"), 404, "not_found")
    expect(client.get("/admin/console/secret.txt"), 404, "not_found")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    folder = Path(tempfile.mkdtemp(prefix="seckill-console-"))
    folder.chmod(0o755)
    with running_up(folder, "--instances", "2", "--workers", "1", "--ip-rate", "off") as up:
        yield up


def purchases(stack: UpStack, aid: str, users: list[str]) -> list[int]:
    """Real buyers through nginx, a few at once: each one's final status."""
    statuses: list[int] = []

    def one(uid: str) -> None:
        token = user_token(uid)
        status, body = call(stack.port, "GET", f"/seckill/url?activity={aid}", token)
        if status == 200:
            status, _ = call(stack.port, "POST", body["url"], token)
        statuses.append(status)

    for start in range(0, len(users), 8):
        threads = [threading.Thread(target=one, args=(u,)) for u in users[start:start + 8]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    return statuses


def open_console(new_page: Callable[..., Any], stack: UpStack, width: int, height: int) -> Any:
    tab = new_page(viewport={"width": width, "height": height})
    tab.goto(f"{stack.admin_base}/admin/")
    tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
    tab.get_by_role("button", name="Open the console").click()
    return tab


def test_the_console_shows_a_live_sale_and_its_levers_work(stack: UpStack, new_page):
    from playwright.sync_api import expect as see

    aid = stack.create_activity(name="Phone X", total=40)
    other = stack.create_activity(name="Headphones", total=500)
    tab = open_console(new_page, stack, 1280, 900)
    card = tab.locator(f'li[data-activity="{aid}"]')
    see(card).to_contain_text("40 of 40 left")
    assert purchases(stack, aid, [f"buyer{n}" for n in range(25)]).count(200) == 25
    see(card).to_contain_text("15 of 40 left", timeout=10_000)
    # A crowd buying while the console watches: the chart's ok rate rises.
    crowd = threading.Thread(target=purchases,
                             args=(stack, other, [f"fan{n}" for n in range(300)]))
    crowd.start()
    try:
        see(tab.locator("#rates")).to_contain_text(re.compile(r"ok [1-9]"),
                                                   timeout=15_000)
    finally:
        crowd.join(120)
    see(card.get_by_role("progressbar")).to_have_attribute("aria-label",
                                                           "15 of 40 left")
    see(tab.locator("#instances")).to_contain_text("healthy")
    assert tab.locator("#instances .down").count() == 0
    for wave in range(3):  # waves of buyers, for the picture
        purchases(stack, other, [f"wave{wave}-{n}" for n in range(60 + 40 * wave)])
        tab.wait_for_timeout(1500)
    shoot(tab, "console.png")

    card.get_by_role("button", name="Pause").click()
    see(tab.locator("#announce")).to_contain_text("sale paused")
    see(card.locator(".badge")).to_have_text("paused")
    status, body = call(stack.port, "GET", f"/seckill/url?activity={aid}",
                        user_token("late"))
    assert (status, body["error"]) == (503, "paused")
    see(card.get_by_role("button", name="Pause")).to_be_disabled()
    card.get_by_role("button", name="Resume").click()
    see(card.locator(".badge")).to_have_text("open")
    # nginx repeats the "paused" it answered "late" above for the rest of that second
    # (docs/API.md): on sale for them again within two.
    deadline = time.monotonic() + 2
    bought = purchases(stack, aid, ["late"])
    while bought == [503] and time.monotonic() < deadline:
        time.sleep(0.05)
        bought = purchases(stack, aid, ["late"])
    assert bought == [200]
    tab.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="End now").click()
    see(card.locator(".badge")).to_have_text("ended")
    see(card.get_by_role("button", name="End now")).to_be_disabled()
    assert purchases(stack, aid, ["later"]) == [410]
    tab.close()

    phone = open_console(new_page, stack, 390, 844)
    see(phone.locator(f'li[data-activity="{other}"]')).to_contain_text("left")
    phone.wait_for_timeout(1200)
    shoot(phone, "console-phone.png", full_page=False)
    phone.close()


def test_a_wrong_token_is_refused_and_asked_again(stack: UpStack, new_page):
    from playwright.sync_api import expect as see

    tab = new_page()
    tab.goto(f"{stack.admin_base}/admin/")
    tab.get_by_label("Operator token").fill("not-the-token")
    tab.get_by_role("button", name="Open the console").click()
    see(tab.get_by_role("alert")).to_contain_text("refused")
    see(tab.get_by_label("Operator token")).to_be_focused()
    status, _ = call(stack.port, "GET", "/admin/")  # the public port: no console
    assert status == 404
