"""Raw HTTP/1.1 on a socket, for the tests of what a hostile client can do on the wire:
a request written byte by byte (:func:`request`, :func:`chunked`), sent on a fresh connection
and its answer read, with whether the server then closed it (:func:`exchange`,
:class:`Answer`)."""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN


@dataclass
class Answer:
    """One answer read off the socket, or the lack of one (``status`` None)."""
    status: int | None  # None: the connection closed without an answer
    headers: dict[str, str]
    body: Any
    raw: bytes
    closed: bool  # the server closed the connection after the answer
    seconds: float

    def json_error(self, status: int | set[int], error: str | set[str]) -> dict[str, Any]:
        """The contract's JSON error body, checked."""
        statuses = {status} if isinstance(status, int) else status
        errors = {error} if isinstance(error, str) else error
        assert self.status in statuses, self.raw[:600]
        assert self.headers.get("content-type", "").startswith("application/json"), self.raw[:600]
        assert isinstance(self.body, dict), self.raw[:600]
        assert self.body.get("error") in errors and self.body.get("message"), self.body
        return self.body


def exchange(base: str, data: bytes, half_close: bool = False, wait: float = 15.0) -> Answer:
    """Send ``data`` on a fresh connection and read one answer (and whether the server then
    closed the connection); ``half_close`` shuts our sending side after the data."""
    host, port = base.removeprefix("http://").split(":")
    started = time.monotonic()
    raw, closed, answer = b"", False, None
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:  # answered and still open after a second, or no answer at all
                break
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                closed = True
                break
            raw += chunk
            answer = answer or _parse(raw, started)
            if answer is not None:
                sock.settimeout(1.0)  # answered: does the server close the connection now?
    answer = answer or Answer(None, {}, None, raw, closed, time.monotonic() - started)
    answer.closed = closed
    return answer


def _parse(raw: bytes, started: float) -> Answer | None:
    """The answer in ``raw`` once its head and whole body are in, else None."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if len(rest) < length:
        return None
    try:
        body = orjson.loads(rest[:length])
    except orjson.JSONDecodeError:
        body = rest[:length].decode("latin-1")
    return Answer(status, headers, body, raw, False, time.monotonic() - started)


def request(method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes = b"", length: int | None = None) -> bytes:
    """A raw HTTP/1.1 request; ``length`` overrides the Content-Length sent."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if length is not None or body:
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(path: str, headers: dict[str, str], body: bytes, piece: int = 1000) -> bytes:
    """A raw chunked POST of ``body`` in pieces of ``piece`` bytes."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    out = ("\r\n".join(lines) + "\r\n\r\n").encode()
    for start in range(0, len(body), piece):
        part = body[start:start + piece]
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


ADMIN_JSON = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}


def sale(base: str) -> str:
    """A fresh open activity of 10 units, created with a raw request to ``base``; its id."""
    aid = f"r{uuid.uuid4().hex[:10]}"
    body = orjson.dumps({"id": aid, "name": "Phone", "total": 10, "starts_at": iso(-60),
                         "ends_at": iso(3600)})
    made = exchange(base, request("POST", "/admin/activities", ADMIN_JSON, body))
    assert made.status == 201, made.raw
    return aid
