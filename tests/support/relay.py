"""TCP relays in front of a real Valkey, for tests that need a connection to misbehave at an
exact moment: a reply held back, or a connection cut right after a command ran.

:class:`Relay` is the plain pipe (accept, one thread per direction, close); a subclass decides
what happens to each chunk. Nothing here is a mock: the client and the server are real.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

# What a relay does with a chunk before it is forwarded: False drops it and cuts the connection.
ChunkHook = Callable[[bytes], bool]


class Relay:
    """Relay ``127.0.0.1:<port>`` to the server on ``upstream_port``, chunk by chunk."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
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
        """The ``redis://`` URL that goes through the relay."""
        return f"redis://127.0.0.1:{self.port}/0"

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        """For a new connection: what to do with each request chunk, and each reply chunk."""
        return _forward, _forward

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
            on_request, on_reply = self.hooks()
            self._spawn(self._pipe, downstream, upstream, on_request)
            self._spawn(self._pipe, upstream, downstream, on_reply)

    def _pipe(self, source: socket.socket, target: socket.socket, hook: ChunkHook) -> None:
        try:
            while chunk := source.recv(65536):
                if not hook(chunk):
                    return  # the chunk is dropped; finally cuts both sides
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            self._shutdown(source, target)

    @staticmethod
    def _shutdown(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting, cut every relayed connection, join the relay threads."""
        self._closed = True
        # The accept loop first: a client reconnecting while the relay closes (a pub/sub
        # listener, say) must not slip a connection in after the sockets are listed.
        self._threads[0].join(5)
        with self._lock:
            sockets = list(self._sockets)
        self._shutdown(*sockets)  # wakes the relays blocked in recv()
        for thread in self._threads:
            thread.join(5)
        assert not any(thread.is_alive() for thread in self._threads)
        self._listener.close()
        for sock in sockets:
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _forward(chunk: bytes) -> bool:
    return True


class CuttingProxy(Relay):
    """Cuts a connection once, when told.

    Every reply chunk Valkey sends back is held while ``cut_when()`` is asked; the first time it
    answers true, that connection is cut on both sides and the reply is thrown away: the command
    it answers has run on the server, and the client never hears so. This is how a test lands a
    crash between two writes deterministically (e.g. right after the worker's acknowledgement),
    rather than by killing a server at a lucky moment. After the cut it relays as a plain pipe.
    """

    def __init__(self, upstream_port: int, cut_when: Callable[[], bool]) -> None:
        self.cut_when = cut_when
        self.cuts = 0
        self.errors: list[BaseException] = []
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        """Requests pass; a reply passes unless it is the one to cut."""
        return _forward, lambda chunk: not self._should_cut()

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
