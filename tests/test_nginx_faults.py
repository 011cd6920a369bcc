"""nginx in front of two real gunicorn instances while something goes wrong.

* A crowd hitting a paused activity gets the gateway's 503 ``paused``: that answer never takes
  an instance out of nginx's pool, so every other route and the operator API keep answering.
* The micro-cache stores an answer only under the path that was forwarded: a request whose
  raw path nginx normalises (``/./``, ``%2F..%2F``) is never cached under the real activity.
* One address can hold at most ``ip_connections`` requests in progress, dripped bodies
  included, on every public location.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import orjson
import pytest
import urllib3

from seckill.ops.stack.ports import free_listen_port
from tests.support.nginx import (
    Answer,
    FakeInstance,
    Instances,
    call,
    create_activity,
    expect_json_error,
    front,
)
from tests.support.servers import NginxFront
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

# Two gunicorn instances of this module's own, a client pool, and a stand-in instance that
# records what it receives: the fixtures ``instances``, ``http`` and ``fake_instance`` of
# tests/support/nginx.py.

CROWD = 240  # requests for the paused activity
CROWD_THREADS = 8
CROWD_BUDGET = 60.0  # seconds


def admin_post(http: urllib3.PoolManager, proxy: NginxFront, path: str) -> Answer:
    """An operator call through nginx's admin listener."""
    return call(http, "POST", f"{proxy.admin_base}{path}", ADMIN)


# -- a gateway answer never takes an instance out ---------------------------------------------


