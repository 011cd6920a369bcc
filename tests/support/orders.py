"""Helpers for the fault-injection tests of the orders path. Nothing here is a mock:
each helper drives or inspects a real server, a real database or a real worker.

* ``dedicated_valkey``: a Valkey of the test's own (to kill -9, restart or FLUSHALL; the
  session's shared server is never touched that way);
* ``drain`` / ``WorkerThread`` / ``worker_process``: the real orders worker, in-process or as
  ``python -m seckill.worker``;
* ``queue_purchases``: run the real purchase script for many users at once (fast set-up of a
  backlog);
* ``stored_orders`` / ``stream_order_ids`` / ``pending``: what the database and the stream hold;
  ``stream_key`` / ``consumer_names``: an activity's stream, and its group's consumers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import redis
import sqlalchemy as sa

from seckill.domain.orders import StoredOrder
from seckill.ops.stack.embedded import EmbeddedValkey, die_with_parent
from seckill.sql import engine as db
from seckill.sql.book import OrderBook
from seckill.store.plumbing.connection import close_client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.worker.orders import GROUP, OrdersWorker
from seckill.worker.stop import StopFlag
from tests.support.servers import REPO_ROOT, stop_process


@contextlib.contextmanager
def dedicated_valkey(
    data_dir: Path, appendfsync: str = "always", extra_args: Sequence[str] = ()
) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(data_dir, appendfsync=appendfsync, extra_args=list(extra_args))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the database -------------------------------------------------------------------------


def stored_orders(database_url: str, aid: str) -> list[StoredOrder]:
    """Every row of the activity, read on a connection of our own."""
    engine = db.make_engine(database_url)
    try:
        return OrderBook(engine).orders_of(aid)
    finally:
        engine.dispose()


class OrderCounter:
    """Counts an activity's rows repeatedly on one engine (for polling while a worker runs)."""

    def __init__(self, database_url: str) -> None:
        self.engine = db.make_engine(database_url)

    def __call__(self, aid: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(
                sa.text("SELECT count(*) FROM seckill_orders WHERE activity_id = :aid"),
                {"aid": aid},
            ).scalar_one())

    def close(self) -> None:
        self.engine.dispose()


# --- Redis ----------------------------------------------------------------------------------


def stream_order_ids(rds: redis.Redis, stream: str, kind: str = "purchase") -> list[str]:
    entries = cast(list[tuple[str, dict[str, str]]], rds.xrange(stream))
    return [f["order_id"] for _, f in entries if f.get("type") == kind]


def pending(rds: redis.Redis, stream: str) -> int:
    try:
        summary: Any = rds.xpending(stream, GROUP)
    except redis.ResponseError:
        return 0
    return int(summary["pending"])


def queue_purchases(
    rds: redis.Redis, keys: KeySpace, aid: str, uids: Sequence[str], chunk: int = 500
) -> dict[str, str]:
    """Run the real purchase script once per user, pipelined; returns user -> order id."""
    script = Scripts(rds).purchase
    script.sha = rds.script_load(script.script)
    bought: dict[str, str] = {}
    for start in range(0, len(uids), chunk):
        pipe = rds.pipeline(transaction=False)
        part = uids[start : start + chunk]
        for uid in part:
            # execute_command: a cluster pipeline refuses .evalsha, not the command itself.
            pipe.execute_command("EVALSHA", script.sha, 3, *keys.activity_keys(aid), uid, 1, aid)
        for uid, reply in zip(part, pipe.execute(), strict=True):
            assert reply[0] == "ok", (uid, reply)
            bought[uid] = str(reply[1])
    return bought


# --- the worker -----------------------------------------------------------------------------


def drain(worker: OrdersWorker, max_steps: int = 200, timeout: float = 30.0) -> int:
    """Step the worker until a step sees nothing (reclaims included); returns entries seen."""
    seen = 0
    deadline = time.monotonic() + timeout
    for _ in range(max_steps):
        got = worker.step()
        if got == 0:
            got = worker.reclaim(None)
            if got == 0:
                return seen
        seen += got
        assert time.monotonic() < deadline, "the worker did not drain in time"
    raise AssertionError(f"the worker still had entries after {max_steps} steps")


class WorkerThread:
    """``worker.run(stop)`` in a thread, as ``seckill worker`` runs it; a crash is kept and
    re-raised by ``stop()`` (a worker that dies silently must fail the test)."""

    def __init__(self, worker: OrdersWorker) -> None:
        self.worker = worker
        self.flag = StopFlag()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="orders-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run(self.flag)
        except BaseException as exc:
            self.error = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def __enter__(self) -> WorkerThread:
        self.thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.flag.event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop warmly in time"
        if self.error is not None:
            raise AssertionError(f"the worker crashed: {self.error!r}") from self.error

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive() or self.error is not None:
            self.stop()


