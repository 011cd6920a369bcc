"""Running the webhooks' dispatcher: ``seckill webhooks run``, ``python -m seckill.webhooks``
(``seckill up``'s child), or :func:`run_dispatcher` in a thread (tests)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

import sqlalchemy as sa

from seckill import logs
from seckill.config import Settings, webhook_nice
from seckill.sql.engine import make_engine
from seckill.sql.schema import ensure_schema
from seckill.sql.sealed_rows import check
from seckill.sql.sealing import Keyring
from seckill.webhooks.dispatcher import Clock, Dispatcher
from seckill.webhooks.options import DispatchOptions

log = logging.getLogger(__name__)


def dispatcher_engine(database_url: str) -> sa.Engine:
    """The dispatcher's engine. On SQLite each of its transactions begins with ``BEGIN
    IMMEDIATE``: it writes, and taking the write lock first means waiting for another writer
    (the orders worker, another dispatcher) rather than failing on the upgrade from a read."""
    engine = make_engine(database_url)
    if engine.dialect.name == "sqlite":
        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # the driver leaves BEGIN to us

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
    return engine


def run_dispatcher(database_url: str, *, stop: threading.Event | None = None,
                   clock: Clock | None = None, options: DispatchOptions | None = None,
                   keys: Keyring | None = None) -> None:
    """Deliver the outbox's events until ``stop`` is set (never, without one), then finish
    the attempts in flight and return. The schema is made if missing; no signal handler is
    installed (the caller's business). ``clock`` returns epoch milliseconds (tests move it);
    ``options`` default to :meth:`DispatchOptions.from_env`; ``keys`` (the endpoints' secrets)
    to the environment's, which must open every sealed secret (DataKeyError otherwise)."""
    engine = dispatcher_engine(database_url)
    keys = keys or Keyring.from_environment()
    try:
        ensure_schema(engine)
        check(engine, keys)
        dispatcher = Dispatcher(engine, options or DispatchOptions.from_env(), clock, keys=keys)
        dispatcher.run(stop or threading.Event())
    finally:
        engine.dispose()


def _lower_priority(nice: int) -> None:
    """The sale first (``seckill.config.webhook_nice``): this process's threads, and, when it
    leads a session of its own (``seckill up`` starts every child so), its scheduling group.
    With the kernel's autogroups (``/proc/sys/kernel/sched_autogroup_enabled``) each session is
    scheduled as one group against the others, whatever its threads' nice: measured, a niced
    dispatcher still took 0.37-0.41 of 2 cores from the gateway's share."""
    if not nice:
        return
    os.nice(nice)
    if os.getsid(0) != os.getpid():
        return  # a shell's job (seckill webhooks run): its group is the terminal's
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:  # no autogroups here (or not Linux): the threads' nice is what counts
        pass


def main(settings: Settings) -> int:
    """``python -m seckill.webhooks``: run until SIGTERM/SIGINT (the first finishes the
    attempts in flight, a second stops at once)."""
    logs.configure("webhooks")
    _lower_priority(webhook_nice())
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            log.warning("second signal: stopping now")
            raise SystemExit(1)
        log.info("signal %d: finishing the attempts in flight, then stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run_dispatcher(settings.database_url, stop=stop, options=DispatchOptions.from_env(),
                   keys=Keyring.of(settings))
    return 0
