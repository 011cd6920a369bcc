"""Redis plumbing: the connection pool, the background clients, and the purchase's wire.

One blocking pool per process, sized for gevent (thousands of greenlets share a few hundred
connections and wait for one instead of failing with ``MaxConnectionsError``), with short
socket timeouts and **no retries**: redis-py 8 retries on timeouts by default, and a retried
EVALSHA is a second purchase. Callers decide what a failure means (a purchase fails closed).

On a Redis/Valkey Cluster (``SECKILL_REDIS_CLUSTER``, :func:`is_cluster`) the pooled client is
redis-py's ``RedisCluster`` with the same settings: a blocking pool per node, no retries of a
command whose reply was lost (redirections, which prove a command did not run, are followed).
The purchase's wire for a cluster is ``seckill.store.plumbing.routing.ClusterWire``.

Key names live in ``seckill.store.plumbing.keys``, the Lua scripts in
``seckill.store.plumbing.scripts``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError, RedisClusterException
from redis.retry import Retry

from seckill.config import ConfigError, Settings, redact_url
from seckill.domain import errors

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13

log = logging.getLogger(__name__)

# One Redis server, or a cluster: most of the code takes either (redis-py gives both the same
# commands; the cluster routes each by its keys' slot).
Client: TypeAlias = "redis.Redis | Cluster"


def _connection_options(settings: Settings) -> dict[str, Any]:
    return {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.redis_timeout,
        "decode_responses": True,
        "health_check_interval": 0,
    }


def make_pool(settings: Settings) -> redis.BlockingConnectionPool:
    """The process's blocking pool of the requests' connections, with no retries."""
    if len(node_urls(settings.redis_url)) > 1:
        raise ConfigError("REDIS_URL names several nodes, which only a cluster has")
    kwargs = redis.connection.parse_url(settings.redis_url)
    connection_class = kwargs.pop("connection_class", redis.Connection)
    return redis.BlockingConnectionPool(
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_timeout,  # waiting for a free connection
        connection_class=connection_class,
        retry=Retry(NoBackoff(), 0),
        **_connection_options(settings),
        **kwargs,
    )


def node_urls(url: str) -> list[str]:
    """The URLs in ``REDIS_URL``: one, or a cluster's nodes separated by commas (a process
    then starts from the first that answers, so one node down does not keep it from starting)."""
    return [part.strip() for part in url.split(",") if part.strip()]


def is_cluster(settings: Settings) -> bool:
    """Whether ``REDIS_URL`` names a node of a cluster: ``SECKILL_REDIS_CLUSTER`` if ``on`` or
    ``off``; ``auto`` asks the server (``INFO cluster``; the first node that answers). A server
    that cannot be asked is taken for one server, said in the log: set ``on`` where the
    cluster may be away at start. Several URLs are a cluster's nodes: ``off`` refuses them."""
    urls = node_urls(settings.redis_url)
    if settings.redis_cluster == "off" and len(urls) > 1:
        raise ConfigError("REDIS_URL names several nodes, which only a cluster has; set "
                          "SECKILL_REDIS_CLUSTER=on (or auto), or name one server")
    if settings.redis_cluster != "auto":
        return settings.redis_cluster == "on"
    failures = []
    for url in urls:
        probe = redis.Redis.from_url(url, socket_timeout=settings.redis_timeout,
                                     socket_connect_timeout=settings.redis_timeout,
                                     retry=Retry(NoBackoff(), 0))
        try:
            return bool(probe.info("cluster").get("cluster_enabled"))
        except redis.RedisError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            probe.close()
    if len(urls) > 1:
        return True  # several nodes: a cluster, whether or not one answers now
    log.info("SECKILL_REDIS_CLUSTER=auto could not ask %s whether it is a cluster node (%s); "
             "taking it for one server", redact_url(settings.redis_url), "; ".join(failures))
    return False


class Cluster(RedisCluster):
    """redis-py's cluster client, built from the settings (:func:`make_cluster`), knowing its
    options (for a background sibling), disconnecting every node's pool on ``close``."""

    options: dict[str, Any]

    def close(self) -> None:
        """Close the client and every node's connections."""
        _close_cluster(self)


def _close_cluster(client: RedisCluster) -> None:
    # redis-py's close leaves open the node pools it made for a URL (ResourceWarning).
    nodes = list(client.nodes_manager.nodes_cache.values())
    RedisCluster.close(client)
    for node in nodes:
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect()


def _cluster(options: dict[str, Any]) -> Cluster:
    """A cluster client from the first of ``options["url"]``'s nodes that gives its slot map."""
    failures = []
    for url in node_urls(options["url"]):
        try:
            client = Cluster(**{**options, "url": url})
        except (redis.RedisError, RedisClusterException) as exc:
            failures.append(f"{redact_url(url)}: {type(exc).__name__}: {exc}")
            continue
        client.options = options
        _unreachable_as_connection_error(client)
        return client
    raise ConfigError(
        f"the Redis Cluster at {redact_url(options['url'])} could not be reached to read its "
        f"slot map ({'; '.join(failures)}); a cluster client needs one node at start "
        "(REDIS_URL may name several, separated by commas)"
    )


