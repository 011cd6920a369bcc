"""The crowd's rejections at nginx's price: nginx's edge cache, real nginx in front
of two real gunicorn instances.

* Each activity-level refusal of ``GET /seckill/url`` (``sold_out``, ``ended``,
  ``not_started``, ``paused``, ``unknown_activity``) and of the purchase (the same but
  ``sold_out``) is answered by nginx after the gateway gave it once, byte for byte the
  gateway's, for at most the rest of that second, to anybody (a request without a token too).
* Nothing that depends on the user ever is (a test per answer), a winner's repeated purchase
  after the sell-out among them.
* An odd spelling of the path or the query is never looked up nor stored; the purchase's terms
  in its query as the sale page writes them (``?variant=<vid>&quantity=<n>``) share the
  purchase's copy.
* A ``not_started`` copy never outlives ``starts_at``, and its ``now_ms`` is nginx's clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path

import orjson
import pytest
import urllib3

from tests.support.nginx import Answer, Instances, call, create_activity, front
from tests.support.servers import NginxFront
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.

HIT = "HIT"


@pytest.fixture
def proxy(instances: Instances, tmp_path: Path) -> Iterator[NginxFront]:
    with front(instances, tmp_path, ip_rate="off") as running:
        yield running


def new_user(name: str = "u") -> dict[str, str]:
    return user_headers(f"{name}-{uuid.uuid4().hex[:8]}")


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
    for name in ("Content-Type", "Content-Length", "Retry-After", "X-Seckill-Outcome"):
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
    # The purchase's terms in its query, as the sale page sends them: the same refusal, the
    # activity's whatever the terms, so the same copy.
    for terms in ("?variant=eu-41", "?variant=x&quantity=2"):
        copy = from_nginx(http, "POST", purchase + terms, *expected)
        same_answer(from_gateway(http, instances, "POST", purchase + terms, expected[1]), copy)


def test_not_started_is_nginxs_with_nginxs_clock_and_never_after_the_start(http, proxy) -> None:
    aid = create_activity(http, proxy.admin_base, total=5, starts_at=iso(3.5))
    starts_ms = None
    served: list[tuple[int, Answer]] = []
    opened = None
    deadline = time.monotonic() + 10
    while opened is None and time.monotonic() < deadline:
        user = new_user()
        asked_ms = time.time_ns() // 1_000_000
        answer = call(http, "GET", url_of(proxy, aid), user)
        received_ms = time.time_ns() // 1_000_000
        if answer.status == 200:
            opened = received_ms
        else:
            assert answer.body["error"] == "not_started", answer.body
            # Sent between the question and its answer (the clock is this machine's).
            assert asked_ms - 50 <= answer.body["now_ms"] <= received_ms + 50, (
                answer.body, asked_ms, received_ms)
            served.append((received_ms, answer))
        time.sleep(0.01)
    assert opened is not None, "the sale never opened"
    from_nginx = [(at, a) for at, a in served if a.headers.get("X-Cache") == HIT]
    assert len(from_nginx) > 20, len(from_nginx)  # most of the countdown was nginx's
    for _, answer in served:
        starts_ms = answer.body["starts_at"]
    from seckill.domain.clock import ms_from_iso
    starts = ms_from_iso(starts_ms, "starts_at")
    # The clock nginx and this test read is one: no copy was sent at or after the start.
    assert all(answer.body["now_ms"] < starts for _, answer in served)
    assert max(at for at, _ in served) < starts + 50
    assert opened - starts < 1000  # open within the second: nothing held it back


# -- what nginx never repeats ----------------------------------------------------------------


def never_from_nginx(answer: Answer) -> Answer:
    assert answer.headers.get("X-Cache") != HIT, (answer.status, answer.body)
    return answer


def test_a_winners_repeated_purchase_after_the_sell_out_is_always_the_gateways_409(
        http, proxy) -> None:
    """The purchase's sold_out is not nginx's: losers get 410 from the gateway, and the winner,
    asking between them, 409 already_purchased with the order id, every time."""
    aid = create_activity(http, proxy.admin_base, total=1)
    winner = new_user("winner")
    purchase = signed_url(http, proxy, aid, winner)
    bought = call(http, "POST", purchase, winner)
    assert bought.status == 200, bought.body
    for _ in range(4):
        loser = new_user("loser")
        lost = never_from_nginx(call(http, "POST", signed_url_or_none(http, proxy, aid, loser)
                                     or purchase, loser))
        assert lost.status in (403, 410), lost.body  # 403: a URL minted for the winner
        again = never_from_nginx(call(http, "POST", purchase, winner))
        assert again.status == 409, again.body
        assert again.body["error"] == "already_purchased"
        assert again.body["order_id"] == bought.body["order_id"]


def signed_url_or_none(http: urllib3.PoolManager, proxy: NginxFront, aid: str,
                       user: dict[str, str]) -> str | None:
    """The user's purchase URL, or None once the activity answers sold_out."""
    issued = call(http, "GET", url_of(proxy, aid), user)
    return f"{proxy.base}{issued.body['url']}" if issued.status == 200 else None


