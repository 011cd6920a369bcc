"""The crowd's rejections at nginx's price (issue #25): nginx's edge cache, real nginx in front
of two real gunicorn instances.

* Each activity-level refusal of ``GET /seckill/url`` (``sold_out``, ``ended``,
  ``not_started``, ``paused``, ``unknown_activity``) and of the purchase (the same but
  ``sold_out``) is answered by nginx after the gateway gave it once, byte for byte the
  gateway's, for at most the rest of that second, to anybody (a request without a token too).
* Nothing that depends on the user ever is (a test per answer), a winner's repeated purchase
  after the sell-out among them.
* An odd spelling of the path or the query is never looked up nor stored.
* A ``not_started`` copy never outlives ``starts_at``, and its ``now_ms`` is nginx's clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from tests import test_nginx as nginx_tests
from tests.conftest import ADMIN, iso
from tests.servers import NginxFront
from tests.test_nginx import Answer, Instances, bearer, call, create_activity, front

instances = nginx_tests.instances
http = nginx_tests.http

HIT = "HIT"


@pytest.fixture
def proxy(instances: Instances, tmp_path: Path) -> Iterator[NginxFront]:
    with front(instances, tmp_path, ip_rate="off") as running:
        yield running


def new_user(name: str = "u") -> dict[str, str]:
    return bearer(f"{name}-{uuid.uuid4().hex[:8]}")


def url_of(proxy: NginxFront, aid: str) -> str:
    return f"{proxy.base}/seckill/url?activity={aid}"


def signed_url(http: urllib3.PoolManager, proxy: NginxFront, aid: str,
               user: dict[str, str]) -> str:
    issued = call(http, "GET", url_of(proxy, aid), user)
    assert issued.status == 200, issued.body
    return f"{proxy.base}{issued.body['url']}"


def admin(http: urllib3.PoolManager, proxy: NginxFront, method: str, path: str,
          body: bytes | None = None) -> Answer:
    headers = {**ADMIN, "Content-Type": "application/json"} if body else ADMIN
    return call(http, method, f"{proxy.admin_base}{path}", headers, body)


def from_nginx(http: urllib3.PoolManager, method: str, url: str, status: int, error: str,
               tries: int = 5) -> Answer:
    """nginx's copy of an answer: asked by a user, then by nobody (no token) until the copy
    comes from the cache (a new second may begin between the two: then it is stored anew)."""
    first = call(http, method, url, new_user())
    assert (first.status, first.body.get("error")) == (status, error), first.body
    for _ in range(tries):
        again = call(http, method, url)  # no token at all
        if again.headers.get("X-Cache") == HIT:
            return again
        time.sleep(0.05)
    raise AssertionError(f"{method} {url}: never answered from nginx's cache")


def from_gateway(http: urllib3.PoolManager, instances: Instances, method: str, url: str,
                 error: str) -> Answer:
    """The same request sent to an instance straight, with a user's token (once the
    instance, too, knows the activity's new state: it hears of it within a second)."""
    path = "/" + url.split("/", 3)[3]
    deadline = time.monotonic() + 5
    while (answer := call(http, method, f"http://{instances.backends[0]}{path}",
                          new_user())).body.get("error") != error:
        assert time.monotonic() < deadline, answer.body
        time.sleep(0.05)
    return answer


def same_answer(gateway: Answer, copy: Answer) -> None:
    """The copy is the gateway's answer: status, body, and the contract's headers."""
    assert copy.status == gateway.status
    assert copy.body == gateway.body
    for name in ("Content-Type", "Retry-After", "X-Seckill-Outcome"):
        assert copy.headers.get(name) == gateway.headers.get(name), name
    for name in ("X-Accel-Expires", "X-Seckill-Now-Ms"):  # for nginx, never the client
        assert name not in copy.headers


# -- what nginx repeats ----------------------------------------------------------------------


def test_the_url_of_a_sold_out_activity_is_nginxs_even_without_a_token(
        http, proxy, instances) -> None:
    aid = create_activity(http, proxy.admin_base, total=1)
    winner = new_user("winner")
    assert call(http, "POST", signed_url(http, proxy, aid, winner), winner).status == 200
    deadline = time.monotonic() + 5  # the other instance learns of the sell-out
    while call(http, "GET", url_of(proxy, aid), new_user()).status != 410:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    copy = from_nginx(http, "GET", url_of(proxy, aid), 410, "sold_out")
    same_answer(from_gateway(http, instances, "GET", url_of(proxy, aid), "sold_out"), copy)


@pytest.mark.parametrize("state", ["ended", "paused", "unknown_activity"])
def test_activity_level_refusals_of_the_url_and_the_purchase_are_nginxs(
        http, proxy, instances, state: str) -> None:
    aid = create_activity(http, proxy.admin_base, total=5)
    buyer = new_user("buyer")
    purchase = signed_url(http, proxy, aid, buyer)
    expected = {"ended": (410, "ended"), "paused": (503, "paused"),
                "unknown_activity": (404, "unknown_activity")}[state]
    if state == "ended":
        assert admin(http, proxy, "POST", f"/admin/activities/{aid}/end").status == 200
    elif state == "paused":
        assert admin(http, proxy, "POST", f"/admin/activities/{aid}/pause").status == 200
    else:  # a purchase URL signed for an id nobody created
        aid = f"none{uuid.uuid4().hex[:8]}"
        purchase = purchase.replace(purchase.split("/")[4], aid)
    deadline = time.monotonic() + 5  # every instance has the new state
    while call(http, "GET", url_of(proxy, aid), new_user()).body.get("error") != expected[1]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    copy = from_nginx(http, "GET", url_of(proxy, aid), *expected)
    same_answer(from_gateway(http, instances, "GET", url_of(proxy, aid), expected[1]), copy)
    copy = from_nginx(http, "POST", purchase, *expected)
    same_answer(from_gateway(http, instances, "POST", purchase, expected[1]), copy)


def test_not_started_is_nginxs_with_nginxs_clock_and_never_after_the_start(http, proxy) -> None:
    aid = create_activity(http, proxy.admin_base, total=5, starts_at=iso(3.5))
    starts_ms = None
    served: list[tuple[int, Answer]] = []
    opened = None
    deadline = time.monotonic() + 10
    while opened is None and time.monotonic() < deadline:
        answer = call(http, "GET", url_of(proxy, aid), new_user())
        received_ms = time.time_ns() // 1_000_000
        if answer.status == 200:
            opened = received_ms
        else:
            assert answer.body["error"] == "not_started", answer.body
            served.append((received_ms, answer))
        time.sleep(0.01)
    assert opened is not None, "the sale never opened"
    from_nginx = [(at, a) for at, a in served if a.headers.get("X-Cache") == HIT]
    assert len(from_nginx) > 20, len(from_nginx)  # most of the countdown was nginx's
    for at, answer in served:
        starts_ms = answer.body["starts_at"]
        assert abs(answer.body["now_ms"] - at) <= 50, (answer.body, at)
    from seckill.domain.clock import ms_from_iso
    starts = ms_from_iso(starts_ms, "starts_at")
    # The clock nginx and this test read is one: no copy was sent at or after the start.
    assert all(answer.body["now_ms"] < starts for _, answer in served)
    assert max(at for at, _ in served) < starts + 50
    assert opened - starts < 1000  # open within the second: nothing held it back
