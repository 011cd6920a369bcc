"""nginx in front of real gunicorn instances, for the nginx tests. A plugin of
``tests/conftest.py``: its fixtures need no import.

* ``instances``: two gunicorn instances (one gevent worker each, ``SECKILL_BEHIND_PROXY=1``,
  each naming itself in ``X-Seckill-Instance``) on the session's Valkey, started once for each
  test module that uses them; :func:`front` starts an nginx of the test's own in front of them
  (it starts in a fraction of a second) with the options the test is about;
* ``http``: a client pool, and :func:`call`, one request through it (an :class:`Answer`);
* ``fake_instance``: a broken instance, a small TCP server that reads a request and then
  closes the connection, never answers, or answers ``{}`` (:class:`FakeInstance`);
* :func:`frozen`: an instance's gunicorn stopped with SIGSTOP for the length of a block.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.servers import NginxFront, gunicorn_server, nginx_server, require_nginx
from tests.support.timing import iso
from tests.support.tokens import ADMIN

TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)
USER_RATE = "5/second"


@dataclass
class Instances:
    """The module's two gunicorn instances: their addresses, names, access logs, key
    prefix and folder."""
    backends: list[str]
    names: list[str]
    access_logs: list[Path]
    prefix: str
    tmp: Path

    def key(self, aid: str, name: str) -> str:
        return f"{self.prefix}:{{{aid}}}:{name}"


@pytest.fixture(scope="module")
def instances(
    valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Instances]:
    """Two gunicorn instances on the session's Valkey for this module's tests (without
    nginx, the test fails or skips before anything starts)."""
    require_nginx()  # before starting anything
    tmp = tmp_path_factory.mktemp("nginx-instances")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    env = {
        **gateway_env(valkey.url, prefix, tmp / "data", f"sqlite:///{tmp / 'orders.db'}",
                      USER_RATE),
        "SECKILL_BEHIND_PROXY": "1",
    }
    names = ["inst-a", "inst-b"]
    logs = [tmp / f"{name}.access.log" for name in names]
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(gunicorn_server(
                {**env, "SECKILL_INSTANCE": name, "GUNICORN_ACCESSLOG": str(log)}, workers=1,
            ))
            for name, log in zip(names, logs, strict=True)
        ]
        yield Instances([b.removeprefix("http://") for b in bases], names, logs, prefix, tmp)


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    """A pool of HTTP connections for the test (16 at most, blocking when all are busy)."""
    pool = urllib3.PoolManager(maxsize=16, block=True)
    yield pool
    pool.clear()


@dataclass
class Answer:
    """An answer through nginx: status, JSON body (None if not JSON), headers."""
    status: int
    body: Any
    headers: Any


def call(http: urllib3.PoolManager, method: str, url: str, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> Answer:
    """One request through ``http``: never retried nor redirected."""
    response = http.request(method, url, headers=headers, body=body, timeout=TIMEOUT,
                            retries=False, redirect=False)
    content_type = response.headers.get("Content-Type", "")
    parsed = orjson.loads(response.data) if content_type.startswith("application/json") else None
    return Answer(response.status, parsed, response.headers)


def expect_json_error(answer: Answer, status: int, error: str) -> None:
    """Assert ``answer`` is the contract's JSON error ``error`` with ``status``."""
    assert answer.status == status, (answer.status, answer.body)
    assert answer.headers.get("Content-Type", "").startswith("application/json"), answer.headers
    assert isinstance(answer.body, dict) and answer.body["error"] == error, answer.body
    assert answer.body["message"], answer.body


def create_activity(http: urllib3.PoolManager, admin_base: str, **fields: Any) -> str:
    """Create an activity (open for an hour) through ``admin_base``; its id."""
    body = {"id": f"n{uuid.uuid4().hex[:10]}", "name": "Phone", "total": 10,
            "starts_at": iso(-60), "ends_at": iso(3600), **fields}
    made = call(http, "POST", f"{admin_base}/admin/activities",
                {**ADMIN, "Content-Type": "application/json"}, orjson.dumps(body))
    assert made.status == 201, made.body
    return str(body["id"])


@contextlib.contextmanager
def front(instances: Instances, tmp_path: Path, backends: list[str] | None = None,
          **options: Any) -> Iterator[NginxFront]:
    """An nginx of the test's own in front of ``backends`` (the module's instances unless
    told), with ``options`` for the config it renders."""
    with nginx_server(backends or instances.backends, tmp_path / "nginx", **options) as proxy:
        yield proxy


class FakeInstance:
    """A TCP server standing in for a gunicorn instance: it reads a request's head, counts it
    by method, then closes the connection without answering (``close``), keeps it open and
    never answers (``stall``) until stopped, or answers ``{}`` and waits for the next request
    on the same connection (``answer``, keeping every request head it saw)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen: collections.Counter[str] = collections.Counter()
        self.heads: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._serve, daemon=True)]
        self._threads[0].start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _handle(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
        with conn:
            conn.settimeout(5)
            for _ in range(1000):  # requests on this connection
                head = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            return
                        head += chunk
                if b"\r\n\r\n" not in head:
                    return
                with self._lock:
                    self.seen[head.split(b" ", 1)[0].decode()] += 1
                    self.heads.append(head)
                if self.mode == "stall":
                    self._stop.wait(30)
                if self.mode != "answer":
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\n\r\n{}")

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for thread in self._threads:
            thread.join(5)


@pytest.fixture
def fake_instance(request: pytest.FixtureRequest) -> Iterator[FakeInstance]:
    """A :class:`FakeInstance` in the mode the test names (``indirect`` parameter)."""
    server = FakeInstance(request.param)
    yield server
    server.close()


@contextlib.contextmanager
def frozen(backend: str) -> Iterator[None]:
    """The gunicorn serving ``backend`` (this process's child, and its workers) stopped with
    SIGSTOP for the block; SIGCONT afterwards whatever happens."""
    port = backend.rsplit(":", 1)[1]
    masters = [p for p in psutil.Process().children()
               if f"127.0.0.1:{port}" in " ".join(p.cmdline())]
    assert len(masters) == 1, masters
    group = [masters[0], *masters[0].children(recursive=True)]
    assert len(group) >= 2, group  # the master and its worker
    stopped: list[int] = []
    try:
        for process in group:
            os.kill(process.pid, signal.SIGSTOP)
            stopped.append(process.pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
