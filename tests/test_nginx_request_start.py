"""nginx stamps every request it passes to a gateway instance with ``X-Request-Start:
t=<its $msec>``, replacing whatever the client sent under that name: the gateway can then
trust it as the moment nginx took the request (a purchase's deadline is counted from it).

The instance here is a small recording HTTP server, so that every proxied location (the
public listener's, the cached ones, the operator listener's) can be asked and what it
received read back header by header.
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from tests.support.servers import nginx_server

# Every kind of location that proxies to gunicorn: (listener, method, path).
REQUESTS = [
    ("public", "GET", "/seckill/time"),
    ("public", "GET", "/seckill/activities/phone"),  # the micro-cached view
    ("public", "GET", "/seckill/phone/queue/state"),  # micro-cached too
    ("public", "GET", "/seckill/url?activity=phone"),  # the edge cache's
    ("public", "POST", "/seckill/phone/token/buy"),  # the edge cache's
    ("public", "GET", "/seckill/phone/order"),
    ("public", "POST", "/seckill/phone/queue"),
    ("public", "GET", "/healthz"),
    ("public", "POST", "/payments/webhook"),
    ("admin", "GET", "/admin/activities"),
    ("admin", "POST", "/admin/activities/phone/pause"),
]
STAMP = re.compile(r"t=([0-9]+\.[0-9]{3})")


class Recorder(http.server.ThreadingHTTPServer):
    """An HTTP/1.1 server answering ``{}`` to everything, keeping each request's method, path
    and ``X-Request-Start`` values."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.seen: list[tuple[str, str, list[str]]] = []
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as nginx's upstream pool expects
    server: Recorder

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.seen.append(
                (self.command, self.path, self.headers.get_all("X-Request-Start") or []))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the test reads what was recorded


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_every_proxied_request_carries_nginx_s_time_never_the_client_s(
    recorder: Recorder, tmp_path: Path
) -> None:
    """Each location's request reaches the instance with exactly one X-Request-Start, nginx's
    $msec (seconds with three decimals, taken while the test waited for the answer), whether
    the client sent none, one, or two of its own."""
    http = urllib3.PoolManager()
    spoofs: list[list[tuple[str, str]]] = [
        [], [("X-Request-Start", "t=1")],
        [("x-request-start", "t=9999999999.000"), ("X-Request-Start", "garbage")]]
    asked: list[tuple[float, float]] = []
    with nginx_server([recorder.address], tmp_path / "nginx", ip_rate="off") as proxy:
        bases = {"public": proxy.base, "admin": proxy.admin_base}
        for spoof in spoofs:
            for listener, method, path in REQUESTS:
                headers = urllib3.HTTPHeaderDict()
                for name, value in spoof:
                    headers.add(name, value)
                before = time.time()
                answer = http.request(method, f"{bases[listener]}{path}", headers=headers,
                                      body=b"{}" if method == "POST" else None,
                                      retries=False, timeout=10.0)
                asked.append((before, time.time()))
                assert answer.status == 200, (listener, method, path, answer.status)
    http.clear()

    # Micro-cached answers are reused within their second: only what reached the instance.
    assert len(recorder.seen) >= len(REQUESTS), recorder.seen
    reached = {(method, path.split("?")[0]) for method, path, _ in recorder.seen}
    assert reached == {(m, p.split("?")[0]) for _, m, p in REQUESTS}, reached
    first, last = asked[0][0], asked[-1][1]
    for method, path, values in recorder.seen:
        assert len(values) == 1, (method, path, values)
        stamp = STAMP.fullmatch(values[0])
        assert stamp, (method, path, values)
        # nginx's clock is this machine's: within the test's span (its $msec is cached per
        # event loop turn, hence the slack).
        assert first - 1 <= float(stamp.group(1)) <= last + 1, (method, path, values, first)


def test_the_rendered_config_stamps_every_location_that_sets_its_own_headers(
    tmp_path: Path
) -> None:
    """A location with any proxy_set_header of its own inherits none from http{}: each such
    location that proxies to the gateway sets X-Request-Start itself."""
    from seckill.ops.stack import nginx

    text = nginx.render(nginx.NginxOptions(backends=["127.0.0.1:9001"], run_dir=tmp_path))
    http_level = text.split("server {", 1)[0]
    assert 'proxy_set_header X-Request-Start "t=$msec";' in http_level
    blocks = re.findall(r"\n        location [^{]*\{(.*?)\n        \}", text, re.S)
    own = [b for b in blocks if "proxy_pass http://seckill" in b and "proxy_set_header" in b]
    assert own, "the micro-cached location sets its own headers"
    for block in own:
        assert 'proxy_set_header X-Request-Start "t=$msec";' in block, block
