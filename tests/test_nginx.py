"""nginx in front of real gunicorn instances, with the config ``seckill nginx render`` writes.

Two gunicorn instances (one gevent worker each, ``SECKILL_BEHIND_PROXY=1``, each naming itself
in ``X-Seckill-Instance``) serve this module; each test starts its own nginx (it starts in a
fraction of a second) with the options it is about. Broken instances are small TCP servers
that read a request and then close the connection or never answer.
"""

from __future__ import annotations

import collections
import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from seckill.ops.stack import nginx
from seckill.ops.stack.ports import free_listen_port
from tests.support.nginx import TIMEOUT, call, create_activity, expect_json_error, front
from tests.support.servers import require_nginx
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

# Two gunicorn instances of this module's own, a client pool, and a stand-in instance: the
# fixtures ``instances``, ``http`` and ``fake_instance`` of tests/support/nginx.py.


# -- the config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ip_rate": "off"},
        {"ip_rate": "600r/m", "ip_burst": 0, "ip_connections": 1, "access_log": True},
        {"user": "root", "user_reason": "why, in a comment\non two lines", "listen_host": "::1"},
        {"edge_cache": False},
    ],
    ids=["default", "ip-rate-off", "per-minute", "user-root", "no-edge-cache"],
)
def test_rendered_config_passes_nginx_t(tmp_path: Path, options: dict[str, Any]) -> None:
    binary = require_nginx()
    run_dir = tmp_path / "run"
    nginx.prepare_run_dir(run_dir)
    settings = nginx.NginxOptions(backends=["127.0.0.1:9001", "127.0.0.1:9002"],
                                  port=free_listen_port(), admin_port=free_listen_port(),
                                  run_dir=run_dir, **options)
    conf = tmp_path / "nginx.conf"
    text = nginx.render(settings)
    conf.write_text(text)
    assert nginx.check_config(binary, run_dir, conf) is None
    # nginx -t really reads it: a broken copy is refused.
    broken = tmp_path / "broken.conf"
    broken.write_text(text.replace("least_conn;", "least_conn"))
    assert nginx.check_config(binary, run_dir, broken) is not None

    directives = [line.strip() for line in text.splitlines()
                  if line.strip() and not line.strip().startswith("#")]
    users = [d for d in directives if d.startswith("user ")]
    if "user" in options:
        assert users == ["user root;"]
        assert "# why, in a comment\n# on two lines\nuser root;" in text
    else:
        assert users == []  # the production render: nginx's (or the packager's) default
    # Only a failed or timed-out connection moves a request on and counts against max_fails:
    # never an answer of the gateway (its 503 paused), tests/test_nginx_faults.py.
    next_upstream = [d for d in directives if d.startswith("proxy_next_upstream ")]
    assert next_upstream == ["proxy_next_upstream error timeout;"]
    assert not re.search(r"proxy_next_upstream[^;]*http_", text)
    limits = [d for d in directives if d.startswith(("limit_req ", "limit_conn "))]
    # limit_req on the 5 /seckill/ locations; limit_conn once, on the whole public server.
    assert len(limits) == (0 if options.get("ip_rate") == "off" else 6), limits
    # The edge cache on the URL and the purchase only (tests/test_edge_cache.py), or nowhere.
    edge = [d for d in directives if d == "proxy_cache edge;"]
    assert len(edge) == (0 if options.get("edge_cache") is False else 2), edge


def test_render_refuses_bad_options(tmp_path: Path) -> None:
    good: dict[str, Any] = {"backends": ["127.0.0.1:9001"], "run_dir": tmp_path}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"backends": []}, "at least one"),
        ({"backends": ["127.0.0.1:9001; evil"]}, "not host:port"),
        ({"ip_rate": "lots"}, "--ip-rate"),
        ({"port": 8080, "admin_port": 8080}, "must differ"),
        ({"listen_host": "0.0.0.0; evil"}, "not a host"),
        ({"user": "root; evil"}, "not an account"),
        ({"read_timeout": 0}, "read timeout"),
        ({"run_dir": tmp_path / "a b"}, "characters"),
    ]
    for bad, message in cases:
        fields: dict[str, Any] = {**good, **bad}
        with pytest.raises(nginx.RenderError, match=message):
            nginx.render(nginx.NginxOptions(**fields))


# -- load balancing, client address, limits ----------------------------------------------


