"""The sale page on queue and draw activities, in headless Chromium (Debian's ``chromium``
through Playwright, no download) against a real ``seckill up`` stack behind nginx.

Each user is a browser context of their own at a phone's viewport, with the browser's clock an
hour behind (the queue's countdowns must follow the server's). Where the roles must be known
in advance (who is admitted first, who is not drawn), the test reads the activity's secret
seed from Redis and orders the users with docs/clients.md's recipe
(:func:`tests.support.admission.independent_order`). Every page logs its own requests to the
queue (a wrapper around ``fetch``), so the tests also check the polling: one request at a
time, never sooner than the ``poll_after_ms`` of the answer before.

Screenshots go to ``test-artifacts/``; with ``SECKILL_DOCS_SCREENSHOTS=1`` the ones the README
shows are also written to ``docs/sale-page-queue-*.png``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from seckill.domain.clock import ms_from_iso
from tests.support.admission import independent_order
from tests.support.browser import skewed
from tests.support.cli import call
from tests.support.screenshots import ARTIFACTS
from tests.support.servers import REPO_ROOT
from tests.support.timing import iso
from tests.support.upstack import UpStack, running_up, user_token

ADMISSION_TTL = 5  # seconds (SECKILL_URL_TTL): long enough to click, short enough to lapse
PHONE = {"width": 390, "height": 844}
DOCS = REPO_ROOT / "docs"

# Logs every request of the page to its queue path: when it left and came back (the page's
# monotonic clock) and the poll_after_ms it was told.
FETCH_LOG = """
window.__queueLog = [];
const realFetch = window.fetch;
window.fetch = async function (input, init) {
  const url = String(input);
  const entry = { url, method: (init && init.method) || "GET", start: performance.now(),
                  end: null, pollAfter: null, status: null };
  if (/\\/queue$/.test(new URL(url, location.href).pathname)) window.__queueLog.push(entry);
  const response = await realFetch.apply(this, arguments);
  entry.end = performance.now();
  entry.status = response.status;
  response.clone().json().then((b) => { entry.pollAfter = b.poll_after_ms ?? null; },
                               () => {});
  return response;
};
"""

Tab = Any  # a Playwright Page (the sync API's, imported inside the fixtures)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    with running_up(tmp_path_factory.mktemp("up-queue-page"), "--instances", "2",
                    "--workers", "1", SECKILL_URL_TTL=str(ADMISSION_TTL)) as running:
        yield running


@pytest.fixture
def user_tab(new_page: Callable[..., Tab]) -> Callable[[], Tab]:
    """A factory of tabs, each in a browser context of its own (its own user)."""

    def open_tab() -> Tab:
        tab = skewed(new_page(viewport=PHONE, device_scale_factor=1))
        tab.add_init_script(FETCH_LOG)
        return tab

    return open_tab


def queued(stack: UpStack, admission: str, total: int, starts_in: float,
           opens_in: float = -1, **fields: Any) -> tuple[str, float]:
    """A queue or draw activity; its id and its start (epoch seconds)."""
    starts_at = iso(starts_in)
    aid = stack.create_activity(admission=admission, total=total, starts_at=starts_at,
                                queue_opens_at=iso(opens_in), **fields)
    return aid, ms_from_iso(starts_at, "starts_at") / 1000


def drawn_order(stack: UpStack, aid: str, uids: list[str]) -> list[str]:
    """The order the activity's secret seed gives to users who join before the start."""
    rdb = redis.Redis.from_url(stack.redis_url(), decode_responses=True)
    try:
        seed = rdb.hget(f"seckill:{{{aid}}}:meta", "draw_seed")
    finally:
        rdb.close()
    assert isinstance(seed, str) and len(seed) == 64, seed
    return independent_order(seed, uids)


def join_over_http(stack: UpStack, aid: str, uid: str) -> dict[str, Any]:
    status, body = call(stack.port, "POST", f"/seckill/{aid}/queue", user_token(uid), {})
    assert status == 200, body
    return dict(body)


def open_sale(tab: Tab, stack: UpStack, aid: str, uid: str) -> None:
    tab.goto(f"{stack.base}/#activity={aid}&token={user_token(uid)}")


def wait_until(epoch: float) -> None:
    time.sleep(max(0.0, epoch - time.time()))


def shoot(tab: Tab, name: str) -> None:
    """A screenshot into test-artifacts/, and into docs/ when asked."""
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if os.environ.get("SECKILL_DOCS_SCREENSHOTS") == "1":
        tab.screenshot(path=str(DOCS / name), full_page=True)


