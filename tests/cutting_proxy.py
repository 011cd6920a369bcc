"""A TCP relay in front of a real Valkey that cuts a connection at an exact moment.

Every reply chunk Valkey sends back is held while ``cut_when()`` is asked; the first time it
answers true, that connection is cut on both sides and the reply is thrown away: the command
it answers has run on the server, and the client never hears so. This is how a test lands a
crash between two writes deterministically (e.g. right after the worker's acknowledgement),
rather than by killing a server at a lucky moment. One cut per proxy; after it the proxy
relays as a plain pipe. Nothing here is a mock: the client and the server are real.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType


class CuttingProxy:
    """Relay ``127.0.0.1:<port>`` to the server on ``upstream_port``; cut once, when told."""

    def __init__(self, upstream_port: int, cut_when: Callable[[], bool]) -> None:
        self.upstream_port = upstream_port
        self.cut_when = cut_when
        self.cuts = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # so that the accept loop sees close()
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        self._spawn(self._accept)

    @property
    def url(self) -> str:
        """The ``redis://`` URL that goes through the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            downstream.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [downstream, upstream]
            self._spawn(self._requests, downstream, upstream)
            self._spawn(self._replies, upstream, downstream)

    def _requests(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            self._shutdown(source, target)

    def _replies(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                if self._should_cut():
                    return  # the reply is dropped; finally cuts both sides
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            self._shutdown(source, target)

    def _should_cut(self) -> bool:
        with self._lock:
            if self.cuts:
                return False
            try:
                cut = bool(self.cut_when())
            except Exception as exc:  # a broken predicate must fail the test, not hang it
                self.errors.append(exc)
                return False
            if cut:
                self.cuts += 1
            return cut

    @staticmethod
    def _shutdown(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting, cut every relayed connection, join the relay threads."""
        self._closed = True
        with self._lock:
            sockets = list(self._sockets)
        self._shutdown(*sockets)  # wakes the relays blocked in recv()
        for thread in self._threads:
            thread.join(5)
        assert not any(thread.is_alive() for thread in self._threads)
        self._listener.close()
        for sock in sockets:
            sock.close()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