def test_the_url_and_the_purchase_of_an_open_sale_are_each_users_own(http, proxy) -> None:
    """200s, the signed URL of each user, 401 without a token, bad_signature for another's
    URL: alternated, each asker gets the gateway's answer for them."""
    aid = create_activity(http, proxy.admin_base, total=50)
    alice, bob = new_user("alice"), new_user("bob")
    urls = set()
    for user in (alice, bob, alice, bob):
        issued = never_from_nginx(call(http, "GET", url_of(proxy, aid), user))
        assert issued.status == 200, issued.body
        urls.add(issued.body["url"])
        nobody = never_from_nginx(call(http, "GET", url_of(proxy, aid)))
        assert (nobody.status, nobody.body["error"]) == (401, "unauthenticated")
        time.sleep(0.6)  # each user's limit is 5/second: the next answer must be a 200
    assert len(urls) == 4  # a URL per request, never a copy
    alices = signed_url(http, proxy, aid, alice)
    for _ in range(2):
        stolen = never_from_nginx(call(http, "POST", alices, bob))
        assert (stolen.status, stolen.body["error"]) == (403, "bad_signature")
    mine = never_from_nginx(call(http, "POST", alices, alice))
    assert mine.status == 200, mine.body
    theirs = never_from_nginx(call(http, "POST", signed_url(http, proxy, aid, bob), bob))
    assert theirs.status == 200 and theirs.body["order_id"] != mine.body["order_id"]
    for user, order in ((alice, mine), (bob, theirs), (alice, mine)):
        status = never_from_nginx(call(http, "GET", f"{proxy.base}/seckill/{aid}/order", user))
        assert status.body["order_id"] == order.body["order_id"], status.body


def test_one_users_rate_limit_is_never_anothers(http, proxy) -> None:
    aid = create_activity(http, proxy.admin_base, total=50)
    flooder = new_user("flooder")
    answers = [call(http, "GET", url_of(proxy, aid), flooder) for _ in range(8)]
    limited = [a for a in answers if a.status == 429]
    assert limited and all(a.body["error"] == "rate_limited" for a in limited)
    for _ in range(3):
        never_from_nginx(call(http, "GET", url_of(proxy, aid), flooder))
        other = never_from_nginx(call(http, "GET", url_of(proxy, aid), new_user()))
        assert other.status == 200, other.body


def test_not_admitted_and_the_queue_are_each_users_own(http, proxy) -> None:
    """On a queue activity the URL is refused to everybody, but with each user's own place."""
    aid = create_activity(http, proxy.admin_base, total=1, admission="queue",
                          queue_opens_at=iso(-30), starts_at=iso(-20))
    carol, alice, bob = new_user("carol"), new_user("alice"), new_user("bob")
    joined = {}
    for name, user in (("carol", carol), ("alice", alice)):
        answer = call(http, "POST", f"{proxy.base}/seckill/{aid}/queue",
                      {**user, "Content-Type": "application/json"}, b"{}")
        assert answer.status == 200, answer.body
        joined[name] = answer.body["status"]
    assert joined == {"carol": "admitted", "alice": "waiting"}, joined
    for _ in range(2):
        waiting = never_from_nginx(call(http, "GET", url_of(proxy, aid), alice))
        assert (waiting.status, waiting.body["error"]) == (403, "not_admitted"), waiting.body
        assert waiting.body.get("position") == 1, waiting.body
        stranger = never_from_nginx(call(http, "GET", url_of(proxy, aid), bob))
        assert (stranger.status, stranger.body["error"]) == (403, "not_admitted")
        assert "position" not in stranger.body, stranger.body
        states = [never_from_nginx(call(http, "GET", f"{proxy.base}/seckill/{aid}/queue",
                                        user)).body["status"] for user in (carol, alice, bob)]
        assert states == ["admitted", "waiting", "none"], states
        time.sleep(0.3)


# -- odd spellings are never looked up nor stored ---------------------------------------------


def raw_call(proxy: NginxFront, method: str, path: str, headers: dict[str, str]
             ) -> tuple[int, str | None]:
    """The request line exactly as written (urllib3 would remove the dot segments): its
    status and X-Cache."""
    host, port = proxy.base.removeprefix("http://").split(":")
    connection = HTTPConnection(host, int(port), timeout=15)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None,
                           headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("X-Cache")
    finally:
        connection.close()