def requests_to_buy(tab: Tab) -> list[str]:
    sent: list[str] = []
    tab.on("request", lambda r: sent.append(r.url)
           if r.method == "POST" and r.url.endswith("/buy") else None)
    return sent


def check_polling(tab: Tab) -> list[dict[str, Any]]:
    """The page's requests to its queue: never two at once, and no poll sooner than the
    poll_after_ms the answer before it gave (a join is the user's click: not a poll)."""
    log: list[dict[str, Any]] = tab.evaluate("window.__queueLog")
    done = [e for e in log if e["end"] is not None]
    assert done, log
    for before, after in itertools.pairwise(done):
        assert after["start"] >= before["end"], ("overlap", before, after)
        if after["method"] == "GET" and before["pollAfter"] is not None:
            assert after["start"] - before["end"] >= before["pollAfter"] - 2, (before, after)
    return done


def progress(tab: Tab) -> Any:
    return tab.get_by_role("progressbar", name="Your way to the front")


def test_queue_opens_joins_waits_then_one_buys_and_the_other_sees_sold_out(
        stack: UpStack, user_tab: Callable[[], Tab]) -> None:
    """Two users, one unit. The queue opens in a few seconds, then the sale. Both join; before
    the start the page says the order is drawn then; at the start the first in the drawn
    order gets their turn and the other is number 1; the first buys, and the other's page says
    sold out at its next poll."""
    from playwright.sync_api import expect

    winner, waiter = user_tab(), user_tab()  # before the clock starts: a context takes time
    buys = {"winner": requests_to_buy(winner), "waiter": requests_to_buy(waiter)}
    aid, starts = queued(stack, "queue", total=1, starts_in=11, opens_in=4,
                         name="Phone X · queue")
    opens = starts - 7
    first, second = drawn_order(stack, aid, ["quinn", "quentin"])
    open_sale(winner, stack, aid, first)
    open_sale(waiter, stack, aid, second)

    for tab in (winner, waiter):
        expect(tab.locator("#queue-title")).to_have_text("Queue")
        expect(tab.locator("#queue-status")).to_have_text("The queue is not open yet.")
        expect(tab.locator("#queue-detail")).to_have_text(
            re.compile(r"^The queue opens in 00:0[0-4]\.$"))
        expect(tab.locator("#join")).to_have_text("Join the queue")
        expect(tab.locator("#join")).to_be_disabled()
        expect(tab.locator("#buy")).to_be_hidden()
        expect(progress(tab)).to_be_hidden()
    # The join button enables when the server's clock says the queue is open, not before.
    winner.wait_for_function("!document.getElementById('join').disabled", timeout=10_000,
                             polling=20)
    assert opens - 0.3 <= time.time() <= opens + 2.0, time.time() - opens
    expect(winner.locator("#state")).to_have_text("queue open")

    for tab in (winner, waiter):
        tab.locator("#join").click()
    for tab in (winner, waiter):
        expect(tab.locator("#queue-status")).to_have_text(
            "You are in the queue. The order is drawn at the start.")
        expect(tab.locator("#queue-detail")).to_have_text("Your place shows when the sale starts.")
        expect(tab.locator("#join")).to_be_hidden()
        expect(tab.locator("#countdown")).to_have_text(re.compile(r"^Starts in 00:00:0\d\.\d$"))
    expect(waiter.locator("#queue-counter")).to_have_text(
        "Right now: 2 waiting · 0 buying · 1 left", timeout=5_000)
    assert time.time() < starts, "joined after the start: the drawn order does not apply"
    shoot(waiter, "sale-page-queue-joined.png")

    # The start: the first of the drawn order has their turn, the other is next.
    expect(winner.locator("#queue-status")).to_have_text("Your turn! Buy now.", timeout=15_000)
    expect(winner.locator("#queue-detail")).to_have_text(re.compile(  # a turn ends on a second
        rf"^Your turn ends at \d\d:\d\d:\d\d UTC: 00:0[0-{ADMISSION_TTL + 1}] left to buy\.$"))
    expect(winner.locator("#buy")).to_be_enabled()
    expect(progress(winner)).to_have_attribute("aria-valuenow", "100")
    expect(waiter.locator("#queue-status")).to_have_text("You are in the queue.")
    expect(waiter.locator("#queue-detail")).to_have_text(
        re.compile(r"^You are number 1 in the queue · about \d+ s to go\.$"))
    expect(progress(waiter)).to_have_attribute("aria-valuenow", "0")
    expect(progress(waiter)).to_have_attribute("aria-valuetext", "number 1; 0 of 1 places moved")
    expect(waiter.locator("#buy")).to_be_hidden()

    winner.locator("#buy").dblclick()  # two clicks at once: one purchase
    outcome = winner.locator("#outcome")
    expect(outcome).to_have_text(re.compile(r"^You got it! Order \S+\.$"))
    bought_at = time.time()
    order_id = outcome.inner_text().removeprefix("You got it! Order ").removesuffix(".")
    expect(winner.locator("#order")).to_have_text(f"Order {order_id}: confirmed", timeout=20_000)
    expect(winner.locator("#queue-status")).to_have_text("You have bought in this sale.")

    # The waiter's next poll says sold out: the queue has closed; the place is kept.
    expect(waiter.locator("#queue-status")).to_have_text("Sold out: the queue has closed.",
                                                         timeout=5_000)
    assert time.time() - bought_at < 3.0, time.time() - bought_at
    expect(waiter.locator("#queue-detail")).to_have_text(
        "If units come back, you keep your place (number 1).")
    expect(waiter.locator("#countdown")).to_have_text("Sold out")
    expect(waiter.locator("#state")).to_have_text("sold out")
    expect(progress(waiter)).to_be_hidden()
    expect(waiter.locator("#queue-counter")).to_have_text(
        "Right now: 1 waiting · 0 buying · 0 left", timeout=10_000)
    shoot(waiter, "sale-page-queue-sold-out.png")

    assert len(buys["winner"]) == 1 and not buys["waiter"], buys
    for tab in (winner, waiter):
        log = check_polling(tab)
        assert [e["method"] for e in log].count("POST") == 1, log


