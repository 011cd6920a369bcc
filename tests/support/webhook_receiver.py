"""A real webhook receiver for the tests: a threaded HTTP/1.1 server on a free
loopback port that verifies every request's Standard Webhooks signature with the
``standardwebhooks`` library, records what it got, and fails on demand.

    with WebhookReceiver(secret) as receiver:
        receiver.fail("500", times=2)      # the next two requests get a 500
        ...
        receiver.delivered_ids()           # webhook-ids answered 2xx, in arrival order

Faults (``mode``): ``ok`` (204), ``500``, ``hang`` (no answer for ``hang_s`` seconds, then the
connection is closed), ``close`` (the connection closed without an answer), ``slow`` (a 2xx
after ``slow_s`` seconds), ``redirect`` (302 to another path), ``garbage`` (bytes that are no
HTTP, then close). ``python -m tests.support.webhook_receiver --port N`` serves ``ok`` only, without
recording (the benchmark's receiver, in a process of its own).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import http.server
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from seckill.domain.events import order_event
from seckill.sql.outbox import add_events
from seckill.sql.schema import outbox, webhook_endpoints

MODES = ("ok", "500", "hang", "close", "slow", "redirect", "garbage")


@dataclasses.dataclass(frozen=True)
class Received:
    """One request as the receiver saw it, and how it answered (``answer``: the mode)."""

    webhook_id: str
    timestamp: str
    signature: str
    body: bytes
    content_type: str
    verified: bool
    answer: str
    at: float  # time.monotonic() when it arrived

    @property
    def ok(self) -> bool:
        return self.verified and self.answer == "ok"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a shop's server would
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        receiver = self.server.receiver
        if receiver is None:  # the benchmark's bare receiver
            self._answer(204)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            Webhook(receiver.secret).verify(body, headers, json_parse=False)
            verified = True
        except WebhookVerificationError:
            verified = False
        webhook_id = headers.get("webhook-id", "")
        mode = receiver.take_mode(webhook_id) if verified else "unverified"
        receiver.enter(webhook_id)
        try:
            self._handle(receiver, mode, headers, body, verified)
        finally:
            receiver.leave(webhook_id)

    def _handle(self, receiver: WebhookReceiver, mode: str, headers: dict[str, str],
                body: bytes, verified: bool) -> None:
        receiver.record(Received(headers.get("webhook-id", ""),
                                 headers.get("webhook-timestamp", ""),
                                 headers.get("webhook-signature", ""), body,
                                 headers.get("content-type", ""), verified, mode,
                                 time.monotonic()))
        if mode == "unverified":
            self._answer(400)
        elif mode == "ok":
            self._answer(204)
        elif mode == "500":
            self._answer(500)
        elif mode == "slow":
            receiver.released.wait(receiver.slow_s)
            self._answer(200)
        elif mode == "redirect":
            self.send_response(302)
            self.send_header("location", "/elsewhere")
            self.send_header("content-length", "0")
            self.end_headers()
        elif mode == "hang":
            receiver.released.wait(receiver.hang_s)
            self.close_connection = True
        elif mode == "close":
            self.close_connection = True
        elif mode == "garbage":
            self.wfile.write(b"\x00\x17garbage \xff\xfe not http\r\n\r\n")
            self.close_connection = True

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    receiver: WebhookReceiver | None = None


class WebhookReceiver:
    """The receiver of one endpoint's secret (see the module's text)."""

    def __init__(self, secret: str, *, hang_s: float = 60.0, slow_s: float = 15.0) -> None:
        self.secret = secret
        self.hang_s = hang_s
        self.slow_s = slow_s
        self.released = threading.Event()  # set on close: hanging handlers give up
        self._lock = threading.Lock()
        self._mode = "ok"
        self._times: int | None = None
        self._got: list[Received] = []
        self._by_id: dict[str, str] = {}  # webhook-id -> mode, for those ids only
        self._in_flight: dict[str, int] = {}
        self.overlaps: list[str] = []  # ids received again while an earlier one was in hand
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def fail(self, mode: str, times: int | None = None) -> None:
        """Answer the next ``times`` requests (None: every one, until told otherwise) with
        ``mode`` (``ok`` heals)."""
        if mode not in MODES:
            raise ValueError(mode)
        with self._lock:
            self._mode, self._times = mode, times

    def heal(self) -> None:
        self.fail("ok")

    def fail_ids(self, ids: set[str], mode: str) -> None:
        """Answer requests carrying one of ``ids`` with ``mode`` until :meth:`heal_ids`."""
        with self._lock:
            self._by_id.update(dict.fromkeys(ids, mode))

    def heal_ids(self) -> None:
        with self._lock:
            self._by_id.clear()

    def enter(self, webhook_id: str) -> None:
        with self._lock:
            if self._in_flight.get(webhook_id):
                self.overlaps.append(webhook_id)
            self._in_flight[webhook_id] = self._in_flight.get(webhook_id, 0) + 1

    def leave(self, webhook_id: str) -> None:
        with self._lock:
            self._in_flight[webhook_id] -= 1

    def take_mode(self, webhook_id: str = "") -> str:
        with self._lock:
            if webhook_id in self._by_id:
                return self._by_id[webhook_id]
            mode = self._mode
            if self._times is not None:
                self._times -= 1
                if self._times <= 0:
                    self._mode, self._times = "ok", None
            return mode

    def record(self, got: Received) -> None:
        with self._lock:
            self._got.append(got)

    def received(self) -> list[Received]:
        """Every request, in arrival order."""
        with self._lock:
            return list(self._got)

    def delivered(self) -> list[Received]:
        """The requests answered 2xx (verified), in arrival order."""
        return [r for r in self.received() if r.ok]

    def delivered_ids(self) -> list[str]:
        return [r.webhook_id for r in self.delivered()]

    def __iter__(self) -> Iterator[Received]:
        return iter(self.received())


class Clock:
    """A dispatcher's clock (epoch ms) that stands still until moved: tests make hours pass."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.ms

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.ms += int(seconds * 1000)


def new_secret() -> str:
    """A ``whsec_`` secret, as the admin API makes them."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def add_endpoint(engine: sa.Engine, url: str, secret: str, events: list[str] | None = None,
                 endpoint_id: str | None = None) -> str:
    """An endpoint row, as the admin API writes it; its id."""
    endpoint_id = endpoint_id or "ep_" + secrets.token_hex(6)
    with engine.begin() as conn:
        conn.execute(webhook_endpoints.insert().values(
            id=endpoint_id, url=url, events=json.dumps(events or ["*"]), secret=secret,
            created_ms=int(time.time() * 1000)))
    return endpoint_id


def add_order_events(engine: sa.Engine, plan: list[tuple[str, str]], at_ms: int) -> list[str]:
    """Write ``(kind, order_id)`` events to the outbox, in this order, one transaction; their
    webhook-ids."""
    events = [order_event(kind, {"order_id": oid, "status": "confirmed", "activity": "a1",
                                 "user": "u-" + oid, "quantity": 1}, at_ms)
              for kind, oid in plan]
    with engine.begin() as conn:
        before = conn.execute(sa.select(sa.func.max(outbox.c.seq))).scalar() or 0
        add_events(conn, events)
        rows = conn.execute(sa.select(outbox.c.event_id).where(outbox.c.seq > before)
                            .order_by(outbox.c.seq)).scalars().all()
    return list(rows)


def main() -> int:
    """A bare receiver (204 to every POST, nothing verified or kept), for the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = _Server(("127.0.0.1", args.port), _Handler)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
