"""Read-only services (the operator's read-only commands): every Redis command that is not a
read is refused before it is sent (:class:`ReadOnlyRefused`), and the database engine refuses
writes (:func:`read_only_engine`). ``seckill.services.Services.build(read_only=True)`` wires
them in."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from redis.connection import AbstractConnection
from sqlalchemy.engine import make_url

from seckill.config import ConfigError
from seckill.sql.engine import make_engine

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
def read_only_connection(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` with every command checked before it is packed: one that is not
    a read raises :class:`ReadOnlyRefused`, never sent."""
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