def test_not_drawn_shows_the_place_on_the_waiting_list(
        stack: UpStack, user_tab: Callable[[], Tab]) -> None:
    from playwright.sync_api import expect

    tab = user_tab()
    aid, starts = queued(stack, "draw", total=1, starts_in=6, name="Sneakers · draw")
    *others, last = drawn_order(stack, aid, ["dana", "dario", "delia"])
    for uid in others:
        assert join_over_http(stack, aid, uid)["status"] == "waiting"
    open_sale(tab, stack, aid, last)
    expect(tab.locator("#queue-title")).to_have_text("Draw")
    expect(tab.locator("#queue-status")).to_have_text(
        "The draw is open: enter before the sale starts.")
    tab.locator("#join").click()  # the button reads "Enter the draw"
    expect(tab.locator("#queue-status")).to_have_text(
        "You are entered. The draw takes place at the start.")
    assert time.time() < starts, "entered after the start"

    expect(tab.locator("#queue-status")).to_have_text("You were not drawn.", timeout=15_000)
    expect(tab.locator("#queue-detail")).to_have_text(re.compile(
        r"^You are number 2 on the waiting list( · about \d+ s to go)?\. If a winner does not "
        r"buy in time, the next on the list gets a turn\.$"))
    expect(progress(tab)).to_have_attribute("aria-valuenow", "0")
    expect(tab.locator("#join")).to_be_hidden()  # the draw takes no more entries
    expect(tab.locator("#buy")).to_be_hidden()
    expect(tab.locator("#queue-counter")).to_have_text(
        "Right now: 2 waiting · 1 buying · 1 left", timeout=5_000)
    shoot(tab, "sale-page-queue-not-drawn.png")
    # Back later (before the winner's turn can lapse): the page asks and knows.
    tab.reload()
    expect(tab.locator("#queue-status")).to_have_text("You were not drawn.")
    check_polling(tab)


