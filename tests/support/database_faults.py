"""A TCP relay in front of the test's PostgreSQL that can take it away or hang it; a SQLite
database locked, moved, or away.

The PostgreSQL the tests share is never stopped or paused: each test puts a relay of its own
between its gateway and the server, and the relay plays the fault. ``down()`` is a stopped
server (open connections cut, new ones cut at their first byte); ``hang()`` is a frozen one
(SIGSTOP: connections stay open and are even accepted, but no byte goes either way); ``up()``
forwards again, the bytes held back included. Nothing here is a mock: client and server are
real.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

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


def move_sqlite(source: Path, target: Path) -> None:
    """Move a SQLite database with its WAL journal and shared memory, over whatever is at
    ``target`` (an empty database made meanwhile, and its own journal, are replaced)."""
    for suffix in ("", "-wal", "-shm"):
        found = Path(f"{source}{suffix}")
        if found.exists():
            found.replace(f"{target}{suffix}")
        else:
            Path(f"{target}{suffix}").unlink(missing_ok=True)


@contextlib.contextmanager
def sqlite_away(database: Path, engine: sa.Engine) -> Iterator[None]:
    """A SQLite database that cannot be opened at all while inside: moved aside (with its
    journal), a folder in its place, and ``engine``'s pooled connections (which would go on
    reading the moved file) closed; put back afterwards."""
    aside = database.with_name(database.name + ".aside")
    engine.dispose()
    move_sqlite(database, aside)
    database.mkdir()
    try:
        yield
    finally:
        engine.dispose()
        database.rmdir()
        move_sqlite(aside, database)
        engine.dispose()