def test_requests_spread_over_both_instances(instances, tmp_path, http) -> None:
    with front(instances, tmp_path) as proxy:
        seen: collections.Counter[str] = collections.Counter()
        for _ in range(20):
            answer = call(http, "GET", f"{proxy.base}/seckill/time")
            assert answer.status == 200, answer.body
            seen[answer.headers["X-Seckill-Instance"]] += 1
        assert set(seen) == set(instances.names), seen
        # Each sees a share, not one request out of twenty.
        assert min(seen.values()) >= 5, seen
        # The sale page and its files come from nginx itself.
        page = http.request("GET", f"{proxy.base}/", timeout=TIMEOUT)
        assert page.status == 200 and b'<script src="/static/sale.js">' in page.data
        assert page.headers["Content-Type"].startswith("text/html")
        assert "X-Seckill-Instance" not in page.headers
        script = http.request("GET", f"{proxy.base}/static/sale.js", timeout=TIMEOUT)
        assert script.status == 200 and b"/seckill/time" in script.data
        assert "javascript" in script.headers["Content-Type"]


def test_the_gateway_sees_nginx_peer_not_what_the_client_claims(instances, tmp_path, http) -> None:
    marker = f"/seckill/activities/xff-{uuid.uuid4().hex[:8]}"
    spoof = {"X-Forwarded-For": "6.6.6.6", "X-Real-IP": "6.6.6.7", "Forwarded": "for=6.6.6.8"}
    with front(instances, tmp_path) as proxy:
        for _ in range(4):
            assert call(http, "GET", f"{proxy.base}{marker}", spoof).status == 404
            # The same path straight to an instance: ProxyFix trusts one hop there (which is
            # why the instances listen on loopback only, for nginx).
        direct = call(http, "GET", f"http://{instances.backends[0]}{marker}-direct", spoof)
        assert direct.status == 404
    time.sleep(0.5)  # the access log line is written after the response
    # Each line is in the stack's format (seckill/logs.py): the access line is its message.
    lines = [line.split(" INFO ", 1)[1] for log in instances.access_logs
             for line in log.read_text().splitlines() if marker in line]
    via_nginx = [line for line in lines if f"{marker} " in line]
    assert via_nginx, lines
    for line in via_nginx:
        # client (after ProxyFix) and the forwarded header as received: nginx's peer only.
        assert line.startswith("127.0.0.1 ["), line
        assert "fwd=127.0.0.1 " in line and "6.6.6" not in line, line
        assert "outcome=unknown_activity" in line, line
    direct_lines = [line for line in lines if f"{marker}-direct" in line]
    assert direct_lines and direct_lines[0].startswith("6.6.6.6 ["), direct_lines


def test_per_ip_limit_is_json_429_and_a_spoofed_address_does_not_escape_it(
    instances, tmp_path, http
) -> None:
    with front(instances, tmp_path, ip_rate="2r/s", ip_burst=3) as proxy:
        started = time.monotonic()
        answers = [
            call(http, "GET", f"{proxy.base}/seckill/time",
                 {"X-Forwarded-For": f"10.0.{i}.1", "X-Real-IP": f"10.0.{i}.2"})
            for i in range(20)
        ]
        elapsed = time.monotonic() - started
        passed = [a for a in answers if a.status == 200]
        limited = [a for a in answers if a.status == 429]
        assert len(passed) + len(limited) == 20, [a.status for a in answers]
        # burst 3 (+1) plus 2 a second: every spoofed address shared one bucket.
        assert len(passed) <= 4 + 2 * elapsed + 1, (len(passed), elapsed)
        assert limited
        for answer in limited:
            expect_json_error(answer, 429, "rate_limited")
            assert answer.headers["Retry-After"] == "1"
            assert "X-Seckill-Instance" not in answer.headers  # nginx said it, not the gateway
            assert answer.body["message"] == "too many requests from this address"
        # Every public /seckill/ location is limited, the purchase included.
        buy = call(http, "POST", f"{proxy.base}/seckill/x/y/buy")
        expect_json_error(buy, 429, "rate_limited")
        time.sleep(1.6)  # the bucket refills
        assert call(http, "GET", f"{proxy.base}/seckill/time").status == 200


