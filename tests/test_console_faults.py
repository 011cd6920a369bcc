"""The operator console during faults: it shows what is true.

The state endpoint with its Redis stopped says the numbers are stale (since when, and why) and
keeps the last ones read, rather than an empty list that reads "no activity"; in headless
Chromium, on nginx -> relay -> gunicorn (tests/support/fault_front.py): an instance that does not
answer is down, nginx's own 502s are a series on the chart, a failed lever says the
operator's message (not the buyer's), a stopped Redis greys the numbers with "stale since",
the page runs under its Content-Security-Policy without a violation, and cannot be framed.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.api import create_activity, expect
from tests.support.cli import call
from tests.support.fault_front import PURCHASE, FaultFront, fault_front
from tests.support.screenshots import shoot
from tests.support.timing import iso
from tests.support.tokens import ADMIN, ADMIN_TOKEN, METRICS
from tests.support.upstack import user_token

# Every Content-Security-Policy violation the page meets, from its first script on.
WATCH_CSP = """window.__csp = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"""


def ids(state: dict[str, Any]) -> set[str]:
    return {a["id"] for a in state["activities"]}


def test_with_redis_stopped_the_state_says_stale_and_keeps_the_last_numbers(
        make_app: Any, private_valkey: Any) -> None:
    app = make_app(REDIS_URL=private_valkey.url)
    client = app.test_client()
    aid = create_activity(client, name="Phone X", total=3)["id"]
    fresh = expect(client.get("/admin/console/state", headers=ADMIN), 200)
    assert aid in ids(fresh)
    assert (fresh["stale"], fresh["stale_since"], fresh["stale_reason"]) == (False, None, None)
    assert [(n["role"], n["ok"]) for n in fresh["redis_nodes"]] == [("server", True)]
    private_valkey.stop()
    deadline = time.monotonic() + 10
    state = fresh
    while not state.get("stale") and time.monotonic() < deadline:
        time.sleep(0.2)  # the census is kept for a second
        state = expect(client.get("/admin/console/state", headers=ADMIN), 200)
    assert state.get("stale") is True, state
    assert aid in ids(state)  # the last numbers read, not "no activities"
    row = next(a for a in state["activities"] if a["id"] == aid)
    assert (row["remaining"], row["total"]) == (3, 3)
    assert fresh["now_ms"] <= state["stale_since"] < state["now_ms"]
    assert state["redis_up"] is False
    assert state["redis_nodes"][0]["ok"] is False
    assert "ConnectionError" in state["stale_reason"], state["stale_reason"]
    # /metrics does not pass the old numbers off as current.
    metrics = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    assert "seckill_redis_up 0.0" in metrics
    assert f'seckill_activity_sold{{activity="{aid}"}}' not in metrics


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultFront]:
    with fault_front(tmp_path_factory.mktemp("console-faults")) as running:
        yield running


@pytest.fixture
def tab(new_page: Callable[..., Any], front: FaultFront) -> Iterator[Any]:
    page = new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(WATCH_CSP)
    try:
        yield page
    finally:
        front.relay.heal()


def port(base: str) -> int:
    return int(urlsplit(base).port or 0)


def activity(front: FaultFront, name: str, total: int) -> str:
    body = {"id": f"c{time.monotonic_ns() % 10**10}", "name": name, "total": total,
            "starts_at": iso(-5), "ends_at": iso(3600)}
    status, made = call(port(front.admin_base), "POST", "/admin/activities", ADMIN_TOKEN, body)
    assert status == 201, made
    return str(body["id"])


def purchase(front: FaultFront, aid: str, uid: str) -> int:
    token = user_token(uid)
    status, issued = call(port(front.base), "GET", f"/seckill/url?activity={aid}", token)
    if status != 200:
        return status
    return call(port(front.base), "POST", issued["url"], token)[0]


def sign_in(tab: Any, front: FaultFront) -> None:
    tab.goto(f"{front.admin_base}/admin/")
    tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
    tab.get_by_role("button", name="Open the console").click()


def test_the_console_tells_the_truth_during_faults(front: FaultFront, tab: Any) -> None:
    from playwright.sync_api import expect as see

    aid = activity(front, "Phone X", 5)
    assert purchase(front, aid, "first") == 200
    sign_in(tab, front)
    card = tab.locator(f'li[data-activity="{aid}"]')
    see(card).to_contain_text("4 of 5 left")
    instances = tab.locator("#instances")
    see(instances.locator("li", has_text=front.instance)).to_contain_text("healthy")
    see(instances.locator("li", has_text=front.dead_instance)).to_contain_text("down")
    see(tab.locator("#redis")).to_contain_text(re.compile(r"127\.0\.0\.1:\d+ \(server\): up"))

    # nginx's own 502s (no instance answered) are a series of the chart.
    front.relay.refuse = PURCHASE
    deadline = time.monotonic() + 20
    rates = tab.locator("#rates")
    while time.monotonic() < deadline and not re.search(r"nginx 502/504 [1-9]",
                                                        rates.inner_text()):
        assert purchase(front, aid, f"refused-{time.monotonic_ns()}") == 502
        tab.wait_for_timeout(200)
    see(rates).to_contain_text(re.compile(r"nginx 502/504 [1-9]"))
    see(tab.locator(".u-legend")).to_contain_text("nginx 502/504")

    # A lever whose answer is lost: the operator's words, not a buyer's.
    front.relay.refuse = re.compile(rb"^POST /admin/activities/[^/]+/pause")
    card.get_by_role("button", name="Pause").click()
    see(tab.locator("#announce")).to_contain_text(
        "the gateway did not answer (502): the pause may not have been applied; reload to see")
    front.relay.heal()

    # Redis stopped: the last numbers stay, greyed, with "stale since"; Redis is DOWN.
    front.valkey.stop()
    see(tab.locator("#stale")).to_contain_text(re.compile(r"Data stale since \d"),
                                               timeout=10_000)
    see(tab.locator("#redis")).to_contain_text("DOWN")
    see(card).to_contain_text("4 of 5 left")
    see(tab.locator("#no-activities")).to_be_hidden()
    see(tab.locator("#console")).to_have_class(re.compile(r"\bstale\b"))
    card.get_by_role("button", name="Pause").click()
    announce = tab.locator("#announce")
    see(announce).to_contain_text("Redis")
    assert "order status" not in announce.inner_text()
    tab.wait_for_timeout(1200)
    shoot(tab, "console-stale.png")

    # The gateway itself gone quiet: stale too, and says so.
    front.relay.refuse = re.compile(rb"^GET /admin/console/state")
    see(tab.locator("#stale")).to_contain_text("the gateway did not answer (502)",
                                               timeout=10_000)
    front.relay.heal()
    front.valkey.start()
    see(tab.locator("#stale")).to_be_hidden(timeout=15_000)
    see(tab.locator("#redis")).to_contain_text("up")
    see(tab.locator("#console")).not_to_have_class(re.compile(r"\bstale\b"))
    assert tab.evaluate("window.__csp") == []


def test_an_inconsistent_activity_gets_a_red_badge(front: FaultFront, tab: Any) -> None:
    """The state's ``inconsistent`` flag as the page shows
    it; here the state is the real one with the flag added on its way to the page."""
    from playwright.sync_api import expect as see

    aid = activity(front, "Headphones", 3)

    def flagged(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        for row in body["activities"]:
            row["inconsistent"] = row["id"] == aid
        route.fulfill(response=response, json=body)

    tab.route("**/admin/console/state", flagged)
    sign_in(tab, front)
    card = tab.locator(f'li[data-activity="{aid}"]')
    see(card.locator(".alarm")).to_have_text(
        "counters inconsistent: run seckill reconcile --repair")
    assert tab.locator(".alarm:visible").count() == 1  # only that one


def test_the_console_cannot_be_framed_and_says_its_policy(front: FaultFront, tab: Any) -> None:
    for name in ("", "console/console.js", "console/console.css",
                 "console/vendor/uPlot.iife.min.js"):
        with urllib.request.urlopen(f"{front.admin_base}/admin/{name}", timeout=10) as got:
            policy = got.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy, name
            assert got.headers["X-Frame-Options"] == "DENY", name
    with urllib.request.urlopen(f"{front.base}/", timeout=10) as got:
        assert "frame-ancestors 'none'" in got.headers["Content-Security-Policy"]
        assert got.headers["X-Frame-Options"] == "DENY"
    tab.goto(f"{front.base}/")  # another origin (the public port) tries to frame it
    tab.set_content(f'<iframe id="f" src="{front.admin_base}/admin/"></iframe>')
    tab.wait_for_timeout(1000)
    framed = [f for f in tab.frames if f != tab.main_frame]
    assert framed and all(f.query_selector("#login") is None for f in framed)