def _unreachable_as_connection_error(client: RedisCluster) -> None:
    """When no node can give the slot map (the whole cluster down), redis-py raises
    RedisClusterException, which is not a RedisError: every caller that answers 503 (or fails
    open) on a RedisError, as for one server that is down, answered 500. It is raised as the
    ConnectionError it is."""
    manager = client.nodes_manager
    initialize = manager.initialize

    def initialize_or_connection_error(*args: Any, **kwargs: Any) -> None:
        try:
            initialize(*args, **kwargs)
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"no node of the cluster answered: {exc}") from exc

    manager.initialize = initialize_or_connection_error  # type: ignore[method-assign]


def make_cluster(settings: Settings, connection_class: type | None = None) -> Cluster:
    """The process's cluster client: per node, a blocking pool like :func:`make_pool`'s; no
    retry of a command whose reply was lost (a retried script is a second purchase), while
    MOVED/ASK/TRYAGAIN, which prove a command did not run, are followed. It reads the slot map
    at once: ConfigError if no node answers."""
    options: dict[str, Any] = {
        "url": settings.redis_url,
        "retry": Retry(NoBackoff(), 0),
        "require_full_coverage": False,
        "connection_pool_class": redis.BlockingConnectionPool,
        "max_connections": settings.redis_max_connections,
        "timeout": settings.redis_timeout,
        **_connection_options(settings),
    }
    if connection_class is not None:
        options["connection_class"] = connection_class
    return _cluster(options)


def is_cluster_client(client: object) -> TypeIs[RedisCluster]:
    """Whether ``client`` is a cluster client (:class:`Cluster`, or redis-py's own): the one
    test of "a cluster, or one server" on a client."""
    return isinstance(client, RedisCluster)


def address_of(client: redis.Redis) -> str:
    """One server's address as the logs and the console name it: its socket path, or
    host:port."""
    options = client.connection_pool.connection_kwargs
    return str(options.get("path") or
               f"{options.get('host', 'localhost')}:{options.get('port', 6379)}")


def masters(client: Client) -> list[tuple[str, redis.Redis]]:
    """Each master's name and a plain client of it: every primary of a cluster (each owns
    some activities), or the one server, named by its address."""
    if is_cluster_client(client):
        return [(node.name, client.get_redis_connection(node))
                for node in client.get_primaries()]
    return [(address_of(client), client)]


def on_every_master(client: Client, *command: Any) -> Any:
    """Run ``command`` on every master: all the primaries of a cluster, or the one server;
    raises if one does not take it."""
    if is_cluster_client(client):
        return client.execute_command(*command, target_nodes=RedisCluster.PRIMARIES)
    return client.execute_command(*command)


def ping_redis(client: Client) -> None:
    """PING the server, or every master of a cluster (each owns some activities); raises if
    one does not answer."""
    on_every_master(client, "PING")


NO_REPLICA = "no_replica"


def no_replica(exc: BaseException) -> bool:
    """Whether an error reply is the server's ``NOREPLICAS``: a master with
    ``min-replicas-to-write`` refused a write (a script's first one: the script changed
    nothing) because too few of its replicas are online. redis-py has no class of its own for
    it: a ResponseError, from a script, a pipeline or a cluster client alike."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("NOREPLICAS")


def no_replica_refusal() -> errors.Unavailable:
    """The 503 of a write refused because its master has no replica online: by the master
    (``NOREPLICAS``) or by this process (``seckill.store.plumbing.replica_stop``). Nothing
    was decided."""
    return errors.Unavailable(
        "no replica can confirm a write now; nothing was decided, try again in a few "
        "seconds", detail=NO_REPLICA)


def unavailable(exc: redis.RedisError | RedisClusterException) -> errors.Unavailable:
    """The 503 of a write Redis did not take: ``no_replica``, ``storage`` (MISCONF: its disk
    takes no writes, so it refused this one before it ran), both safe to try again later, or
    the failure's class name (the outcome may be unknown)."""
    if no_replica(exc):
        return no_replica_refusal()
    if isinstance(exc, redis.ResponseError) and str(exc).startswith("MISCONF"):
        return errors.Unavailable("the store's disk takes no writes now", detail="storage")
    return errors.Unavailable(detail=type(exc).__name__)


BACKGROUND_CLIENT_PREFIX = "seckill-background-"