def test_a_spoofed_address_does_not_escape_the_per_user_limit(instances, tmp_path, http) -> None:
    with front(instances, tmp_path, ip_rate="off") as proxy:
        aid = create_activity(http, proxy.admin_base)
        headers = user_headers(f"flooder-{uuid.uuid4().hex[:6]}")
        started = time.monotonic()
        answers = [
            call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}",
                 {**headers, "X-Forwarded-For": f"10.1.{i}.1", "X-Real-IP": f"10.1.{i}.1"})
            for i in range(30)
        ]
        windows = int(time.monotonic() - started) + 2  # fixed one-second windows touched
    statuses = collections.Counter(a.status for a in answers)
    assert set(statuses) == {200, 429}, statuses
    assert statuses[200] <= 5 * windows, (statuses, windows)
    for answer in answers:
        if answer.status == 429:
            expect_json_error(answer, 429, "rate_limited")
            assert answer.headers["X-Seckill-Instance"] in instances.names  # the gateway's
            assert int(answer.headers["Retry-After"]) >= 1


# -- what the public listener refuses, what the admin one serves -----------------------


def test_admin_is_refused_on_the_public_listener_and_served_on_the_admin_one(
    instances, tmp_path, http
) -> None:
    body = orjson.dumps({"id": f"adm{uuid.uuid4().hex[:8]}", "name": "Phone", "total": 1,
                         "starts_at": iso(-5), "ends_at": iso(600)})
    json_admin = {**ADMIN, "Content-Type": "application/json"}
    with front(instances, tmp_path) as proxy:
        for path in ["/admin/activities", "//admin/activities", "/%61dmin/activities",
                     "/seckill/../admin/activities", "/seckill/%2e%2e/admin/activities",
                     "/static/../admin/activities"]:
            refused = call(http, "POST", f"{proxy.base}{path}", json_admin, body)
            expect_json_error(refused, 404, "not_found")
            assert "X-Seckill-Instance" not in refused.headers, path  # never reached a gateway
        expect_json_error(call(http, "GET", f"{proxy.base}/metrics"), 404, "not_found")

        made = call(http, "POST", f"{proxy.admin_base}/admin/activities", json_admin, body)
        assert made.status == 201, made.body
        assert made.headers["X-Seckill-Instance"] in instances.names
        metrics = http.request("GET", f"{proxy.admin_base}/metrics", headers=ADMIN,
                               timeout=TIMEOUT)
        assert metrics.status == 200 and b"seckill_requests_total" in metrics.data
        # A token there too: the operator listener is loopback, not the operator.
        expect_json_error(call(http, "GET", f"{proxy.admin_base}/metrics"), 401,
                          "unauthenticated")
        # The operator token is still required there.
        unauth = call(http, "POST", f"{proxy.admin_base}/admin/activities",
                      {"Content-Type": "application/json"}, body)
        expect_json_error(unauth, 401, "unauthenticated")
    listen = re.findall(r"listen ([^;]+);", proxy.conf.read_text())
    assert listen[1] == f"127.0.0.1:{proxy.admin_base.rsplit(':', 1)[1]}", listen


# -- the micro-cache -----------------------------------------------------------------------


def test_micro_cache_serves_the_activity_and_nothing_per_user(instances, tmp_path, http) -> None:
    with front(instances, tmp_path, ip_rate="off") as proxy:
        aid = create_activity(http, proxy.admin_base, total=5)
        url = f"{proxy.base}/seckill/activities/{aid}"
        first = call(http, "GET", url)
        assert (first.status, first.headers["X-Cache"]) == (200, "MISS")
        # A user's token and a query string change nothing: the same cached answer.
        again = call(http, "GET", f"{url}?bust={uuid.uuid4().hex}", user_headers("alice"))
        assert again.headers["X-Cache"] == "HIT" and again.body == first.body

        alice, bob = user_headers("alice"), user_headers("bob")
        issued = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}", alice)
        bought = call(http, "POST", f"{proxy.base}{issued.body['url']}", alice)
        assert bought.status == 200, bought.body
        stale = call(http, "GET", url)
        assert stale.headers["X-Cache"] == "HIT" and stale.body["remaining"] == 5
        # nginx counts whole seconds: an answer is served for one to two seconds, then the
        # next one is fresh (the gateway's own metadata cache adds at most SECKILL_META_TTL).
        deadline = time.monotonic() + 5
        while (fresh := call(http, "GET", url)).body["remaining"] != 4:
            assert time.monotonic() < deadline, fresh.body
            time.sleep(0.1)

        # Per-user answers are never cached: alice and bob, alternately, each see their own.
        for _ in range(4):
            mine = call(http, "GET", f"{proxy.base}/seckill/{aid}/order", alice)
            theirs = call(http, "GET", f"{proxy.base}/seckill/{aid}/order", bob)
            assert mine.body == {"status": "pending", "order_id": bought.body["order_id"]} or (
                mine.body == {"status": "confirmed", "order_id": bought.body["order_id"]}
            ), mine.body
            assert theirs.body == {"status": "none"}, theirs.body
            assert "X-Cache" not in mine.headers and "X-Cache" not in theirs.headers
        # The clock is never cached either.
        clocks = []
        for _ in range(3):
            tick = call(http, "GET", f"{proxy.base}/seckill/time")
            assert "X-Cache" not in tick.headers
            clocks.append(tick.body["now_ms"])
            time.sleep(0.01)
        assert len(set(clocks)) == 3, clocks


