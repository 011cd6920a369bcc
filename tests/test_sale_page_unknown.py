"""The sale page when a purchase's answer is lost, in headless Chromium on a
real nginx -> relay -> gunicorn -> Valkey chain (tests/support/fault_front.py).

A purchase answered 502/503/504, or not at all, has an unknown outcome: the page asks the
order status before it shows anything, shows the win when the order exists (here it stays
"pending": no orders worker runs, as when the worker is the part that died), says so plainly
when the outcome is not known yet (buying again is safe), and never sits on "loading…" with a
grey button. Screenshots go to ``docs/``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.browser import skewed
from tests.support.cli import call
from tests.support.fault_front import PURCHASE, FaultFront, fault_front
from tests.support.servers import REPO_ROOT
from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN
from tests.support.upstack import user_token

DOCS = REPO_ROOT / "docs"
PHONE = {"width": 390, "height": 844}
ORDER_STATUS = re.compile(rb"^GET /seckill/[^/]+/order")
WON = re.compile(r"^You got it! Order (\S+)\.$")


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultFront]:
    with fault_front(tmp_path_factory.mktemp("sale-faults")) as running:
        yield running


@pytest.fixture
def tab(new_page: Callable[..., Any], front: FaultFront) -> Iterator[Any]:
    yield skewed(new_page(viewport=PHONE, device_scale_factor=1))
    front.relay.heal()


def port(base: str) -> int:
    return int(urlsplit(base).port or 0)


def activity(front: FaultFront, **fields: Any) -> str:
    body = {"id": f"u{uuid.uuid4().hex[:10]}", "name": "Phone X", "total": 5,
            "starts_at": iso(-5), "ends_at": iso(3600), **fields}
    status, made = call(port(front.admin_base), "POST", "/admin/activities", ADMIN_TOKEN, body)
    assert status == 201, made
    return str(body["id"])


def order_of(front: FaultFront, aid: str, uid: str) -> dict[str, Any]:
    status, body = call(port(front.base), "GET", f"/seckill/{aid}/order", user_token(uid))
    assert status == 200, body
    return dict(body)


def shot(page: Any, name: str) -> Path:
    DOCS.mkdir(exist_ok=True)
    path = DOCS / f"sale-page-phone-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_a_decided_purchase_whose_answer_was_lost_shows_the_win(front: FaultFront,
                                                                tab: Any) -> None:
    from playwright.sync_api import expect

    aid = activity(front)
    tab.goto(f"{front.base}/#activity={aid}&token={user_token('lost-answer')}")
    buy = tab.get_by_role("button", name="Buy now")
    expect(buy).to_be_enabled(timeout=10_000)
    front.relay.lose = PURCHASE  # the instance decides, its answer never reaches nginx
    buy.click()
    outcome = tab.locator("#outcome")
    # Pending (decided, not yet stored: no worker here) is a win: the order exists.
    expect(outcome).to_have_text(WON, timeout=10_000)
    assert len(front.relay.lost) == 1, front.relay.lost
    stored = order_of(front, aid, "lost-answer")
    assert stored["status"] == "pending", stored
    assert outcome.inner_text() == f"You got it! Order {stored['order_id']}."
    expect(buy).to_be_disabled()


def test_when_the_order_status_cannot_be_read_either_it_says_the_outcome_is_unknown(
        front: FaultFront, tab: Any) -> None:
    """The purchase's answer is lost and the order status fails too: after a few tries the
    page says it does not know yet and that trying again is safe, with a live button; the
    second click (the shop back) answers already_purchased with the same order."""
    from playwright.sync_api import expect

    aid = activity(front)
    tab.goto(f"{front.base}/#activity={aid}&token={user_token('in-the-dark')}")
    buy = tab.locator("#buy")  # its name changes to "Try again"
    expect(buy).to_be_enabled(timeout=10_000)
    front.relay.lose = PURCHASE
    front.relay.refuse = ORDER_STATUS
    buy.click()
    outcome = tab.locator("#outcome")
    expect(outcome).to_have_text(re.compile("checking", re.IGNORECASE))
    expect(outcome).to_have_text(re.compile(r"not know(n)? yet.*safe", re.IGNORECASE),
                                 timeout=20_000)
    assert len(front.relay.refused) >= 3, front.relay.refused  # it asked more than once
    expect(buy).to_be_enabled(timeout=3_000)
    expect(buy).to_have_text(re.compile("try again", re.IGNORECASE))
    shot(tab, "unknown")
    front.relay.heal()
    buy.click()
    stored = order_of(front, aid, "in-the-dark")
    expect(outcome).to_have_text(f"You already bought this one. Order {stored['order_id']}.")


def test_nothing_decided_says_try_again_not_loading(front: FaultFront, tab: Any) -> None:
    from playwright.sync_api import expect

    aid = activity(front)
    tab.goto(f"{front.base}/#activity={aid}&token={user_token('not-sent')}")
    buy = tab.get_by_role("button", name="Buy now")
    expect(buy).to_be_enabled(timeout=10_000)
    front.relay.refuse = PURCHASE  # cut before the instance sees it: nothing decided
    buy.click()
    outcome = tab.locator("#outcome")
    expect(outcome).to_have_text(re.compile("did not go through.*try again", re.IGNORECASE),
                                 timeout=10_000)
    assert order_of(front, aid, "not-sent")["status"] == "none"
    expect(buy).to_be_enabled(timeout=3_000)
    front.relay.heal()
    buy.click()
    expect(outcome).to_have_text(WON)


def test_a_page_opened_while_the_shop_is_unreachable_says_so_and_recovers(
        front: FaultFront, tab: Any) -> None:
    """Every call of the page fails at first (the instance gone): the page says it cannot
    reach the shop and keeps trying, rather than "loading…" and a grey button forever; once
    the shop answers, the sale shows and the button works."""
    from playwright.sync_api import expect

    aid = activity(front)
    front.relay.refuse = re.compile(rb"^GET /seckill/")
    tab.goto(f"{front.base}/#activity={aid}&token={user_token('early-bird')}")
    state = tab.locator("#state")
    expect(tab.locator("#countdown")).to_have_text(re.compile("cannot reach the shop",
                                                              re.IGNORECASE), timeout=15_000)
    assert state.inner_text() != "loading…"
    shot(tab, "unreachable")
    front.relay.heal()
    expect(state).to_have_text("open", timeout=15_000)
    buy = tab.get_by_role("button", name="Buy now")
    expect(buy).to_be_enabled()
    buy.click()
    expect(tab.locator("#outcome")).to_have_text(WON)
