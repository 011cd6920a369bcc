"""A TCP relay in front of the test's PostgreSQL that can take it away or hang it.

The PostgreSQL the tests share is never stopped or paused: each test puts a relay of its own
between its gateway and the server, and the relay plays the fault. ``down()`` is a stopped
server (open connections cut, new ones cut at their first byte); ``hang()`` is a frozen one
(SIGSTOP: connections stay open and are even accepted, but no byte goes either way); ``up()``
forwards again, the bytes held back included. Nothing here is a mock: client and server are
real.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.support.relay import ChunkHook, Relay

UP, DOWN, HUNG = "up", "down", "hung"


class DatabaseRelay(Relay):
    """Relay ``127.0.0.1:<port>`` to the PostgreSQL of ``database_url`` (on this machine);
    :attr:`database_url` is the one to give the gateway: the same, through the relay."""

    def __init__(self, database_url: str) -> None:
        parsed = make_url(database_url)
        self.state = UP
        self._changed = threading.Condition()
        super().__init__(int(parsed.port or 5432))
        self.database_url = parsed.set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False)

    def down(self) -> None:
        """A stopped server: every open connection cut, new ones cut at their first byte."""
        self._set(DOWN)
        with self._lock:
            sockets = list(self._sockets)
        self._shutdown(*sockets)

    def hang(self) -> None:
        """A frozen server: nothing forwarded either way, connections kept (and accepted)."""
        self._set(HUNG)

    def up(self) -> None:
        """Forward again (what was held back first)."""
        self._set(UP)

    def _set(self, state: str) -> None:
        with self._changed:
            self.state = state
            self._changed.notify_all()

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        """Both ways alike: held while hung, cut while down."""
        return self._pass, self._pass

    def _pass(self, chunk: bytes) -> bool:
        with self._changed:
            # Hung: the chunk is held (the kernel has acknowledged it, as it does for a
            # SIGSTOPped server) until the relay is up again or closed.
            self._changed.wait_for(lambda: self.state != HUNG)
            return self.state == UP

    def close(self) -> None:
        """Release what is held, then close as a relay does."""
        self._set(DOWN)
        super().close()


class SqliteWriteLock:
    """Another connection holding SQLite's write lock (``BEGIN IMMEDIATE``): every other
    writer waits for it, as behind a long transaction; readers go on (WAL)."""

    def __init__(self, database_url: str) -> None:
        import sqlite3

        database = make_url(database_url).database
        assert database
        self._conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self._held = False

    def hold(self) -> None:
        """Take the write lock (waits for a writer that has it, 10 s at most)."""
        self._conn.execute("PRAGMA busy_timeout = 10000")
        self._conn.execute("BEGIN IMMEDIATE")
        self._held = True

    def release(self) -> None:
        """Give the lock back."""
        if self._held:
            self._conn.execute("COMMIT")
            self._held = False

    def close(self) -> None:
        """Release, and close the connection."""
        self.release()
        self._conn.close()


def is_sqlite(database_url: str) -> bool:
    """Whether ``database_url`` names a SQLite database."""
    return sa.engine.make_url(database_url).get_backend_name() == "sqlite"