def test_micro_cache_serves_a_queue_state_and_never_a_users_place(
        instances, tmp_path, http) -> None:
    """The public queue state is cached for a second (a crowd watching a queue costs one
    upstream request a second); a user's own status never is."""
    with front(instances, tmp_path, ip_rate="off") as proxy:
        aid = create_activity(http, proxy.admin_base, total=5, admission="queue",
                              queue_opens_at=iso(-5), starts_at=iso(60))
        url = f"{proxy.base}/seckill/{aid}/queue/state"
        first = call(http, "GET", url)
        assert (first.status, first.headers["X-Cache"]) == (200, "MISS"), first.body
        assert (first.body["state"], first.body["waiting"]) == ("queue_open", 0)
        joined = call(http, "POST", f"{proxy.base}/seckill/{aid}/queue",
                      {**user_headers("alice"), "Content-Type": "application/json"}, b"{}")
        assert joined.status == 200 and "X-Cache" not in joined.headers, joined.body
        again = call(http, "GET", f"{url}?bust=1", user_headers("bob"))
        assert again.headers["X-Cache"] == "HIT" and again.body == first.body
        deadline = time.monotonic() + 5
        while (fresh := call(http, "GET", url)).body["waiting"] != 1:
            assert time.monotonic() < deadline, fresh.body
            time.sleep(0.1)
        for uid, status in (("alice", "waiting"), ("bob", "none"), ("alice", "waiting")):
            mine = call(http, "GET", f"{proxy.base}/seckill/{aid}/queue", user_headers(uid))
            assert mine.body["status"] == status and "X-Cache" not in mine.headers


# -- what nginx answers itself -------------------------------------------------------------


def test_nginx_own_answers_are_json(instances, tmp_path, http) -> None:
    with front(instances, tmp_path) as proxy:
        expect_json_error(call(http, "GET", f"{proxy.base}/nope.html"), 404, "not_found")
        expect_json_error(call(http, "GET", f"{proxy.base}/static/missing.js"), 404, "not_found")
        not_allowed = call(http, "POST", f"{proxy.base}/", body=b"{}")
        expect_json_error(not_allowed, 405, "method_not_allowed")
        assert not_allowed.headers["Allow"] == "GET, HEAD"
        expect_json_error(call(http, "DELETE", f"{proxy.base}/static/sale.css"), 405,
                          "method_not_allowed")
        big = call(http, "POST", f"{proxy.base}/seckill/a/b/buy",
                   {"Content-Type": "application/json"}, b"{" + b" " * 5000 + b"}")
        expect_json_error(big, 413, "too_large")
        # The gateway's own JSON 404 passes through untouched (not replaced by nginx's).
        unknown = call(http, "GET", f"{proxy.base}/seckill/activities/none-such")
        expect_json_error(unknown, 404, "unknown_activity")


def test_no_instance_up_is_a_json_502(instances, tmp_path, http) -> None:
    with front(instances, tmp_path, backends=[f"127.0.0.1:{free_listen_port()}"]) as proxy:
        for method, path in [("GET", "/seckill/time"), ("POST", "/seckill/a/b/buy"),
                             ("GET", "/healthz")]:
            expect_json_error(call(http, method, f"{proxy.base}{path}"), 502, "bad_gateway")
        expect_json_error(call(http, "GET", f"{proxy.admin_base}/healthz"), 502, "bad_gateway")


@pytest.mark.parametrize("fake_instance", ["stall"], indirect=True)
def test_an_instance_that_does_not_answer_is_a_json_504(
    instances, tmp_path, http, fake_instance
) -> None:
    with front(instances, tmp_path, backends=[fake_instance.address], read_timeout=1) as proxy:
        expect_json_error(call(http, "GET", f"{proxy.base}/seckill/time"), 504, "gateway_timeout")
        expect_json_error(call(http, "POST", f"{proxy.base}/seckill/a/b/buy"), 504,
                          "gateway_timeout")
    assert fake_instance.seen == {"GET": 1, "POST": 1}, fake_instance.seen