def test_an_odd_spelling_never_answers_for_the_canonical_activity(http, proxy) -> None:
    """Each odd form of the URL or purchase request names the paused activity to the gateway
    (a cacheable 503) or nothing it knows (a cacheable 404) while a naive key would read the
    open one: asked again and again, it is never looked up nor stored, and the open activity's
    users keep getting their own 200s."""
    open_aid = create_activity(http, proxy.admin_base, total=50)
    paused = create_activity(http, proxy.admin_base, total=50)
    alice = new_user("alice")
    token = signed_url(http, proxy, open_aid, alice).rsplit("/", 2)[1]
    paused_token = signed_url(http, proxy, paused, alice).rsplit("/", 2)[1]
    assert admin(http, proxy, "POST", f"/admin/activities/{paused}/pause").status == 200
    encoded = "".join(f"%{ord(c):02X}" for c in open_aid)
    odd = [
        ("GET", f"/seckill/url?activity={paused}&activity={open_aid}"),
        ("GET", f"/seckill/url?activity={open_aid}&activity={paused}"),
        ("GET", f"/seckill/url?ACTIVITY={paused}&activity={open_aid}"),
        ("GET", f"/seckill/url?activity={encoded}"),
        ("GET", f"/seckill/url?activity={open_aid}x&x=1"),
        ("GET", f"/seckill/url?x=1&activity={open_aid}"),
        ("GET", f"/seckill/url/?activity={open_aid}"),
        ("GET", f"/seckill//url?activity={open_aid}"),
        ("GET", f"/seckill/./url?activity={open_aid}"),
        ("POST", f"/seckill/./{open_aid}/{token}/buy"),
        ("POST", f"/seckill//{open_aid}/{token}/buy"),
        ("POST", f"/seckill/{open_aid}/{token}/buy/"),
        ("POST", f"/seckill/{paused}/{paused_token}/buy?activity={open_aid}"),
        ("POST", f"/seckill/{paused}/{paused_token}/buy?variant=a&x={open_aid}"),
        ("POST", f"/seckill/{paused}/{paused_token}/buy?quantity=1&variant=a"),
        ("POST", f"/seckill/{paused}/{paused_token}/buy?variant=%61"),
        ("POST", f"/seckill/{paused}/{paused_token}/buy?variant=a&quantity=1&quantity=2"),
        ("POST", f"/seckill/x%2F..%2F{open_aid}/{token}/buy"),
        ("POST", f"/seckill/{encoded}/{token}/buy"),
        ("POST", f"/seckill/{open_aid}/{token}/../{token}/buy"),
    ]
    for method, path in odd:
        for _ in range(3):
            status, cache = raw_call(proxy, method, path, new_user())
            assert cache in (None, "BYPASS"), (path, status, cache)
    for user in (new_user(), new_user()):
        assert never_from_nginx(call(http, "GET", url_of(proxy, open_aid), user)).status == 200
    bought = never_from_nginx(call(http, "POST", f"{proxy.base}/seckill/{open_aid}/{token}/buy",
                                   alice))
    assert bought.status == 200, bought.body


def test_a_blocked_buyer_is_the_gateways_answer_every_time(http, proxy) -> None:
    """403 blocked depends on the user: alternated with another's 200s, never nginx's."""
    aid = create_activity(http, proxy.admin_base, total=50)
    uid = f"blocked-{uuid.uuid4().hex[:8]}"
    made = admin(http, proxy, "POST", "/admin/blocks", orjson.dumps({"user": uid}))
    assert made.status == 201, made.body
    deadline = time.monotonic() + 5  # every process hears of the block within a second
    agreeing = 0
    while agreeing < 8:  # both instances, each worker: 8 refusals in a row
        agreeing = agreeing + 1 if call(http, "GET", url_of(proxy, aid),
                                        user_headers(uid)).status == 403 else 0
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for _ in range(3):
        refused = never_from_nginx(call(http, "GET", url_of(proxy, aid), user_headers(uid)))
        assert (refused.status, refused.body["error"]) == (403, "blocked"), refused.body
        other = never_from_nginx(call(http, "GET", url_of(proxy, aid), new_user()))
        assert other.status == 200, other.body
    admin(http, proxy, "DELETE", f"/admin/blocks/user/{uid}")


def test_two_nginx_fronts_each_keep_their_own_second(http, instances, tmp_path) -> None:
    """Several nginx machines in front of the same gateways: each repeats the refusal, and
    each sells the restocked units again within 2 s of the restock."""
    with front(instances, tmp_path / "a", ip_rate="off") as one, \
            front(instances, tmp_path / "b", ip_rate="off") as two:
        aid = create_activity(http, one.admin_base, total=1)
        winner = new_user("winner")
        assert call(http, "POST", signed_url(http, one, aid, winner), winner).status == 200
        for proxy in (one, two):
            deadline = time.monotonic() + 5
            while call(http, "GET", url_of(proxy, aid), new_user()).headers.get(
                    "X-Cache") != HIT:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        restocked = admin(http, one, "POST", f"/admin/activities/{aid}/stock",
                          orjson.dumps({"add": 2}))
        assert restocked.status == 200, restocked.body
        at = time.monotonic()
        for proxy in (one, two):
            while (issued := call(http, "GET", url_of(proxy, aid), new_user())).status != 200:
                assert time.monotonic() - at <= 2.0, issued.body
                time.sleep(0.02)