def test_a_paused_activity_under_a_crowd_leaves_every_other_route_up(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    """Default upstream settings (max_fails=1, fail_timeout=2 s): a crowd gets 503 paused from
    both instances while the clock, another activity, the health check and the operator API
    are asked beside it and right after it; resume works under the crowd. No 502 anywhere."""
    with front(instances, tmp_path, ip_rate="off") as proxy:
        paused = create_activity(http, proxy.admin_base, total=100)
        other = create_activity(http, proxy.admin_base, total=100)
        assert admin_post(http, proxy, f"/admin/activities/{paused}/pause").status == 200
        tokens = [user_headers(f"crowd{i}-{uuid.uuid4().hex[:6]}") for i in range(CROWD)]
        crowd_url = f"{proxy.base}/seckill/url?activity={paused}"
        done = threading.Event()
        probes: list[tuple[str, int]] = []

        def probe_once() -> None:
            for path in ("/seckill/time", f"/seckill/activities/{other}", "/healthz"):
                probes.append((path, call(http, "GET", f"{proxy.base}{path}").status))
            admin = call(http, "GET", f"{proxy.admin_base}/admin/activities/{other}", ADMIN)
            probes.append(("admin GET", admin.status))

        def probe() -> None:
            for _ in range(1000):
                if done.is_set():
                    return
                probe_once()

        with ThreadPoolExecutor(CROWD_THREADS + 1) as pool:
            prober = pool.submit(probe)
            crowd = [pool.submit(call, http, "GET", crowd_url, tokens[i]) for i in range(CROWD)]
            _, pending = wait(crowd, timeout=CROWD_BUDGET)
            done.set()
            prober.result(timeout=CROWD_BUDGET)
            assert not pending, f"{len(pending)} of {CROWD} crowd requests unfinished"
        # Right after the crowd: within fail_timeout of its last 503.
        probe_once()
        resumed = admin_post(http, proxy, f"/admin/activities/{paused}/resume")
        # Every instance sells again soon (each may hold the paused view a moment longer).
        deadline = time.monotonic() + 10
        while (after := call(http, "GET", crowd_url,
                             user_headers(f"late-{uuid.uuid4().hex[:6]}"))).status == 503:
            assert time.monotonic() < deadline, after.body
            time.sleep(0.05)

    answers = [future.result() for future in crowd]
    outcomes = collections.Counter(
        (a.status, a.body.get("error") if isinstance(a.body, dict) else None) for a in answers)
    statuses = collections.Counter(status for _, status in probes)
    assert outcomes == {(503, "paused"): CROWD}, outcomes
    for answer in answers:  # the gateway's answer, passed through
        assert answer.headers["X-Seckill-Instance"] in instances.names, answer.headers
    assert statuses == {200: len(probes)}, collections.Counter(probes)
    assert resumed.status == 200, resumed.body
    assert after.status == 200 and after.body["url"], after.body
    assert "no live upstreams" not in proxy.error_log()


def test_a_refused_instance_is_passed_over_and_the_admin_listener_never_502s(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    """A backend that refuses connections (nothing listens) beside a real one: GETs move on to
    the real one, operator calls too; only when nothing answers is the 502 nginx's JSON."""
    dead = f"127.0.0.1:{free_listen_port()}"
    with front(instances, tmp_path, ip_rate="off",
               backends=[dead, instances.backends[0]]) as proxy:
        for _ in range(6):
            assert call(http, "GET", f"{proxy.base}/seckill/time").status == 200
            assert call(http, "GET", f"{proxy.admin_base}/healthz").status == 200
        made = create_activity(http, proxy.admin_base)  # a POST whose connection was refused
        assert call(http, "GET", f"{proxy.base}/seckill/activities/{made}").status == 200
    with front(instances, tmp_path / "none", backends=[dead]) as proxy:
        for base in (proxy.base, proxy.admin_base):
            expect_json_error(call(http, "GET", f"{base}/healthz"), 502, "bad_gateway")
        expect_json_error(admin_post(http, proxy, "/admin/activities/x/pause"), 502,
                          "bad_gateway")


# -- the micro-cache stores an answer only under what was forwarded ------------------------


def raw_request(base: str, method: str, target: str, body: bytes = b"",
                source: str = "127.0.0.1") -> tuple[int, dict[str, str], object]:
    """``method target`` sent byte for byte (no client library normalises the path), from the
    loopback address ``source``; the status, the headers (lower-case names), the JSON body."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10,
                                  source_address=(source, 0)) as sock:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
                     f"{length}\r\n".encode() + body)
        data = b""
        for _ in range(1000):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in
               (line.split(":", 1) for line in lines[1:] if ":" in line)}
    parsed = orjson.loads(payload) if headers.get("content-type", "").startswith(
        "application/json") and payload else None
    return int(lines[0].split()[1]), headers, parsed


def raw_get(base: str, target: str) -> tuple[int, dict[str, str], object]:
    """``GET target`` sent byte for byte."""
    return raw_request(base, "GET", target)


def test_a_normalised_path_never_poisons_the_micro_cache(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    with front(instances, tmp_path, ip_rate="off") as proxy:
        aid = create_activity(http, proxy.admin_base, total=5)
        queued = create_activity(http, proxy.admin_base, total=5, admission="queue",
                                 queue_opens_at=iso(-5), starts_at=iso(60))
        poison = {
            f"/seckill/activities/{aid}": [
                f"/seckill/activities/./{aid}", f"/seckill/activities/x%2F..%2F{aid}",
                f"/seckill/activities/x/../{aid}", f"/seckill//activities/{aid}",
                f"/seckill/activities/%2E/{aid}"],
            f"/seckill/{queued}/queue/state": [
                f"/seckill/./{queued}/queue/state", f"/seckill/x%2F..%2F{queued}/queue/state",
                f"/seckill/{queued}/queue/./state", f"/seckill/{queued}/queue//state"],
        }
        for _ in range(3):  # each round within one cache second of the poisoning requests
            for canonical, attacks in poison.items():
                for target in attacks:
                    status, headers, _ = raw_get(proxy.base, target)
                    shopper = call(http, "GET", f"{proxy.base}{canonical}")
                    assert shopper.status == 200, (target, shopper.status, shopper.body)
                    # Sent to the gateway as it came, and not stored.
                    assert headers.get("x-cache") == "BYPASS", (target, status, headers)
                    assert shopper.body["id" if "activities" in canonical else "state"] in (
                        aid, "queue_open"), shopper.body
            time.sleep(0.4)
        # Canonical requests are still served from the cache; a query string neither busts
        # it nor reaches the gateway.
        url = f"{proxy.base}/seckill/activities/{aid}"
        call(http, "GET", url)
        hit = call(http, "GET", f"{url}?bust={uuid.uuid4().hex}")
        assert (hit.status, hit.headers["X-Cache"]) == (200, "HIT"), hit.headers


def test_after_a_quiet_spell_the_cached_view_is_fresh_not_as_old_as_the_spell(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    """A page polling every few seconds must not see the activity as it was one poll ago: the
    request that finds the cached second over fetches a fresh answer (no stale answer served
    while a background refresh runs), so a view is at most the cache's second plus the
    gateway copy's second old, however long nobody asked."""
    with front(instances, tmp_path, ip_rate="off") as proxy:
        aid = create_activity(http, proxy.admin_base, total=1)
        view = f"{proxy.base}/seckill/activities/{aid}"
        assert call(http, "GET", view).body["remaining"] == 1  # cached now
        time.sleep(3)  # a quiet spell: the cached answer is over its second
        buyer = user_headers(f"quiet-{uuid.uuid4().hex[:6]}")
        url = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}", buyer).body["url"]
        assert call(http, "POST", f"{proxy.base}{url}", buyer).status == 200
        # Every worker's copy is refreshed once a second; the next poll comes later still.
        time.sleep(2.5)
        seen = call(http, "GET", view)
        assert (seen.body["state"], seen.body["remaining"]) == ("sold_out", 0), (
            seen.body, seen.headers.get("X-Cache"))


@pytest.mark.parametrize("fake_instance", ["answer"], indirect=True)
def test_a_cached_answer_is_for_exactly_the_path_sent_upstream(
    instances: Instances, tmp_path: Path, fake_instance: FakeInstance
) -> None:
    """Seen from the instance: a cacheable request arrives as its canonical path (the query
    string the key ignores is not sent either); any other arrives as the client wrote it."""
    with front(instances, tmp_path, backends=[fake_instance.address], ip_rate="off") as proxy:
        sent = ["/seckill/activities/p1?bust=1", "/seckill/activities/./p1",
                "/seckill/activities/x%2F..%2Fp1", "/seckill/q1/queue/state?x=%2F",
                "/seckill/q1/queue/%2E/state"]
        caches = [raw_get(proxy.base, target)[1].get("x-cache") for target in sent]
    assert caches == ["MISS", "BYPASS", "BYPASS", "MISS", "BYPASS"], caches
    received = [head.split(b" ")[1].decode() for head in fake_instance.heads]
    assert received == ["/seckill/activities/p1", "/seckill/activities/./p1",
                        "/seckill/activities/x%2F..%2Fp1", "/seckill/q1/queue/state",
                        "/seckill/q1/queue/%2E/state"], received


# -- one address, a bounded number of requests in progress -----------------------------------


@contextlib.contextmanager
def dripping(base: str, method: str, path: str, source: str) -> Iterator[socket.socket]:
    """A request from ``source`` whose head is sent whole and whose 64-byte body is sent one
    byte so far (then nothing: nginx waits up to client_body_timeout for the next). Yielded
    once nginx has let it through its limits and asked for the body: its ``100 Continue``
    (sent when it starts reading a body, after limit_conn) has come back."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    try:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
                     "application/json\r\nContent-Length: 64\r\nExpect: 100-continue\r\n"
                     "\r\n".encode())
        interim = b""
        for _ in range(100):
            if b"\r\n\r\n" in interim:
                break
            chunk = sock.recv(4096)
            assert chunk, interim  # closed before answering
            interim += chunk
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        sock.sendall(b"{")
        yield sock
    finally:
        sock.close()


def unanswered(sock: socket.socket) -> bool:
    """Nothing came back on ``sock`` yet (no answer, not closed)."""
    return not select.select([sock], [], [], 0)[0]


def test_one_address_holds_at_most_ip_connections_requests_on_every_location(
    instances: Instances, tmp_path: Path
) -> None:
    """``limit`` dripping requests from one address, on any public location, and that
    address's next request is a JSON 429 (nginx's, at once) until one of them goes; another
    address is served meanwhile. The address is one no other request here comes from: a
    request just answered may still count for a moment, and must not refuse a drip."""
    limit, crowd = 3, "127.0.0.23"
    with front(instances, tmp_path, ip_connections=limit) as proxy:
        # Every location that takes a body counts: the health check's, the gateway's. (The
        # page's own locations answer a POST 405 before reading its body, then drop the body
        # within lingering_time.)
        targets = [("POST", "/healthz"), ("POST", "/seckill/a/b/buy"),
                   ("POST", f"/seckill/activities/{uuid.uuid4().hex[:8]}")]
        with contextlib.ExitStack() as stack:
            drips = [stack.enter_context(dripping(proxy.base, method, path, crowd))
                     for method, path in targets[:limit]]
            assert all(unanswered(drip) for drip in drips)  # each held, waiting for its body
            extra = raw_request(proxy.base, "POST", "/healthz", b"{}", crowd)
            assert extra[0] == 429, (extra, proxy.error_log()[-2000:])
            _, headers, body = extra
            assert headers["content-type"].startswith("application/json"), headers
            assert isinstance(body, dict) and body["error"] == "rate_limited", body
            assert "x-seckill-instance" not in headers  # nginx said it, at once
            for method, path in [("GET", "/seckill/time"), ("GET", "/healthz"), ("GET", "/"),
                                 ("GET", "/static/sale.js")]:
                assert raw_request(proxy.base, method, path, source=crowd)[0] == 429, path
            # Another address is not concerned.
            assert raw_request(proxy.base, "GET", "/seckill/time")[0] == 200
            assert all(unanswered(drip) for drip in drips)
        # The dripping requests gone, the address is served again.
        deadline = time.monotonic() + 10
        while (again := raw_request(proxy.base, "GET", "/seckill/time", source=crowd))[0] != 200:
            assert time.monotonic() < deadline, again
            time.sleep(0.05)