def background_client(client: Client, name: str) -> Client:
    """A client for a background thread: the same server, timeouts and (no) retries as
    ``client``, on connections of its own named ``seckill-background-<name>`` on the server
    (``CLIENT LIST``). Background work never waits behind a crowd for the requests' pool, and
    its commands can be told apart from the requests' (the tests count both)."""
    if is_cluster_client(client):
        options = {k: v for k, v in client.options.items() if k != "timeout"}
        return _cluster({**options, "client_name": BACKGROUND_CLIENT_PREFIX + name,
                         "connection_pool_class": redis.ConnectionPool})
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "client_name": BACKGROUND_CLIENT_PREFIX + name}
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


def close_client(client: redis.Redis | RedisCluster) -> None:
    """Close ``client`` and its connections (all of its pools)."""
    if is_cluster_client(client):
        _close_cluster(client)
    else:
        client.connection_pool.disconnect()


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


class ScriptWire(Protocol):
    """A purchase's round trip: :class:`Wire` (one server) or ``routing.ClusterWire``."""

    def run_script(self, script: Script, keys: list[str], args: list[Any],
                   *after: tuple[Any, ...]) -> list[Any]:
        """EVALSHA of ``script``, then the ``after`` commands, in one send; the replies."""

    def close(self) -> None:
        """Disconnect the idle connections."""


class NotSent(redis.ConnectionError):
    """The Wire could not connect: none of the commands was sent (they may be sent again)."""


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
        self.address = (pool.connection_kwargs.get("host"), pool.connection_kwargs.get("port"))
        self._idle: list[redis.connection.AbstractConnection] = []
        self._slots = _semaphore(limit)
        self._wait = wait

    def call(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Send ``commands`` at once; their replies, an error reply as its exception object.
        After a reply that says a script did not run, what follows may not be read (each
        stands as that error; :func:`_rest_unread`): the durability wait after it, with no
        replica online, would hold the answer for its whole timeout. The connection is then
        dropped."""
        if not self._slots.acquire(timeout=self._wait):
            raise redis.ConnectionError("No connection available.")
        try:
            if self._idle:
                connection = self._idle.pop()
            else:
                connection = self._connection_class(**self._connection_kwargs)
                try:
                    connection.connect()
                except (redis.ConnectionError, redis.TimeoutError) as exc:  # nothing was sent
                    connection.disconnect()
                    raise NotSent(str(exc)) from exc
            try:
                connection.send_packed_command(connection.pack_commands(commands))
                replies: list[Any] = []
                for index, _ in enumerate(commands):
                    try:
                        replies.append(connection.read_response())
                    except redis.ResponseError as exc:  # an error reply: read in full
                        replies.append(exc)
                        if _rest_unread(exc, commands[index + 1:]):
                            break
            except BaseException:
                connection.disconnect()
                raise
            if len(replies) < len(commands):  # replies left unread: never reused
                connection.disconnect()
                return replies + [replies[-1]] * (len(commands) - len(replies))
            self._idle.append(connection)
            return replies
        finally:
            self._slots.release()

    def run_script(self, script: Script, keys: list[str], args: list[Any],
                   *after: tuple[Any, ...]) -> list[Any]:
        """EVALSHA of ``script``, then the ``after`` commands, in one send; the replies
        (:func:`send_script`)."""
        return send_script(self.call, script, keys, args, *after)

    def close(self) -> None:
        """Disconnect the idle connections (on a stop, or when the server went away and they
        are likely broken); the next call connects anew."""
        while self._idle:
            self._idle.pop().disconnect()


_WAITS = frozenset({"WAIT", "WAITAOF"})


def _rest_unread(error: redis.ResponseError, rest: tuple[tuple[Any, ...], ...]) -> bool:
    """Whether the replies after ``error`` need not be read: after ``NOREPLICAS`` or
    ``MISCONF`` (every write that follows is refused alike; a WAIT waits for a replica there
    is none of, a WAITAOF for a full disk), or after ``NOSCRIPT`` when only the durability
    wait follows (it waits for nothing: the script did not run; after a failover the new
    master lacks the script)."""
    if not rest:
        return False
    if no_replica(error) or str(error).startswith("MISCONF"):
        return True
    return isinstance(error, NoScriptError) and all(
        str(command[0]).upper() in _WAITS for command in rest)


def send_script(call: Callable[..., list[Any]], script: Script, keys: list[str],
                args: list[Any], *after: tuple[Any, ...]) -> list[Any]:
    """EVALSHA of ``script``, then the ``after`` commands, through ``call`` (one send); the
    replies. The script's error reply is raised. NOSCRIPT (Redis restarted, or SCRIPT FLUSH)
    means it did not run: it is loaded and everything sent once more."""
    for attempt in (1, 2):
        replies = call(("EVALSHA", script.sha, len(keys), *keys, *args), *after)
        if isinstance(replies[0], NoScriptError) and attempt == 1:
            loaded = call(("SCRIPT", "LOAD", script.script))[0]
            if isinstance(loaded, Exception):
                raise loaded
            script.sha = loaded
            continue
        break
    if isinstance(replies[0], Exception):
        raise replies[0]
    return replies
