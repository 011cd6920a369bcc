"""The gunicorn worker the gateway runs on: gevent's, with read deadlines and JSON errors.

``gunicorn.conf.py`` names :class:`GatewayWorker`. It is gunicorn's own gevent worker with two
changes, both on the connection, before or around the application:

* **Read deadlines.** gunicorn bounds the wait for a keep-alive connection's next request
  (``keepalive``) and nothing else: a client may take as long as it likes to finish its headers
  or its body, holding a greenlet and a connection. Here each read meets a deadline: the
  headers within ``GUNICORN_HEADER_TIMEOUT`` seconds of the request's first byte, the body within
  ``GUNICORN_BODY_TIMEOUT`` seconds of the headers. A missed deadline is a JSON 408 ``timeout``
  and the connection is closed. An idle keep-alive connection is not a late request: its
  clock starts with the next request's first byte.
* **JSON errors.** What gunicorn answers itself (a request line over 4 094 bytes: 414; a header
  over 8 KiB or over 100 headers: 431; ``Expect`` other than ``100-continue``: 417; a garbage
  request line, two Content-Lengths, a NUL in the path...: 400; an unknown transfer coding:
  501) is the contract's JSON ``{"error", "message"}`` instead of an HTML page. gunicorn still
  decides the status and logs it: its answer is written into a buffer and translated, so a
  refusal a later gunicorn adds is translated too (its status's code, e.g. ``bad_request``).
  Like every answer of the gateway it names the instance and the outcome (``X-Seckill-Instance``,
  ``X-Seckill-Outcome``: the document marks them required) and, since the connection is then
  closed, says ``Connection: close``; so does an application's answer after which the
  connection is closed (a body cut short, too large or too slow: ``seckill.web.body``).

Why a worker subclass rather than a stricter parser in front: the parser is gunicorn's (it
already refuses the request smuggling shapes), only its answers and its missing deadlines were
wrong, and a proxy in front would cost a hop on every purchase. nginx in front has its own
deadlines and JSON pages (``nginx/nginx.conf.template``).
"""

from __future__ import annotations

import logging
import socket
import time
from http import HTTPStatus
from typing import Any, NoReturn

import orjson
from gunicorn import glogging, util
from gunicorn.workers.ggevent import GeventWorker

from seckill import logs
from seckill.config import instance_name, log_component, read_deadlines
from seckill.domain import errors

log = logging.getLogger(__name__)

# What each status gunicorn answers with means in the contract's words.
STATUS_CODES = {
    400: "bad_request", 403: "forbidden", 408: "timeout", 413: "too_large", 414: "too_large",
    417: "expectation_failed", 431: "too_large", 500: "internal", 501: "not_implemented",
    505: "http_version_not_supported",
}


class DeadlineSocket:
    """A client connection whose reads meet the request's deadlines (see the module's text);
    everything else is the socket's own."""

    def __init__(self, sock: socket.socket, header_timeout: float, body_timeout: float) -> None:
        self._sock = sock
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self._deadline: float | None = None  # None: between requests (gunicorn's keepalive)
        self._close_after_answer = False
        self.request: Any = None  # gunicorn's request being served, once its headers are in

    @property
    def close_after_answer(self) -> bool:
        """Set when the request's body is left unread (a deadline, or the app refused it part
        way, see seckill.web.body): the connection is closed after the answer."""
        return self._close_after_answer

    @close_after_answer.setter
    def close_after_answer(self, value: bool) -> None:
        self._close_after_answer = value
        if value and self.request is not None:
            # gunicorn then writes "Connection: close" in the answer's head, not keep-alive:
            # a client must not send its next request on a connection about to close.
            self.request.must_close = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def recv(self, size: int) -> bytes:
        """One read, within the current request's deadline."""
        if self._deadline is None:  # waiting for a request: its first byte starts the clock
            data = self._sock.recv(size)
            if data:
                self._deadline = time.monotonic() + self.header_timeout
            return data
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            self._expired()
        self._sock.settimeout(remaining)
        try:
            return self._sock.recv(size)
        except TimeoutError:
            self._expired()
        finally:
            self._sock.settimeout(None)

    def _expired(self) -> NoReturn:
        self.close_after_answer = True  # the rest of the request will never be read
        raise errors.RequestTimeout()

    def begin_body(self) -> None:
        """The headers are in: the body's clock starts."""
        self._deadline = time.monotonic() + self.body_timeout

    def end_request(self) -> None:
        """The answer is out: back to waiting for the next request."""
        self._deadline = None
        self.request = None