def worker_process(
    env: Mapping[str, str], log_path: Path, **options: str
) -> subprocess.Popen[bytes]:
    """``python -m seckill.worker`` as a child (its own session, dies with us)."""
    full_env = {**os.environ, **env, **options}
    with log_path.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "seckill.worker"],
            cwd=str(REPO_ROOT),
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def stop_worker_process(process: subprocess.Popen[bytes]) -> int | None:
    stop_process(process, timeout=15.0)
    return process.returncode


@contextlib.contextmanager
def built_worker(settings: Any, **options: Any) -> Iterator[OrdersWorker]:
    """``build_worker(settings, **options)``, its connections closed afterwards."""
    from seckill.worker.run import build_worker

    worker = build_worker(settings, **options)
    try:
        yield worker
    finally:
        close_client(worker.client)
        worker.book.engine.dispose()


# --- making the database unavailable, for real and reversibly -------------------------------


class DatabaseOutage:
    """Take the order database away from the worker, then give it back.

    * SQLite: a separate connection holds ``BEGIN EXCLUSIVE`` (every other connection gets
      "database is locked"; root ignores file permissions, so chmod would not do it). The
      worker's engine uses a short busy timeout so that it sees the error rather than waiting
      for the lock inside sqlite.
    * PostgreSQL: the worker logs in as a role of this test's own; the outage is
      ``ALTER ROLE ... NOLOGIN`` plus ``pg_terminate_backend`` of that role's sessions, the
      return is ``ALTER ROLE ... LOGIN``. Nothing else on the server is affected.
    """

    def __init__(self, database_url: str, name: str) -> None:
        self.url = sa.engine.make_url(database_url)
        self.sqlite = self.url.get_backend_name() == "sqlite"
        self.role = f"{name}_worker"
        self.schema = name
        self._lock: Any = None
        self.admin: sa.Engine | None = None
        if not self.sqlite:
            self.admin = sa.create_engine(
                db.make_engine(database_url).url, isolation_level="AUTOCOMMIT"
            )
            OrderBook(self.admin).ready()
            with self.admin.connect() as conn:
                conn.execute(sa.text(f'CREATE ROLE "{self.role}" LOGIN'))
                conn.execute(sa.text(f'GRANT USAGE ON SCHEMA "{self.schema}" TO "{self.role}"'))
                conn.execute(sa.text(
                    f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{self.schema}" '
                    f'TO "{self.role}"'
                ))
                # The outbox's seq: the worker's batch writes its events.
                conn.execute(sa.text(
                    f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{self.schema}" TO "{self.role}"'))

    def worker_engine(self) -> sa.Engine:
        if self.sqlite:
            return sa.create_engine(self.url, connect_args={"timeout": 0.2})
        return db.make_engine(self.url.set(username=self.role).render_as_string(False))

    def begin(self) -> None:
        if self.sqlite:
            import sqlite3

            assert self.url.database
            self._lock = sqlite3.connect(self.url.database, isolation_level=None)
            self._lock.execute("BEGIN EXCLUSIVE")
            return
        assert self.admin is not None
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'ALTER ROLE "{self.role}" NOLOGIN'))
            self._terminate(conn)

    def end(self) -> None:
        if self.sqlite:
            if self._lock is not None:
                self._lock.execute("COMMIT")
                self._lock.close()
                self._lock = None
            return
        assert self.admin is not None
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'ALTER ROLE "{self.role}" LOGIN'))

    def count(self, aid: str) -> int:
        """Rows of the activity, read past the outage (on the lock holder's own connection)."""
        query = "SELECT count(*) FROM seckill_orders WHERE activity_id = ?"
        if self.sqlite:
            import sqlite3

            assert self.url.database
            conn = self._lock or sqlite3.connect(self.url.database)
            try:
                return int(conn.execute(query, (aid,)).fetchone()[0])
            finally:
                if conn is not self._lock:
                    conn.close()
        assert self.admin is not None
        with self.admin.connect() as conn:
            return int(conn.execute(
                sa.text("SELECT count(*) FROM seckill_orders WHERE activity_id = :aid"),
                {"aid": aid},
            ).scalar_one())

    def _terminate(self, conn: sa.Connection) -> None:
        conn.execute(
            sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"),
            {"r": self.role},
        )

    def close(self) -> None:
        self.end()
        if self.admin is None:
            return
        with self.admin.connect() as conn:
            self._terminate(conn)
            conn.execute(sa.text(f'DROP OWNED BY "{self.role}"'))
            conn.execute(sa.text(f'DROP ROLE "{self.role}"'))
        self.admin.dispose()


def stream_key(prefix: str, aid: str) -> str:
    """The activity's order stream."""
    return f"{prefix}:{{{aid}}}:orders"


def consumer_names(rds: redis.Redis, stream: str) -> set[str]:
    """The names of the group's consumers on ``stream``."""
    found: Any = rds.xinfo_consumers(stream, GROUP)
    return {str(c["name"]) for c in found}
