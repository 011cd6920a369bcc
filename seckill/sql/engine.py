"""The order database (SQLAlchemy Core). SQLite by default, PostgreSQL in production.

Every wait on the database is bounded by one setting (``SECKILL_DATABASE_TIMEOUT``), so that
a database that is away or hung costs a request a few seconds and a 503, never a hang:

* PostgreSQL: libpq's ``connect_timeout``; the server's ``statement_timeout`` and
  ``lock_timeout`` (a slow statement or a lock held elsewhere, on a server that answers); the
  pool's wait for a free connection; and a client-side bound on every reply
  (:class:`BoundedConnection`), since a frozen server (SIGSTOP, a stalled disk) keeps its TCP
  connections open and acknowledged: no server-side timeout fires there.
* SQLite: the busy timeout (a writer waits that long for another's lock), in WAL mode, where
  readers never wait for a writer, nor a writer for readers.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import errors as pg_errors
from sqlalchemy.engine import URL, make_url

from seckill.config import database_timeout
from seckill.domain import errors

DATABASE = "database"  # the detail of a 503 whose cause is the database

# Beyond the server's statement_timeout, the time a reply may take before the client gives up
# on the connection: a server that answers reports its own timeout first (the connection stays
# usable); only a frozen one reaches this.
CLIENT_MARGIN = 0.5
# How long the pool's check of a pooled connection waits for SELECT 1: a server that answers
# does so in milliseconds, and a hung one must not cost a whole statement's bound.
PING_TIMEOUT = 1.0


class DatabaseTimeout(psycopg.OperationalError):
    """The server did not answer within the bound; the connection was closed."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server (a statement, a commit, a rollback)
    ends after ``reply_timeout`` seconds: then the connection is closed (its state is unknown)
    and :class:`DatabaseTimeout` raised, which SQLAlchemy takes for a disconnect."""

    reply_timeout: float = 5.0

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """psycopg's wait, with the bound when the caller sets none."""
        try:
            return super().wait(gen, interval=interval,
                                timeout=self.reply_timeout if timeout is None else timeout)
        except pg_errors._WaitTimeout:  # psycopg's own signal of an expired wait
            self.pgconn.finish()
            raise DatabaseTimeout(
                f"the database did not answer within {self.reply_timeout:g} s") from None


def make_engine(url: str, timeout: float | None = None) -> sa.Engine:
    """An engine for ``url``: SQLite (its folder created, WAL), or pooled (PostgreSQL via
    psycopg 3), every wait bounded by ``timeout`` seconds (default: the environment's
    ``SECKILL_DATABASE_TIMEOUT``)."""
    bound = database_timeout() if timeout is None else timeout
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": bound})
        sa.event.listen(engine, "connect", _sqlite_wal)
        return engine
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not psycopg2
    if parsed.get_backend_name() != "postgresql":
        return sa.create_engine(parsed, pool_pre_ping=True, pool_timeout=bound)
    engine = sa.create_engine(
        _with_server_timeouts(parsed, bound), pool_pre_ping=True, pool_size=5, max_overflow=5,
        pool_timeout=bound,
        # libpq counts whole seconds, and takes anything under 2 for 2.
        connect_args={"connect_timeout": max(2, math.ceil(bound))})
    reply_timeout = bound + CLIENT_MARGIN

    @sa.event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        conn = BoundedConnection.connect(*cargs, **cparams)
        conn.reply_timeout = reply_timeout
        return conn

    # The pool's check of a pooled connection (SELECT 1) waits PING_TIMEOUT, not a whole
    # statement's bound: on a hung server the check, then a new connection's timeout, would
    # each take the bound, and a request twice it.
    ping = engine.dialect.do_ping

    def _quick_ping(dbapi_connection: Any) -> bool:
        bounded = dbapi_connection if isinstance(dbapi_connection, BoundedConnection) else None
        if bounded is not None:
            bounded.reply_timeout = min(PING_TIMEOUT, reply_timeout)
        try:
            return bool(ping(dbapi_connection))
        finally:
            if bounded is not None:
                bounded.reply_timeout = reply_timeout

    engine.dialect.do_ping = _quick_ping  # type: ignore[method-assign]
    return engine


def _with_server_timeouts(url: URL, bound: float) -> URL:
    """``url`` with ``statement_timeout`` and ``lock_timeout`` added to its libpq ``options``
    (kept: the ones it has, e.g. a ``search_path``)."""
    ms = max(1, int(bound * 1000))
    given = url.query.get("options", "")
    options = given if isinstance(given, str) else " ".join(given)
    added = f"-c statement_timeout={ms} -c lock_timeout={ms}"
    return url.update_query_dict({"options": f"{options} {added}".strip()})


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    # WAL: readers (the console, stats, order status) never wait for a writer and never hold
    # one up; writers still take turns, each waiting up to the busy timeout. The mode is the
    # file's, kept once set. Switching needs a moment with no other writer: if one holds the
    # lock now, the next connection switches.
    with contextlib.suppress(sqlite3.OperationalError):
        dbapi_connection.execute("PRAGMA journal_mode=WAL")


def database_unavailable(exc: BaseException) -> errors.Unavailable | None:
    """The 503 of a failure that means the database is away, hung or too busy (no connection,
    a timeout, a lock not granted in time, SQLite's "database is locked"), or None for any
    other failure (a bug stays a 500)."""
    if isinstance(exc, sa.exc.TimeoutError | sa.exc.OperationalError | sa.exc.InterfaceError):
        return errors.Unavailable(
            "the database cannot be reached or did not answer in time; try again shortly",
            detail=DATABASE)
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return errors.Unavailable(
            "the database connection was lost; try again shortly", detail=DATABASE)
    return None


def ping(engine: sa.Engine) -> None:
    """Run ``SELECT 1``: raises if the database cannot be reached."""
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
