"""The sale page on an activity with variants, in headless Chromium against a real
``seckill up`` (nginx, one gateway instance, Valkey): the picker offers each variant with its
units left and shows a sold-out one as gone and not selectable; the page buys the chosen
variant (``?variant=<vid>``, no body) and says which one was won; a variant that sells out between
the look and the click is said in words, shown gone (also while nginx's one-second cache still
says otherwise) and the buyer chooses another. And the refusals every activity may give now:
a blocked account and an unverified one on a sale limited per person are said in words.

Screenshots go to ``test-artifacts/``; with ``SECKILL_DOCS_SCREENSHOTS=1`` also to ``docs/``.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge.identity import mint_user_token
from seckill.ops.stack.ports import free_listen_port
from tests.support.browser import skewed
from tests.support.cli import call
from tests.support.screenshots import ARTIFACTS
from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET
from tests.support.upstack import UpStack, running_up, user_token

DOCS = ARTIFACTS.parent / "docs"
CLAIM = "person_id"  # SECKILL_PERSON_CLAIM of this stack
SIZES = [{"id": "eu40", "name": "EU 40"}, {"id": "eu41", "name": "EU 41"},
         {"id": "eu42", "name": "EU 42"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    # The per-IP rate at its default (20r/s), as test_sale_page's: the page must live within it.
    folder = Path(tempfile.mkdtemp(prefix="seckill-variants-page-"))
    folder.chmod(0o755)
    with running_up(folder, "--instances", "1", "--workers", "1",
                    SECKILL_PERSON_CLAIM=CLAIM) as running:
        yield running


@pytest.fixture
def tab(new_page: Callable[..., Any]) -> Any:
    return skewed(new_page(viewport={"width": 390, "height": 844}, device_scale_factor=1))


def shoot(tab: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if os.environ.get("SECKILL_DOCS_SCREENSHOTS") == "1":
        tab.screenshot(path=str(DOCS / name), full_page=True)


def create(stack: UpStack, **fields: Any) -> str:
    body = {"id": f"pv{free_listen_port()}", "name": "Sneaker", "starts_at": iso(-5),
            "ends_at": iso(3600), **fields}
    status, made = call(stack.admin_port, "POST", "/admin/activities", ADMIN_TOKEN, body)
    assert status == 201, made
    return str(body["id"])


def sizes(**totals: int) -> list[dict[str, Any]]:
    return [{**s, "total": totals[s["id"]]} for s in SIZES if s["id"] in totals]


def buy_variant(stack: UpStack, aid: str, uid: str, vid: str) -> dict[str, Any]:
    token = user_token(uid)
    status, issued = call(stack.port, "GET", f"/seckill/url?activity={aid}", token)
    assert status == 200, issued
    status, bought = call(stack.port, "POST", issued["url"], token, {"variant": vid})
    assert status == 200, bought
    return dict(bought)


def purchase_terms(tab: Any) -> list[Any]:
    """The terms of every purchase the page sends, from now on: its query, and its body (the
    page sends none: a request without a body costs the gateway less)."""
    sent: list[Any] = []

    def record(r: Any) -> None:
        path, _, query = r.url.partition("?")
        if r.method == "POST" and path.endswith("/buy"):
            sent.append((query, r.post_data or None))
    tab.on("request", record)
    return sent


def option(tab: Any, vid: str) -> Any:
    return tab.locator(f'#variants input[value="{vid}"]')


def test_the_picker_shows_each_variant_and_its_units_and_buys_the_chosen_one(
        stack: UpStack, tab: Any) -> None:
    from playwright.sync_api import expect

    aid = create(stack, variants=sizes(eu40=1, eu41=3, eu42=2))
    buy_variant(stack, aid, "pick-early", "eu40")  # EU 40 is gone before the page opens
    terms = purchase_terms(tab)
    tab.goto(f"{stack.base}/#activity={aid}&token={user_token('pick-ann')}")

    expect(tab.locator("#variants")).to_be_visible()
    radios = tab.get_by_role("radio")
    expect(radios).to_have_count(3)
    expect(tab.get_by_role("radio", name="EU 40, gone")).to_be_disabled()
    expect(tab.get_by_role("radio", name="EU 41, 3 left")).to_be_enabled()
    expect(tab.get_by_role("radio", name="EU 42, 2 left")).to_be_enabled()
    expect(tab.locator('#variants label[data-variant="eu40"]')).to_have_class(
        re.compile(r"\bgone\b"))
    expect(tab.locator("#remaining")).to_have_text("5")  # the activity's: the sum
    # Nothing chosen yet: no purchase, and the page says what to do.
    buy = tab.locator("#buy")
    expect(buy).to_be_disabled()
    expect(tab.locator("#hint")).to_have_text("Choose one above to buy.")
    option(tab, "eu40").click(force=True)  # a click on the gone one chooses nothing
    expect(buy).to_be_disabled()
    shoot(tab, "sale-page-variants.png")

    tab.get_by_text("EU 41").click()
    expect(option(tab, "eu41")).to_be_checked()
    expect(buy).to_be_enabled()
    buy.click()
    outcome = tab.locator("#outcome")
    expect(outcome).to_have_text(re.compile(r"^You got it! Order \S+: EU 41\.$"))
    order_id = outcome.inner_text().removeprefix("You got it! Order ").split(":")[0]
    assert terms == [("variant=eu41", None)], terms
    expect(tab.locator("#order")).to_have_text(f"Order {order_id} (EU 41): confirmed",
                                               timeout=20_000)
    expect(tab.get_by_role("radio", name="EU 41, 2 left")).to_be_visible(timeout=10_000)
    shoot(tab, "sale-page-variants-won.png")
    status, order = call(stack.port, "GET", f"/seckill/{aid}/order", user_token("pick-ann"))
    assert (status, order["order_id"], order["items"]) == (
        200, order_id, [{"variant": "eu41", "quantity": 1}])


RECORD_DISABLED = """(vid) => { window.__disabled = [];
  const input = document.querySelector(`#variants input[value="${vid}"]`);
  new MutationObserver(() => window.__disabled.push(input.disabled))
    .observe(input, {attributes: true});
  window.__views = 0;
  const fetched = window.fetch;
  window.fetch = (...args) => fetched(...args).then((r) => {
    if (String(args[0]).startsWith('/seckill/activities/')) window.__views += 1;
    return r; }); }"""


def test_a_variant_sold_out_between_looking_and_clicking(stack: UpStack, tab: Any) -> None:
    from playwright.sync_api import expect

    aid = create(stack, variants=sizes(eu40=1, eu41=2))
    terms = purchase_terms(tab)
    tab.goto(f"{stack.base}/#activity={aid}&token={user_token('race-bo')}")
    tab.get_by_role("radio", name="EU 40, 1 left").check()
    buy = tab.locator("#buy")
    expect(buy).to_be_enabled()
    tab.evaluate(RECORD_DISABLED, "eu40")
    # nginx now caches "EU 40: 1 left" for a second; its last unit goes meanwhile.
    view = call(stack.port, "GET", f"/seckill/activities/{aid}")[1]
    assert view["variants"][0]["remaining"] == 1, view
    buy_variant(stack, aid, "race-cy", "eu40")
    buy.click()

    expect(tab.locator("#outcome")).to_have_text(
        "EU 40 has just sold out. Please choose another.")
    gone = tab.get_by_role("radio", name="EU 40, gone")
    expect(gone).to_be_disabled()
    expect(gone).not_to_be_checked()
    expect(buy).to_be_disabled()
    expect(tab.locator("#hint")).to_have_text("Choose one above to buy.")
    # The page's next looks (one at once, through the cache, then every 2 s) never offer it
    # again: the cached view's "1 left" is older than what the purchase said.
    tab.wait_for_function("window.__views >= 2", timeout=10_000)
    assert tab.evaluate("window.__disabled").count(False) == 0, tab.evaluate("window.__disabled")
    expect(gone).to_be_disabled()
    shoot(tab, "sale-page-variant-sold-out.png")

    tab.get_by_role("radio", name="EU 41, 2 left").check()
    buy.click()
    expect(tab.locator("#outcome")).to_have_text(re.compile(r"^You got it! Order \S+: EU 41\.$"))
    assert terms == [("variant=eu40", None), ("variant=eu41", None)], terms


def test_blocked_and_unverified_buyers_are_told_why(stack: UpStack, tab: Any) -> None:
    from playwright.sync_api import expect

    aid = create(stack, total=3)
    made = call(stack.admin_port, "POST", "/admin/blocks", ADMIN_TOKEN,
                {"user": "blk-mo", "activity": aid, "reason": "chargebacks"})
    assert made[0] == 201, made
    token = user_token("blk-mo")
    deadline = time.monotonic() + 5  # every process within a second (the contract)
    while call(stack.port, "GET", f"/seckill/url?activity={aid}", token)[1].get("error") \
            != "blocked":
        assert time.monotonic() < deadline, "the block never took effect"
        time.sleep(0.05)
    tab.goto(f"{stack.base}/#activity={aid}&token={token}")
    expect(tab.locator("#variants")).to_be_hidden()  # one item: no picker
    tab.locator("#buy").click()
    expect(tab.locator("#outcome")).to_have_text(
        "The shop has refused purchases from this account. If you think this is a mistake, "
        "please contact the shop.")
    expect(tab.locator("#buy")).to_be_disabled()  # asking again would only be refused again

    person = create(stack, total=3, limit_by="person")
    tab.goto("about:blank")  # a new fragment alone would be a hashchange: a fresh page
    tab.goto(f"{stack.base}/#activity={person}&token={user_token('unverified-ned')}")
    # Said on arrival (the order status answers 403 verification_required), not after a click.
    expect(tab.locator("#outcome")).to_have_text(
        "This sale needs a verified account: one purchase per person, not per account. "
        "Verify your account with the shop, then come back.")
    expect(tab.locator("#buy")).to_be_disabled()
    shoot(tab, "sale-page-verification-required.png")
    verified = mint_user_token("verified-ola", JWT_SECRET, 3600, claims={CLAIM: "ola-1"})
    tab.goto("about:blank")
    tab.goto(f"{stack.base}/#activity={person}&token={verified}")
    expect(tab.locator("#buy")).to_be_enabled()
    expect(tab.locator("#outcome")).to_have_text("")
