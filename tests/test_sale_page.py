"""The sale page in headless Chromium (Debian's ``chromium``, driven by Playwright for Python;
no browser download), served by nginx from ``seckill up`` with everything real behind it.

The browser's clock is set an hour behind: the countdown must follow the server's clock.
Screenshots go to ``test-artifacts/`` (git-ignored; CI keeps them as artifacts).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from seckill.domain.clock import ms_from_iso
from tests.support.browser import skewed
from tests.support.sale_page import buy_over_http, running_page_stack
from tests.support.screenshots import ARTIFACTS
from tests.support.timing import iso
from tests.support.upstack import UpStack, user_token


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    with running_page_stack(tmp_path_factory.mktemp("up-page")) as running:
        yield running


@pytest.fixture
def page(new_page: Callable[..., Any]) -> Any:
    return skewed(new_page(viewport={"width": 760, "height": 600}, device_scale_factor=1))


def purchases_of(tab: Any) -> list[str]:
    """Every purchase POST the page sends, from now on."""
    sent: list[str] = []
    tab.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    return sent


def screenshot(tab: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    tab.screenshot(path=str(path), full_page=True)
    return path


def test_countdown_then_one_purchase_confirmed(stack: UpStack, page: Any) -> None:
    from playwright.sync_api import expect

    starts_at = iso(8)
    aid = stack.create_activity(name="Phone X · flash sale", total=5, starts_at=starts_at)
    opens = ms_from_iso(starts_at, "starts_at") / 1000
    posts = purchases_of(page)
    page.goto(f"{stack.base}/#activity={aid}&token={user_token('alice')}")

    expect(page.locator("#name")).to_have_text("Phone X · flash sale")
    expect(page.locator("#remaining")).to_have_text("5")
    # Counting down from about eight seconds, on the server's clock: the browser's, an hour
    # behind, would say 01:00:08.
    expect(page.locator("#countdown")).to_have_text(re.compile(r"Starts in 00:00:0[0-8]\.\d"))
    expect(page.locator("#buy")).to_be_disabled()
    assert page.evaluate("Date.now()") / 1000 < time.time() - 3000  # the skew is real
    screenshot(page, "sale-page-countdown.png")

    # The button enables when the server says the sale is open, not before.
    page.wait_for_function("!document.getElementById('buy').disabled", timeout=20_000,
                           polling=20)
    enabled_at = time.time()
    assert opens - 0.3 <= enabled_at <= opens + 2.0, (enabled_at - opens)
    expect(page.locator("#countdown")).to_have_text("The sale is open!")

    page.locator("#buy").dblclick()  # two clicks at once: one purchase
    outcome = page.locator("#outcome")
    expect(outcome).to_have_text(re.compile(r"^You got it! Order \S+\.$"))
    order_id = outcome.inner_text().removeprefix("You got it! Order ").removesuffix(".")
    expect(page.locator("#buy")).to_be_disabled()
    # The orders worker stores it; the page polls until it says so.
    expect(page.locator("#order")).to_have_text(f"Order {order_id}: confirmed", timeout=20_000)
    expect(page.locator("#remaining")).to_have_text("4", timeout=10_000)
    page.locator("#buy").click(force=True)  # a click on the disabled button does nothing
    page.wait_for_timeout(500)
    assert len(posts) == 1 and posts[0].endswith("/buy"), posts
    screenshot(page, "sale-page.png")

    rdb = redis.Redis.from_url(stack.redis_url(), decode_responses=True)
    try:
        assert rdb.hgetall(f"seckill:{{{aid}}}:buyers").keys() == {"alice"}
    finally:
        rdb.close()

    # Back later: the page knows, and offers no second purchase.
    page.reload()
    expect(outcome).to_have_text(f"You already bought this one. Order {order_id}.")
    expect(page.locator("#order")).to_have_text(f"Order {order_id}: confirmed")
    expect(page.locator("#buy")).to_be_disabled()
    page.wait_for_timeout(300)
    assert len(posts) == 1, posts


def test_a_sold_out_sale_says_so(stack: UpStack, page: Any) -> None:
    from playwright.sync_api import expect

    aid = stack.create_activity(name="Last phone", total=1)
    buy_over_http(stack, aid, "bob")
    page.goto(f"{stack.base}/#activity={aid}&token={user_token('carol')}")
    expect(page.locator("#countdown")).to_have_text("Sold out")
    expect(page.locator("#state")).to_have_text("sold out")
    expect(page.locator("#remaining")).to_have_text("0")
    expect(page.locator("#buy")).to_be_disabled()
    screenshot(page, "sale-page-sold-out.png")


def test_sold_out_between_loading_and_clicking_is_said_in_words(
    stack: UpStack, page: Any
) -> None:
    from playwright.sync_api import expect

    aid = stack.create_activity(name="One phone", total=1)
    posts = purchases_of(page)
    page.goto(f"{stack.base}/#activity={aid}&token={user_token('dave')}")
    expect(page.locator("#buy")).to_be_enabled()
    buy_over_http(stack, aid, "eve")  # the last unit goes while dave looks at the page
    page.locator("#buy").click(timeout=2_000)  # the page refreshes only every 2 s
    expect(page.locator("#outcome")).to_have_text("Sold out. Better luck next time.")
    expect(page.locator("#buy")).to_be_disabled()
    expect(page.locator("#countdown")).to_have_text("Sold out", timeout=10_000)
    assert len(posts) <= 1, posts  # a URL refused at the edge, or one purchase refused by Lua


def test_no_token_no_button(stack: UpStack, page: Any) -> None:
    from playwright.sync_api import expect

    aid = stack.create_activity(name="Phone", total=3)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"{stack.base}/#activity={aid}")
    expect(page.locator("#countdown")).to_have_text("The sale is open!")
    expect(page.locator("#hint")).to_have_text("Sign in to the shop to buy.")
    expect(page.locator("#buy")).to_be_disabled()
    expect(page.locator("#queue")).to_be_hidden()  # first come: no queue on the page
    # A shopper sees no developer text: no settings, no token field, no clock details.
    for words in ("Demo settings", "token", "JWT", "Server clock", "your clock", "Activity "):
        assert words not in page.locator("body").inner_text(), words
    expect(page.locator("#debug")).to_be_hidden()
    # With ?debug=1 a developer enters a token by hand instead.
    page.goto(f"{stack.base}/?debug=1#activity={aid}")
    expect(page.locator("#hint")).to_have_text("Enter a user token under Demo settings to buy.")
    expect(page.locator("#offset")).to_have_text(re.compile("your clock is"))
    page.locator("#setup summary").click()
    page.locator("#token-input").fill(user_token("frank"))
    page.locator("#apply").click()
    expect(page.locator("#buy")).to_be_enabled()
    page.locator("#buy").click()
    expect(page.locator("#outcome")).to_have_text(re.compile(r"^You got it! Order \S+\.$"))
    expect(page.locator("#queue")).to_be_hidden()
    assert not [u for u in asked if re.search(r"/seckill/[^/]+/queue", u)], asked  # nor asks


def test_pay_by_counts_down_and_an_unpaid_order_is_said_to_have_expired(
    stack: UpStack, page: Any
) -> None:
    """A payment window of 4 s: after the purchase the page shows "pay by" with the time left
    on the server's clock; nobody pays, the stack's worker expires the order, and the page
    says what happened; back later, it offers no second purchase."""
    from playwright.sync_api import expect

    aid = stack.create_activity(name="Held phone", total=1, payment_window=4)
    page.goto(f"{stack.base}/#activity={aid}&token={user_token('gina')}")
    page.locator("#buy").click()
    expect(page.locator("#outcome")).to_have_text(re.compile(r"^You got it! Order \S+\.$"))
    payment = page.locator("#payment")
    expect(payment).to_have_text(re.compile(r"^Pay by \d\d:\d\d:\d\d UTC: 00:0[0-4] left$"))
    expect(page.locator("#order")).to_have_text(re.compile(r": confirmed, payment due$"),
                                                timeout=10_000)
    screenshot(page, "sale-page-pay-by.png")
    expect(page.locator("#outcome")).to_have_text(
        "Your payment window ran out: the order was cancelled and its units went back on "
        "sale.", timeout=15_000)
    expect(page.locator("#order")).to_have_text(re.compile(r": cancelled, payment expired$"))
    expect(payment).to_have_text("")
    expect(page.locator("#remaining")).to_have_text("1", timeout=10_000)
    screenshot(page, "sale-page-expired.png")

    page.reload()
    expect(page.locator("#order")).to_have_text(re.compile(r": cancelled, payment expired$"))
    expect(page.locator("#buy")).to_be_disabled()
