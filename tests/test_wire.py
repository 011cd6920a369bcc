"""``seckill.store.Wire``: the purchase's round trip on connections of its own (real Valkey)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import NoScriptError

from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import Wire
from tests.support.timing import wait_until


@pytest.fixture
def pool(valkey: EmbeddedValkey) -> Iterator[redis.BlockingConnectionPool]:
    # A client name of its own, so this test's connections can be counted on the server.
    kwargs = redis.connection.parse_url(valkey.url)
    pool = redis.BlockingConnectionPool(
        decode_responses=True, socket_timeout=5, client_name=f"wire-{uuid.uuid4().hex[:8]}",
        **kwargs,
    )
    yield pool
    pool.disconnect()


def connections_named(rds: redis.Redis, name: str) -> int:
    return sum(1 for client in rds.client_list() if client.get("name") == name)


def test_every_reply_is_read_and_an_error_reply_keeps_the_connection_in_step(
        pool: redis.BlockingConnectionPool, rds: redis.Redis, prefix: str) -> None:
    wire = Wire(pool, limit=4, wait=1.0)
    key = f"{prefix}:wire"
    replies = wire.call(("EVALSHA", "0" * 40, 0), ("INCR", key), ("WAITAOF", 1, 0, 1000))
    assert isinstance(replies[0], NoScriptError)  # the error reply, as its exception
    assert replies[1] == 1
    assert replies[2] == [1, 0]  # appendfsync always: on the local disk
    # The same connection is reused, and the next call reads its own replies, not leftovers.
    assert wire.call(("INCR", key), ("GET", key)) == [2, "2"]
    assert connections_named(rds, pool.connection_kwargs["client_name"]) == 1
    wire.close()
    # The server sees the close a moment later (it once still listed it under a loaded suite).
    wait_until(lambda: connections_named(rds, pool.connection_kwargs["client_name"]) == 0, 5,
               what="the closed connection gone from CLIENT LIST")


def test_a_failed_call_drops_its_connection(pool: redis.BlockingConnectionPool,
                                            rds: redis.Redis, prefix: str) -> None:
    wire = Wire(pool, limit=4, wait=1.0)
    name = pool.connection_kwargs["client_name"]
    wire.call(("PING",))
    # The server closes this connection (as a restart or a proxy would) ...
    rds.client_kill_filter(_id=next(c["id"] for c in rds.client_list() if c["name"] == name))
    with pytest.raises(redis.ConnectionError):
        wire.call(("INCR", f"{prefix}:wire"))
    # ... the failed connection was not put back: the next call opens a new one and works.
    assert wire.call(("INCR", f"{prefix}:wire")) == [1]  # the failed INCR never ran
    assert connections_named(rds, name) == 1
    wire.close()


def test_never_more_connections_than_its_limit(pool: redis.BlockingConnectionPool,
                                               rds: redis.Redis, prefix: str) -> None:
    wire = Wire(pool, limit=3, wait=5.0)
    name = pool.connection_kwargs["client_name"]
    key = f"{prefix}:wire"
    peak = 0
    errors: list[BaseException] = []

    def work() -> None:
        nonlocal peak
        try:
            for _ in range(50):
                # A slow command keeps connections busy so that callers have to wait for one.
                wire.call(("EVAL", "redis.call('INCR', KEYS[1]) return 1", 1, key),
                          ("CLIENT", "LIST"))
                peak = max(peak, connections_named(rds, name))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert rds.get(key) == str(12 * 50)  # every call ran exactly once
    assert 1 <= peak <= 3
    assert connections_named(rds, name) <= 3
    wire.close()


def test_a_caller_that_finds_no_connection_in_time_gets_a_connection_error(
        pool: redis.BlockingConnectionPool) -> None:
    wire = Wire(pool, limit=1, wait=0.2)
    wire._slots.acquire()  # the only connection is in use elsewhere
    try:
        with pytest.raises(redis.ConnectionError, match="No connection available"):
            wire.call(("PING",))
    finally:
        wire._slots.release()
    assert wire.call(("PING",)) == ["PONG"]
    wire.close()


def test_run_script_loads_a_flushed_script_and_sends_everything_once_more(
        pool: redis.BlockingConnectionPool, rds: redis.Redis, prefix: str) -> None:
    wire = Wire(pool, limit=2, wait=1.0)
    script = rds.register_script("return redis.call('INCR', KEYS[1])")
    script.sha = rds.script_load(script.script)
    key = f"{prefix}:ran"
    assert wire.run_script(script, [key], [], ("GET", key)) == [1, "1"]
    rds.script_flush()
    # NOSCRIPT: the script did not run; loaded again, it runs once, and GET sees that once.
    assert wire.run_script(script, [key], [], ("GET", key)) == [2, "2"]
    with pytest.raises(redis.ResponseError):  # the script's own error reply is raised
        wire.run_script(rds.register_script("return redis.error_reply('nope')"), [], [])
    wire.close()
