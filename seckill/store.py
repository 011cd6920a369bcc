"""Redis plumbing: the connection pool, the key space, and the Lua scripts.

One blocking pool per process, sized for gevent (thousands of greenlets share a few hundred
connections and wait for one instead of failing with ``MaxConnectionsError``), with short
socket timeouts and **no retries**: redis-py 8 retries on timeouts by default, and a retried
EVALSHA is a second purchase. Callers decide what a failure means (a purchase fails closed).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.retry import Retry

from seckill.config import Settings

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Where ``lua/`` or ``nginx/`` lives: inside an installed wheel, or the source tree."""
    for candidate in (_PACKAGE_DIR / "_files" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cannot find the {name}/ folder next to {_PACKAGE_DIR}")


@functools.cache
def lua_source(name: str) -> str:
    """A script's text, with each ``-- @include <part>`` line replaced by ``lua/include/<part>.lua``
    (Redis runs one chunk per script; this is how two scripts share one piece of Lua)."""
    folder = resource_dir("lua")
    lines = []
    for line in (folder / f"{name}.lua").read_text(encoding="utf-8").splitlines():
        if line.startswith("-- @include "):
            part = line.removeprefix("-- @include ").strip()
            line = (folder / "include" / f"{part}.lua").read_text(encoding="utf-8").rstrip()
        lines.append(line)
    return "\n".join(lines) + "\n"


def make_pool(settings: Settings) -> redis.BlockingConnectionPool:
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


CONFIRMED_SUFFIX = "|c"


def split_buyer_entry(value: str) -> tuple[str, bool]:
    """A buyers-hash value is the order id, suffixed once the order is in the database."""
    if value.endswith(CONFIRMED_SUFFIX):
        return value[: -len(CONFIRMED_SUFFIX)], True
    return value, False


class KeySpace:
    """Key names. Every key of one activity shares the hash tag ``{<aid>}`` (Redis Cluster)."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def meta(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:meta"

    def buyers(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:buyers"

    def orders(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:orders"

    def cancelled(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:cancelled"

    def packets(self, aid: str) -> str:
        """List: the unclaimed red-envelope packets (amounts in cents), grabbed from the left."""
        return f"{self.prefix}:{{{aid}}}:packets"

    def packets_staging(self, aid: str, token: str) -> str:
        """Where packets are pushed before ``create_activity.lua`` renames them into place."""
        return f"{self.prefix}:{{{aid}}}:packets-staging:{token}"

    def amounts(self, aid: str) -> str:
        """Hash: user id -> the amount of their live grab (packets activities)."""
        return f"{self.prefix}:{{{aid}}}:amounts"

    def dead_letters(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:dead"

    def rebuild_lock(self, aid: str) -> str:
        return f"{self.prefix}:{{{aid}}}:rebuild-lock"

    def activity_keys(self, aid: str) -> list[str]:
        return [self.meta(aid), self.buyers(aid), self.orders(aid)]

    def purchase_rate(self, aid: str, uid: str, window_ms: int) -> str:
        """A user's purchase counter for one fixed window (lua/include/rate_limit.lua)."""
        return f"{self.prefix}:{{{aid}}}:rate:{uid}:{window_ms}"

    def grab_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/grab.lua``."""
        return [*self.activity_keys(aid), self.packets(aid), self.amounts(aid)]

    def cancel_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/cancel.lua``."""
        return [self.meta(aid), self.buyers(aid), self.cancelled(aid), self.orders(aid),
                self.packets(aid), self.amounts(aid)]

    def stock_returned_channel(self) -> str:
        """Pub/sub: an activity id is published here when units come back (cancel, restock),
        so that every process drops its sold-out flag for it."""
        return f"{self.prefix}:stock-returned"

    def user_rate(self, uid: str, endpoint: str, window_ms: int) -> str:
        """A user's request counter on one endpoint for one fixed window (lua/rate_limit.lua);
        a user's counters share the hash tag ``{<user>}``, so one script can touch them all."""
        return f"{self.prefix}:rl:{{{uid}}}:{endpoint}:{window_ms}"


class Scripts:
    """The Lua scripts registered once on one client (EVALSHA, reloaded on NOSCRIPT)."""

    def __init__(self, client: redis.Redis) -> None:
        self.purchase: Script = client.register_script(lua_source("purchase"))
        self.grab: Script = client.register_script(lua_source("grab"))
        self.create_activity: Script = client.register_script(lua_source("create_activity"))
        self.cancel: Script = client.register_script(lua_source("cancel"))
        self.confirm: Script = client.register_script(lua_source("confirm"))
        self.unlock: Script = client.register_script(lua_source("unlock"))
        self.restock: Script = client.register_script(lua_source("restock"))
        self.rate_limit: Script = client.register_script(lua_source("rate_limit"))


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

    Why not redis-py's ``Pipeline`` on the pool: for this one call it costs about twice the CPU
    (``python -m bench.wire``: ~130 µs against ~70 µs per purchase), mostly the pool's
    check-out bookkeeping and a non-blocking read on every connection it hands out, which
    guards against a reply left unread by an earlier caller. Here a connection goes back to
    the idle stack only after each of its replies was read; any failure in between (timeout,
    reset) disconnects and drops it, so a late reply can never be taken for the next
    purchase's answer. The connections are redis-py's own (same URL, timeouts, RESP parser),
    at most ``limit`` of them, opened on demand; a caller waits up to ``wait`` seconds for one.
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
        while self._idle:
            self._idle.pop().disconnect()
