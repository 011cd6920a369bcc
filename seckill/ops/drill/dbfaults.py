"""The drill's database faults, each a process of the drill's own that it may freeze (SIGSTOP)
or stop without touching a server it did not start:

- SQLite: a connection holding the write lock (``BEGIN EXCLUSIVE``), in a child process, frozen
  while it holds it: every writer waits as behind a hung database;
- PostgreSQL given with ``--database URL``: a TCP proxy between the stack and the server;
  frozen, the stack's connections hang; stopped, they are cut and new ones refused.

Run as ``python -m seckill.ops.drill.dbfaults lock PATH`` or ``... proxy PORT HOST PORT``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy.engine import URL, make_url

HELD = "locked"  # the lock holder's line once it holds the write lock
LISTENING = "listening"  # the proxy's line once it accepts


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "seckill.ops.drill.dbfaults", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_line(process: subprocess.Popen[str], wanted: str, what: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != wanted:
        process.kill()
        raise RuntimeError(f"{what} did not start: {line or process.wait(5)}")


def _close_pipes(process: subprocess.Popen[str]) -> None:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class Frozen:
    """SIGSTOP and SIGCONT of one process the drill started."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def freeze(self) -> None:
        """SIGSTOP, and wait (bounded) until the process is stopped: the signal is delivered
        asynchronously, and a fault that starts before it would not be one."""
        os.kill(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                stat = Path(f"/proc/{self.process.pid}/stat").read_text()
            except OSError:
                return
            if stat[stat.rindex(")") + 2] in "Tt":
                return
            time.sleep(0.01)

    def thaw(self) -> None:
        """SIGCONT."""
        os.kill(self.process.pid, signal.SIGCONT)


class WriteLock(Frozen):
    """A SQLite connection in a child process holding the write lock until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        super().__init__(_child("lock", str(path)))
        _wait_line(self.process, HELD, "the SQLite lock holder")

    def release(self) -> None:
        """Roll back (it continues first if frozen) and wait for it to exit."""
        with contextlib.suppress(ProcessLookupError):
            self.thaw()
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        _close_pipes(self.process)


class Proxy(Frozen):
    """A TCP proxy of the drill's own from a loopback port to the database server."""

    def __init__(self, port: int, host: str, target_port: int) -> None:
        self.port, self.host, self.target_port = port, host, target_port
        super().__init__(self._start())

    def _start(self) -> subprocess.Popen[str]:
        process = _child("proxy", str(self.port), self.host, str(self.target_port))
        _wait_line(process, LISTENING, "the database proxy")
        return process

    def stop(self) -> None:
        """Stop it (SIGKILL): every connection through it cut, new ones refused."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait(10)
        _close_pipes(self.process)

    def start_again(self) -> None:
        """Listen again on the same port."""
        self.process = self._start()

    def close(self) -> None:
        """Stop it for good (continued first if frozen)."""
        with contextlib.suppress(ProcessLookupError):
            self.thaw()
        self.stop()


class Schema:
    """A schema of the drill's own on a PostgreSQL server it did not start, dropped at the
    end: the stack's URL goes through :class:`Proxy`, the drill's own reads go direct."""

    def __init__(self, url: str, run: str) -> None:
        self.url = make_url(url)
        if not self.url.drivername.startswith("postgresql"):
            raise ValueError("--database takes a postgresql:// URL (SQLite is the default)")
        self.name = f"seckill_drill_{run}_{secrets.token_hex(3)}"

    def _in_schema(self, url: URL) -> URL:
        return url.update_query_dict({"options": f"-csearch_path={self.name}"})

    def create(self) -> None:
        """CREATE SCHEMA (the stack's ``seckill up`` creates its tables in it)."""
        self._execute(f'CREATE SCHEMA "{self.name}"')

    def drop(self) -> None:
        """DROP SCHEMA ... CASCADE."""
        self._execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')

    def _execute(self, sql: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url.set(drivername="postgresql+psycopg"))
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(sql))
        finally:
            engine.dispose()

    def direct(self) -> str:
        """The drill's own URL (straight to the server, in the schema)."""
        return self._in_schema(self.url).render_as_string(hide_password=False)

    def through(self, port: int) -> str:
        """The stack's URL: through the proxy on ``port``."""
        return self._in_schema(self.url.set(host="127.0.0.1", port=port)).render_as_string(
            hide_password=False)

    def server(self) -> tuple[str, int]:
        """The server's host and port (what the proxy forwards to)."""
        return self.url.host or "127.0.0.1", int(self.url.port or 5432)


# -- the child processes -----------------------------------------------------------------


def _hold_lock(path: str) -> None:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print(HELD, flush=True)
    sys.stdin.read()  # until the drill closes our stdin
    conn.execute("ROLLBACK")
    conn.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _proxy(port: int, host: str, target_port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for _ in range(50):  # the port a stopped proxy held may linger a moment
        try:
            listener.bind(("127.0.0.1", port))
            break
        except OSError:
            time.sleep(0.1)
    listener.listen(128)
    print(LISTENING, flush=True)
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection((host, target_port), timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> int:
    """The child's entry point."""
    if argv[:1] == ["lock"] and len(argv) == 2:
        _hold_lock(argv[1])
    elif argv[:1] == ["proxy"] and len(argv) == 4:
        _proxy(int(argv[1]), argv[2], int(argv[3]))
    else:
        print("usage: lock PATH | proxy PORT HOST PORT", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