def test_a_turn_that_lapses_is_said_and_joining_again_gives_a_new_turn(
        stack: UpStack, user_tab: Callable[[], Tab]) -> None:
    """Xena and Yuri join before the start and never buy; Lea joins after it: number 2, then
    number 1 when the first turn lapses (the progress bar half way), then her turn when the
    second lapses (the bar full); hers lapses too, the page says so and offers to join again;
    she does, gets a turn at once (nobody else waits) and buys."""
    from playwright.sync_api import expect

    tab = user_tab()
    aid, starts = queued(stack, "queue", total=1, starts_in=1.5, name="Console · queue")
    for uid in ("xena", "yuri"):
        join_over_http(stack, aid, uid)
    wait_until(starts + 0.1)
    open_sale(tab, stack, aid, "lea")
    expect(tab.locator("#queue-status")).to_have_text("Join the queue to get your turn to buy.")
    tab.locator("#join").click()
    expect(tab.locator("#queue-detail")).to_have_text(
        re.compile(r"^You are number 2 in the queue · about \d+ s to go\.$"))
    expect(progress(tab)).to_have_attribute("aria-valuetext", "number 2; 0 of 2 places moved")
    expect(progress(tab)).to_have_attribute("aria-valuenow", "0")

    lapse = (ADMISSION_TTL + 5) * 1000  # a turn's length, and a poll or two
    expect(tab.locator("#queue-detail")).to_have_text(
        re.compile(r"^You are number 1 in the queue · about \d+ s to go\.$"), timeout=lapse)
    expect(progress(tab)).to_have_attribute("aria-valuetext", "number 1; 1 of 2 places moved")
    expect(progress(tab)).to_have_attribute("aria-valuenow", "50")
    expect(tab.locator("#queue-counter")).to_have_text(
        "Right now: 1 waiting · 1 buying · 1 left", timeout=5_000)
    shoot(tab, "sale-page-queue-waiting.png")

    expect(tab.locator("#queue-status")).to_have_text("Your turn! Buy now.", timeout=lapse)
    expect(progress(tab)).to_have_attribute("aria-valuenow", "100")
    expect(tab.locator("#buy")).to_be_enabled()
    expect(tab).to_have_title("Your turn! · Flash sale")
    expect(tab.locator("#queue-counter")).to_have_text(
        "Right now: 0 waiting · 1 buying · 1 left", timeout=5_000)
    shoot(tab, "sale-page-queue-your-turn.png")

    passed = "Your turn passed before you bought. Join again to queue at the back."
    expect(tab.locator("#queue-status")).to_have_text(passed, timeout=lapse)
    expect(tab.locator("#buy")).to_be_hidden()
    expect(tab.locator("#join")).to_be_enabled()
    expect(tab.locator("#join")).to_have_text("Join the queue")
    expect(tab).to_have_title("Flash sale")
    expect(tab.locator("#queue-counter")).to_have_text(
        "Right now: 0 waiting · 0 buying · 1 left", timeout=5_000)
    shoot(tab, "sale-page-queue-lapsed.png")

    tab.locator("#join").click()
    expect(tab.locator("#queue-status")).to_have_text("Your turn! Buy now.")
    tab.locator("#buy").click()
    expect(tab.locator("#outcome")).to_have_text(re.compile(r"^You got it! Order \S+\.$"))
    expect(tab.locator("#queue-status")).to_have_text("You have bought in this sale.")
    log = check_polling(tab)
    assert [e["method"] for e in log].count("POST") == 2, log


def test_the_vendored_widget_solves_the_gateways_challenge_and_the_user_joins(
        stack: UpStack, user_tab: Callable[[], Tab]) -> None:
    """A "challenge": true queue on the real stack: the page fetches the gateway's challenge,
    the vendored ALTCHA widget (served by nginx, no CDN) solves it in the browser, the join
    sends {"altcha": solution} and the gateway lets the user in. Without the solver the join
    goes without one: the gateway's 403 challenge_failed is said in words."""
    from playwright.sync_api import expect

    aid, _starts = queued(stack, "queue", total=1, starts_in=60, challenge=True)
    joins: list[tuple[Any, int]] = []
    tab = user_tab()
    tab.on("requestfinished", lambda r: joins.append(
        (json.loads(r.post_data or "null"), r.response().status))
        if r.method == "POST" and r.url.endswith(f"/seckill/{aid}/queue") else None)
    open_sale(tab, stack, aid, "cleo")
    tab.wait_for_function("typeof window.altchaSolve === 'function' && "
                          "customElements.get('altcha-widget') !== undefined")
    tab.locator("#join").click()
    expect(tab.locator("#queue-status")).to_contain_text("You are in the queue", timeout=30000)
    assert len(joins) == 1 and set(joins[0][0]) == {"altcha"} and joins[0][1] == 200, joins
    solution = json.loads(base64.b64decode(joins[0][0]["altcha"]))
    assert {"algorithm", "challenge", "number", "salt", "signature"} <= set(solution)
    assert f"aid={aid}" in solution["salt"] and "uid=cleo" in solution["salt"]

    other = user_tab()
    other.add_init_script("Object.defineProperty(window, 'altchaSolve', "
                          "{value: undefined, writable: false})")
    open_sale(other, stack, aid, "dora")
    other.locator("#join").click()
    words = "The anti-bot check did not pass (or it expired). Please try again."
    expect(other.locator("#outcome")).to_have_text(words)
    expect(other.locator("#join")).to_be_enabled()  # another try is allowed