class _Captured:
    """A stand-in for the client socket that keeps what gunicorn writes to it."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.data = b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def gettimeout(self) -> float | None:
        """Blocking, as far as ``util.write_nonblock`` can tell."""
        return None

    def setblocking(self, flag: bool) -> None:
        """Nothing to change on a buffer."""

    def sendall(self, data: bytes) -> None:
        """Keep the bytes."""
        self.data += data


def json_answer(failure: errors.SeckillError, instance: str) -> bytes:
    """A complete HTTP/1.1 answer carrying ``failure``'s JSON body, from ``instance``; the
    connection closes."""
    body = orjson.dumps(failure.body())
    try:
        reason = HTTPStatus(failure.status).phrase
    except ValueError:
        reason = "Error"
    head = [f"HTTP/1.1 {failure.status} {reason}", "Connection: close",
            "Content-Type: application/json", f"Content-Length: {len(body)}",
            f"X-Seckill-Instance: {instance}", f"X-Seckill-Outcome: {failure.code}",
            *(f"{name}: {value}" for name, value in failure.headers().items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def translated(html_answer: bytes, exc: BaseException) -> errors.SeckillError:
    """The contract's error for the answer gunicorn wrote (its status line decides)."""
    status_line = html_answer.split(b"\r\n", 1)[0].decode("latin-1")
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        status = 500
    code = STATUS_CODES.get(status) or (f"http_{status}" if status < 500 else "internal")
    if status >= 500 and status != 501:
        message = "unexpected failure in the HTTP server"
    else:
        reason = " ".join(status_line.split()[2:]) or "malformed request"
        detail = str(exc)
        message = f"{reason}: {detail}"[:300] if detail else reason
    return errors.ProtocolError(status, code, message)


class GatewayWorker(GeventWorker):
    """gunicorn's gevent worker with read deadlines and JSON answers (module text)."""

    def init_process(self) -> None:
        """Read the deadlines (refusing a bad value at start), then run as gevent's worker."""
        self.header_timeout, self.body_timeout = read_deadlines()
        self.seckill_instance = instance_name()  # as the application names this process
        super().init_process()

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        """Serve a connection whose reads meet deadlines."""
        super().handle(listener, DeadlineSocket(client, self.header_timeout, self.body_timeout),
                       addr)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        """Serve one request; close the connection after it when its body was left unread."""
        sock.begin_body()
        sock.request = req
        try:
            handled: bool = super().handle_request(listener_name, req, sock, addr)
        finally:
            sock.end_request()
        if sock.close_after_answer:
            raise StopIteration()
        return handled

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """Answer what gunicorn refuses (or a read deadline) with the contract's JSON."""
        if isinstance(exc, errors.SeckillError):  # a deadline while reading the headers
            log.info("request from %s cut off: %s", (addr or ("",))[0], exc.message)
            failure = exc
        else:
            captured = _Captured(client)
            super().handle_error(req, captured, addr, exc)  # logs it; decides the status
            failure = translated(captured.data, exc)
        try:
            util.write_nonblock(client, json_answer(failure, self.seckill_instance))
        except Exception:  # the client is gone: nothing to answer
            log.debug("could not send the %s answer", failure.status)


class GatewayLogger(glogging.Logger):
    """gunicorn's logger, writing the stack's one format (``seckill.logs``): its error and
    access lines and the app's own loggers, named by the instance (``SECKILL_INSTANCE``)."""

    def setup(self, cfg: Any) -> None:
        """gunicorn's setup, then the stack's format (and collapsed repeats) on its handlers."""
        super().setup(cfg)
        component = log_component()
        formatter = logs.Formatter(component, logs.json_wanted())
        for handler in (*self.error_log.handlers, *self.access_log.handlers):
            handler.setFormatter(formatter)
        for handler in self.error_log.handlers:
            handler.addFilter(logs.CollapseRepeats(handler))
        logs.configure(component)
