"""Everything a gateway process uses, built from the settings in one place, typed.

The web layer and the operator's commands both take their parts from here, so a command takes
the admin API's own path. Nothing connects at build time: the pools and engines open
connections on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from redis.connection import AbstractConnection
from sqlalchemy.engine import make_url

from seckill.config import ConfigError, Settings
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.audit.census import CensusTaker
from seckill.store.plumbing.connection import (
    Client,
    ScriptWire,
    Wire,
    close_client,
    is_cluster,
    make_cluster,
    make_pool,
)
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.routing import ClusterWire
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activities import ActivityStore
from seckill.store.sale.cache import ActivityCache
from seckill.store.sale.challenge import Challenges
from seckill.store.sale.controls import SaleControls
from seckill.store.sale.payments import Payments
from seckill.store.sale.queue import AdmissionQueue
from seckill.store.sale.recovery import Restorer
from seckill.store.sale.soldout import SoldOutBoard
from seckill.store.sale.state import SaleState
from seckill.store.sale.stock import StockService


def challenge_secret(settings: Settings) -> str:
    """The proof-of-work challenges' HMAC key, derived from the URL signing key (no secret of
    its own to configure; rotating SECKILL_SECRET_KEY voids the challenges out, for at most
    their 5 minutes: users solve another)."""
    return hmac.new(settings.secret_keys[0].encode(), b"seckill-altcha-v1",
                    hashlib.sha256).hexdigest()


@dataclasses.dataclass
class Services:
    """The parts of one gateway process."""

    settings: Settings
    client: Client
    keys: KeySpace
    scripts: Scripts
    activities: ActivityStore
    cache: ActivityCache
    stock: StockService
    engine: sa.Engine
    book: OrderBook
    restorer: Restorer
    board: SoldOutBoard
    wire: ScriptWire
    sale: SaleState
    payments: Payments
    queue: AdmissionQueue
    challenges: Challenges
    controls: SaleControls
    census: CensusTaker
    # Also run by close(): parts the web layer adds (the cold routes' limiter's client).
    closers: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    @property
    def cluster(self) -> bool:
        """Whether Redis is a cluster (``SECKILL_REDIS_CLUSTER``, asked of the server)."""
        return not isinstance(self.client, redis.Redis)

    @classmethod
    def build(cls, settings: Settings, read_only: bool = False) -> Services:
        """Wire every part from ``settings``; no connection is opened yet. ``read_only``: every
        Redis command that is not a read is refused before it is sent (:class:`ReadOnlyRefused`)
        and the database refuses writes (:func:`read_only_engine`)."""
        client: Client
        wire: ScriptWire
        if is_cluster(settings):
            client = make_cluster(settings, _read_only(redis.Connection) if read_only else None)
            wire = ClusterWire(client, limit=settings.redis_max_connections,
                               wait=settings.redis_timeout)
        else:
            pool = make_pool(settings)
            if read_only:
                pool.connection_class = _read_only(pool.connection_class)
            client = redis.Redis(connection_pool=pool)
            wire = Wire(pool, limit=settings.redis_max_connections, wait=settings.redis_timeout)
        keys = KeySpace(settings.key_prefix)
        scripts = Scripts(client)
        activities = ActivityStore(client, keys, scripts)
        if read_only:
            engine = read_only_engine(settings.database_url)
        else:
            engine = make_engine(settings.database_url)
        book = OrderBook(engine)
        restorer = Restorer(client, keys, scripts, book)
        cache = ActivityCache(activities, settings.meta_ttl, restore=restorer.ensure)
        board = SoldOutBoard(client, keys, ttl=settings.sold_out_ttl)
        board.on_clear.append(cache.forget)
        cache.on_first_load = lambda: board.ensure_listening(wait=False)
        stock = StockService(
            client, keys, scripts, book, restorer,
            Durability(settings.durability, settings.durability_timeout_ms),
            wire, rates=settings.user_rates,
        )
        queue = AdmissionQueue(client, wire, keys, scripts, restorer, settings.url_ttl)
        controls = SaleControls(activities, book, restorer)
        payments = Payments(stock)
        sale = SaleState(cache, board, stock, wire, keys, scripts.rate_limit,
                         settings.user_rates, queue)
        return cls(settings=settings, client=client, keys=keys, scripts=scripts,
                   activities=activities, cache=cache, stock=stock, engine=engine, book=book,
                   restorer=restorer, board=board, wire=wire, sale=sale,
                   payments=payments, queue=queue,
                   challenges=Challenges(client, keys, challenge_secret(settings)),
                   controls=controls,
                   census=CensusTaker(client, keys, controls, stock, payments, queue))

    def close(self) -> None:
        """Stop the background threads and close every connection."""
        for closer in self.closers:
            closer()
        self.board.close()
        self.cache.close()
        self.wire.close()
        close_client(self.client)
        self.engine.dispose()


# -- read-only services (the operator's read-only commands) -------------------------------

# Every Redis command a read-only Services sends: redis-py's connection handshake (connection
# settings, no data), and commands the server itself flags read-only (tests/test_cli_redis.py
# checks them against COMMAND INFO). A list of what may pass, not of what may not: a command
# missing here is refused, never sent.
HANDSHAKE_COMMANDS = frozenset({
    "AUTH", "HELLO", "SELECT", "CLIENT SETINFO", "CLIENT SETNAME", "CLIENT MAINT_NOTIFICATIONS",
})
# A cluster client reading its slot map (and the commands' key positions).
TOPOLOGY_COMMANDS = frozenset({
    "CLUSTER SLOTS", "CLUSTER SHARDS", "COMMAND", "COMMAND INFO", "COMMAND DOCS",
})
READ_COMMANDS = frozenset({
    "PING", "ECHO", "CLIENT GETNAME", "CLIENT ID", "DBSIZE",
    "EXISTS", "TYPE", "TTL", "PTTL", "SCAN",
    "GET", "MGET", "STRLEN", "GETRANGE",
    "HGET", "HMGET", "HGETALL", "HLEN", "HEXISTS", "HKEYS", "HVALS", "HSCAN", "HSTRLEN",
    "LLEN", "LRANGE", "LINDEX", "LPOS",
    "SCARD", "SISMEMBER", "SMISMEMBER", "SMEMBERS", "SSCAN",
    "ZCARD", "ZSCORE", "ZMSCORE", "ZRANGE", "ZRANGEBYSCORE", "ZRANK", "ZCOUNT", "ZSCAN",
    "XLEN", "XRANGE", "XREVRANGE", "XPENDING", "XINFO STREAM", "XINFO GROUPS",
    "XINFO CONSUMERS", "EVALSHA_RO", "EVAL_RO",
})
_ALLOWED = HANDSHAKE_COMMANDS | TOPOLOGY_COMMANDS | READ_COMMANDS
_CONTAINERS = frozenset(name.split()[0] for name in _ALLOWED if " " in name)


class ReadOnlyRefused(RuntimeError):
    """A read-only command was about to write to Redis; nothing was sent."""

    def __init__(self, command: str, args: tuple[Any, ...]) -> None:
        self.command = command
        key = f" {_text(args[1])}" if len(args) > 1 and " " not in command else ""
        super().__init__(f"refused to send {command}{key}: this command only reads")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _check_read(args: tuple[Any, ...]) -> None:
    words = _text(args[0]).upper().split()
    if len(words) == 1 and words[0] in _CONTAINERS and len(args) > 1:
        words.append(_text(args[1]).upper())
    command = " ".join(words[:2])
    if command not in _ALLOWED:
        raise ReadOnlyRefused(command, args)


class _ReadOnlyConnection(AbstractConnection):
    """Mixed in before a redis-py connection class: every command is checked against
    :data:`HANDSHAKE_COMMANDS` and :data:`READ_COMMANDS` before it is packed, alone or in a
    pipeline."""

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        _check_read(args)
        super().send_command(*args, **kwargs)

    def pack_command(self, *args: Any) -> Any:
        _check_read(args)
        return super().pack_command(*args)

    def pack_commands(self, commands: Iterable[tuple[Any, ...]]) -> Any:
        commands = list(commands)
        for args in commands:
            _check_read(tuple(args))
        return super().pack_commands(commands)


@functools.cache
def _read_only(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    return type(f"ReadOnly{connection_class.__name__}", (_ReadOnlyConnection, connection_class),
                {})


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database URL (None for another database, or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def read_only_engine(url: str) -> sa.Engine:
    """An engine whose every connection refuses writes: SQLite with ``query_only``, PostgreSQL
    in read-only transactions. A SQLite file that does not exist is refused (ConfigError):
    opening it would create it."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise ConfigError(f"no database at {path}")
    engine = make_engine(url)
    dialect = engine.dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise ConfigError(f"a read-only command supports SQLite and PostgreSQL, not {dialect}")

    @sa.event.listens_for(engine, "connect")
    def _refuse_writes(dbapi_connection: Any, _record: Any) -> None:
        if dialect == "sqlite":
            dbapi_connection.execute("PRAGMA query_only = ON")
            return
        # At the session's level, outside any transaction: a rolled-back SET would not last.
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        dbapi_connection.autocommit = autocommit

    return engine
