"""What ``/healthz`` says of the database: a probe that answers in a moment, hung database or not;
and of the sale's store: away, or up but refusing writes for its disk (``storage``).

The console asks every instance's ``/healthz`` with half a second to answer, and a load
balancer asks often; a probe that waits out a hung database's timeout on every call would time
them out (no part named) and pile up connections on it. One probe runs at a time, in the
background; a call waits a moment for it, then reports the last finished probe's result, or
"no answer" once the running one has taken longer than the database's bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from flask import current_app

from seckill.services import Services
from seckill.sql.engine import DatabaseTimeout, ping
from seckill.store.plumbing.connection import ping_redis
from seckill.store.plumbing.storage import read_storage, refuses_writes

_NOT_YET = object()


class DatabaseHealth:
    """``/healthz``'s view of the database: :meth:`failing` is None when it answered."""

    def __init__(self, probe: Callable[[], None], bound: float, wait: float = 0.25) -> None:
        self.probe = probe
        self.bound = bound  # the database's own timeout (SECKILL_DATABASE_TIMEOUT)
        self.wait = wait
        self._lock = threading.Lock()
        self._started: float | None = None  # the running probe's start (monotonic)
        self._done = threading.Event()
        self._last: object = _NOT_YET  # None: answered; a string: what failed

    def failing(self) -> str | None:
        """What is wrong with the database now, in a few words, or None."""
        with self._lock:
            if self._started is None:
                self._started = time.monotonic()
                self._done = threading.Event()
                threading.Thread(target=self._run, args=(self._done,), daemon=True,
                                 name="seckill-database-health").start()
            done, first = self._done, self._last is _NOT_YET
        # The first call waits for a whole probe (a new process's first connection, its
        # schema check); later ones a moment, then the last result stands.
        done.wait(self.bound + 1 if first else self.wait)
        with self._lock:
            if self._started is not None and time.monotonic() - self._started >= self.bound:
                return f"no answer within {self.bound:g} s"
            if self._last is _NOT_YET:
                return f"no answer within {self.bound:g} s"
            return self._last  # type: ignore[return-value]

    def _run(self, done: threading.Event) -> None:
        try:
            self.probe()
            result: str | None = None
        except Exception as exc:
            result = _describe(exc)
        with self._lock:
            self._last = result
            self._started = None
        done.set()


def _describe(exc: BaseException) -> str:
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig else exc
    if isinstance(cause, DatabaseTimeout | sa.exc.TimeoutError):
        return "no answer in time"
    return type(cause).__name__


def database_health(found: Services) -> DatabaseHealth:
    """This app's probe of the database (one per app, made on first use)."""
    extensions = current_app.extensions
    health = extensions.get("seckill.database_health")
    if health is None:
        def probe() -> None:
            found.book.ready()
            ping(found.engine)

        health = extensions.setdefault(
            "seckill.database_health",
            DatabaseHealth(probe, found.settings.database_timeout))
    return health


def store_health(found: Services) -> dict[str, str]:
    """``/healthz``'s parts for the sale's store: ``redis`` when it does not answer,
    ``storage`` (why, in Redis's words) when it answers but refuses writes for its disk (it
    refuses PING then, and serves reads); nothing when healthy."""
    try:
        ping_redis(found.client)
    except Exception as exc:
        if not refuses_writes(exc):
            return {"redis": type(exc).__name__}
        reason = read_storage(found.client, found.settings.data_dir).reason
        return {"storage": reason or str(exc)}
    return {}


def away(failing: dict[str, str]) -> str:
    """The console's words for ``/healthz``'s failing parts: "database away (...)"."""
    return ", ".join(f"{part} away ({why})" for part, why in sorted(failing.items()))
