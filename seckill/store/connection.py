"""Redis plumbing: the connection pool, the background clients, and the purchase's wire.

One blocking pool per process, sized for gevent (thousands of greenlets share a few hundred
connections and wait for one instead of failing with ``MaxConnectionsError``), with short
socket timeouts and **no retries**: redis-py 8 retries on timeouts by default, and a retried
EVALSHA is a second purchase. Callers decide what a failure means (a purchase fails closed).

Key names live in ``seckill.store.keys``, the Lua scripts in ``seckill.store.scripts``.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.retry import Retry

from seckill.config import Settings


def make_pool(settings: Settings) -> redis.BlockingConnectionPool:
    """The process's blocking pool of the requests' connections, with no retries."""
    kwargs = redis.connection.parse_url(settings.redis_url)
    connection_class = kwargs.pop("connection_class", redis.Connection)
    return redis.BlockingConnectionPool(
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_timeout,  # waiting for a free connection
        connection_class=connection_class,
        socket_timeout=settings.socket_timeout,
        socket_connect_timeout=settings.redis_timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
        health_check_interval=0,
        **kwargs,
    )


BACKGROUND_CLIENT_PREFIX = "seckill-background-"


def background_client(client: redis.Redis, name: str) -> redis.Redis:
    """A client for a background thread: the same server, timeouts and (no) retries as
    ``client``, on connections of its own named ``seckill-background-<name>`` on the server
    (``CLIENT LIST``). Background work never waits behind a crowd for the requests' pool, and
    its commands can be told apart from the requests' (the tests count both)."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "client_name": BACKGROUND_CLIENT_PREFIX + name}
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


def _semaphore(limit: int) -> Any:
    """gevent's own semaphore (compiled) where gevent has patched ``threading``, as under
    gunicorn's gevent worker: the patched ``threading.BoundedSemaphore`` is pure Python over a
    Condition and two lock calls per acquire, a few percent of a purchase's CPU in the
    profile. Elsewhere (tests with OS threads, scripts) ``threading``'s."""
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a dependency
        return threading.BoundedSemaphore(limit)
    if monkey.is_module_patched("threading"):
        from gevent.lock import BoundedSemaphore

        return BoundedSemaphore(limit)
    return threading.BoundedSemaphore(limit)


class Wire:
    """The purchase's one round trip: its commands (EVALSHA, then WAITAOF when the durability
    mode asks for it) written in one send on a connection of its own, every reply read back.

    It costs less CPU than redis-py's ``Pipeline`` on the pool, and a connection goes back to
    the idle stack only once each of its replies was read (any failure drops it), so a late
    reply is never taken for the next purchase's answer. At most ``limit`` connections; a
    caller waits up to ``wait`` seconds for one. Why, in detail: docs/internals.md.
    """

    def __init__(self, pool: redis.ConnectionPool, limit: int, wait: float) -> None:
        self._connection_class = pool.connection_class
        self._connection_kwargs = pool.connection_kwargs
        self._idle: list[redis.connection.AbstractConnection] = []
        self._slots = _semaphore(limit)
        self._wait = wait

    def call(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Send ``commands`` at once; their replies, an error reply as its exception object."""
        if not self._slots.acquire(timeout=self._wait):
            raise redis.ConnectionError("No connection available.")
        try:
            connection = (
                self._idle.pop() if self._idle
                else self._connection_class(**self._connection_kwargs)
            )
            try:
                connection.send_packed_command(connection.pack_commands(commands))
                replies: list[Any] = []
                for _ in commands:
                    try:
                        replies.append(connection.read_response())
                    except redis.ResponseError as exc:  # an error reply: read in full
                        replies.append(exc)
            except BaseException:
                connection.disconnect()
                raise
            self._idle.append(connection)
            return replies
        finally:
            self._slots.release()

    def run_script(self, script: Script, keys: list[str], args: list[Any],
                   *after: tuple[Any, ...]) -> list[Any]:
        """EVALSHA of ``script``, then the ``after`` commands, in one send; the replies. The
        script's error reply is raised. NOSCRIPT (Redis restarted, or SCRIPT FLUSH) means it did
        not run: it is loaded and everything sent once more."""
        for attempt in (1, 2):
            replies = self.call(("EVALSHA", script.sha, len(keys), *keys, *args), *after)
            if isinstance(replies[0], NoScriptError) and attempt == 1:
                loaded = self.call(("SCRIPT", "LOAD", script.script))[0]
                if isinstance(loaded, Exception):
                    raise loaded
                script.sha = loaded
                continue
            break
        if isinstance(replies[0], Exception):
            raise replies[0]
        return replies

    def close(self) -> None:
        """Disconnect the idle connections."""
        while self._idle:
            self._idle.pop().disconnect()
