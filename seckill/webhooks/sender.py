"""One endpoint's sender: an event signed per Standard Webhooks and POSTed with urllib3.

Headers ``webhook-id`` (the event's id: the same on every attempt and replay),
``webhook-timestamp`` (this attempt's wall-clock second), ``webhook-signature`` (the
``standardwebhooks`` library's ``v1,...``) and ``content-type: application/json``; the body is
the outbox row's, byte for byte. A 2xx answered within the attempt's deadline (connecting
included) is a delivery; anything else (another status, a redirect, which is never followed,
a refused or closed connection, bytes that are no HTTP, an answer too late) is a failed
attempt. Connections are kept alive, one pool per endpoint.
"""

from __future__ import annotations

import dataclasses
import math
import time
from datetime import UTC, datetime

import urllib3
from standardwebhooks.webhooks import Webhook

from seckill.sql.deliveries import Endpoint

BODY_KEPT = 64 * 1024  # an answer's body is read up to this (then the connection is dropped)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """An attempt's result: delivered or not, the status (if any answer), why not."""

    ok: bool
    code: int | None = None
    error: str | None = None


class Sender:
    """Sends to one endpoint, up to ``connections`` at a time (call :meth:`send` from that
    many threads at most)."""

    def __init__(self, endpoint: Endpoint, *, attempt_timeout: float, connect_timeout: float,
                 connections: int) -> None:
        self.endpoint = endpoint
        self.deadline = attempt_timeout
        self.connect_timeout = min(connect_timeout, attempt_timeout)
        self._signer = Webhook(endpoint.secret)
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=connections, block=False,
                                         retries=False,
                                         headers={"user-agent": "seckill-webhooks"})

    def headers(self, event_id: str, body: str, at: datetime) -> dict[str, str]:
        """The Standard Webhooks headers of ``body`` sent as ``event_id`` at ``at``."""
        return {"webhook-id": event_id,
                "webhook-timestamp": str(math.floor(at.timestamp())),
                "webhook-signature": self._signer.sign(event_id, at, body),
                "content-type": "application/json"}

    def send(self, event_id: str, body: str) -> Attempt:
        """One attempt, within the deadline."""
        started = time.monotonic()
        headers = self.headers(event_id, body, datetime.now(UTC))
        try:
            response = self._pool.request(
                "POST", self.endpoint.url, body=body.encode(), headers=headers,
                timeout=urllib3.Timeout(total=self.deadline, connect=self.connect_timeout),
                redirect=False, retries=False, preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            return Attempt(False, None, _describe(exc))
        except OSError as exc:
            return Attempt(False, None, _describe(exc))
        code = response.status
        try:
            complete = self._drain(response, started)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return Attempt(False, code, _describe(exc))
        finally:
            response.release_conn()
        late = time.monotonic() - started > self.deadline
        if late or not complete:
            return Attempt(False, code, f"no complete answer within {self.deadline:g} s")
        if 300 <= code < 400:
            return Attempt(False, code, "redirect (not followed)")
        if not 200 <= code < 300:
            return Attempt(False, code, f"HTTP {code}")
        return Attempt(True, code)

    def _drain(self, response: urllib3.BaseHTTPResponse, started: float) -> bool:
        """Read (and drop) the answer's body within the deadline, so that the connection can
        serve the next attempt; False when it took too long. A body too big to read is
        left, with its connection."""
        read = 0
        while True:
            late = time.monotonic() - started > self.deadline
            if late or read > BODY_KEPT:
                response.close()  # not reusable: its unread rest would be the next answer
                return not late
            chunk = response.read1(16384)
            if not chunk:
                return True
            read += len(chunk)

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.clear()


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = f"{type(exc).__name__}: {reason or exc}"
    return text[:300]