@pytest.mark.parametrize("fake_instance", ["close", "stall"], indirect=True)
def test_a_get_moves_to_another_instance_a_purchase_never_does(
    instances, tmp_path, http, fake_instance, rds: redis.Redis
) -> None:
    """Upstream: a broken instance and a real one; max_fails=0 keeps both in the rotation.
    Every GET succeeds (retried on the real one); a purchase sent to the broken one fails
    (502 closed / 504 no answer) and is not resent: it was bought once or not at all."""
    with front(instances, tmp_path, ip_rate="off", backends=[fake_instance.address,
               instances.backends[0]], max_fails=0, read_timeout=1) as proxy:
        # Straight to the real instance: through this nginx it could meet the broken one.
        aid = create_activity(http, f"http://{instances.backends[0]}", total=100)
        users = [f"u{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
        urls = {}
        for uid in users:
            issued = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}",
                          user_headers(uid))
            assert issued.status == 200, issued.body
            urls[uid] = issued.body["url"]
        gets_to_broken = fake_instance.seen["GET"]
        assert gets_to_broken >= 1, fake_instance.seen  # retried, so none of them failed

        answers = {uid: call(http, "POST", f"{proxy.base}{urls[uid]}", user_headers(uid))
                   for uid in users}
    stats = call(http, "GET", f"http://{instances.backends[0]}/admin/activities/{aid}/stats",
                 ADMIN)
    failed_code, failed_error = (502, "bad_gateway") if fake_instance.mode == "close" else (
        504, "gateway_timeout")
    bought = {uid for uid, a in answers.items() if a.status == 200}
    failed = {uid for uid, a in answers.items() if a.status != 200}
    for uid in failed:
        expect_json_error(answers[uid], failed_code, failed_error)
    # Each failed purchase reached the broken instance once, and went nowhere else.
    assert fake_instance.seen["POST"] == len(failed) >= 1, (fake_instance.seen, answers)
    assert stats.body["sold"] == stats.body["buyers"] == len(bought), stats.body
    assert set(rds.hkeys(instances.key(aid, "buyers"))) == bought
    assert len(bought) + len(failed) == len(users)



def header(head: bytes, name: str) -> list[str]:
    """The values of header ``name`` in a raw request head."""
    lines = head.decode("latin-1").split("\r\n")[1:]
    return [line.split(":", 1)[1].strip() for line in lines
            if ":" in line and line.split(":", 1)[0].strip().lower() == name.lower()]


@pytest.mark.parametrize("fake_instance", ["answer"], indirect=True)
def test_what_an_instance_receives(instances, tmp_path, http, fake_instance) -> None:
    """Seen from the instance's side: HTTP/1.1 on a few reused connections (the upstream
    keepalive pool), the client's address headers replaced by nginx's peer, and, for the
    cached activity page, nothing that identifies the user."""
    spoof = {"X-Forwarded-For": "6.6.6.6", "X-Real-IP": "6.6.6.7", "Forwarded": "for=6.6.6.8",
             "X-Forwarded-Host": "evil.example", "Cookie": "session=alice"}
    with front(instances, tmp_path, backends=[fake_instance.address], ip_rate="off") as proxy:
        for _ in range(30):
            answer = call(http, "GET", f"{proxy.base}/seckill/time",
                          {**spoof, **user_headers("alice")})
            assert answer.status == 200, answer.body
        cached = call(http, "GET", f"{proxy.base}/seckill/activities/phone",
                      {**spoof, **user_headers("alice")})
        assert cached.status == 200
    assert fake_instance.seen == {"GET": 31}, fake_instance.seen
    # One connection per nginx worker or so, not one per request.
    assert fake_instance.connections <= 4, fake_instance.connections
    for head in fake_instance.heads:
        assert head.split(b"\r\n", 1)[0].endswith(b" HTTP/1.1"), head
        assert header(head, "X-Forwarded-For") == ["127.0.0.1"], head
        assert header(head, "X-Real-IP") == ["127.0.0.1"], head
        assert header(head, "Forwarded") == [] and header(head, "X-Forwarded-Host") == [], head
        assert header(head, "Connection") == [], head  # keep-alive is HTTP/1.1's default
    per_user, public = fake_instance.heads[:-1], fake_instance.heads[-1]
    assert all(header(h, "Authorization")[0].startswith("Bearer ") for h in per_user)
    assert header(public, "Authorization") == [] and header(public, "Cookie") == [], public
