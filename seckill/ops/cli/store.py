"""The store an operator's command uses, and how its failures read.

Which store: ``REDIS_URL`` (and ``DATABASE_URL``) when set; else the running ``seckill up``'s,
found through the ``up.json`` in its data folder. Never a Redis nobody named: with neither, a
command exits 2 and says how to point it at one. The read-only commands (``activity show``,
``activity list``, ``reconcile`` without ``--repair``) write nothing: their Redis connections
refuse every command that is not a read, their database connections refuse writes, and they
create no file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from seckill import config
from seckill.config import ConfigError, Settings, data_dir_from, with_password
from seckill.domain import errors
from seckill.ops.stack.embedded import read_password
from seckill.ops.stack.up import UP_FILE, find_running_up, redact_url

if TYPE_CHECKING:
    from seckill.domain.operators import Operator
    from seckill.services import Services


class Failure(RuntimeError):
    """The command was well formed but could not be carried out (exit 1)."""


# -- the store a command uses ----------------------------------------------------------

# How a command uses the store: READ writes nothing anywhere; WRITE needs an existing database;
# CREATE may make the SQLite file (and its folder).
READ, WRITE, CREATE = "read", "write", "create"
_ACCESS: ContextVar[str] = ContextVar("seckill_store_access", default=READ)


@contextmanager
def store_access(access: str) -> Iterator[None]:
    """Run the block's ``store_services()`` calls that name no access with ``access``."""
    token = _ACCESS.set(access)
    try:
        yield
    finally:
        _ACCESS.reset(token)


def store_settings(access: str, environ: dict[str, str] | None = None) -> Settings:
    """The settings of a command on the store: ``REDIS_URL``, or the running ``seckill up``'s
    (ConfigError when there is neither, or when the database a non-creating command needs is
    missing). The commands use no secret: none is required."""
    from seckill.store.plumbing.readonly import sqlite_file

    env = {**config.environment(environ), "SECKILL_ENV": "development"}
    if not env.get("REDIS_URL"):
        env.update(_from_running_up(env))
    # The data key as the environment says, not as the development mode forced above would
    # (a throw-away key in the data folder): a command seals what the gateway must open.
    settings = Settings.from_env(env, data_keys=config.data_keys(config.environment(environ)))
    path = sqlite_file(settings.database_url)
    if path is not None and access != CREATE and not path.is_file():
        raise ConfigError(
            f"no database at {path}; this command creates none (set DATABASE_URL, or "
            "SECKILL_DATA_DIR to the gateway's data folder)"
        )
    return settings


def _from_running_up(env: dict[str, str]) -> dict[str, str]:
    """``REDIS_URL``, ``DATABASE_URL`` and ``SECKILL_KEY_PREFIX`` of the ``seckill up`` running
    with this data folder; a value set here must agree with its (no mixing of two stores)."""
    data_dir = data_dir_from(env)
    running, why = find_running_up(data_dir)
    if running is None:
        raise ConfigError(
            f"REDIS_URL is not set and no `seckill up` is running with the data folder "
            f"{data_dir} ({why}); set REDIS_URL, or run this in the folder of a running "
            "`seckill up` or set SECKILL_DATA_DIR to its data folder"
        )
    taken: dict[str, str] = {}
    for name, value in (("REDIS_URL", running.redis_url), ("DATABASE_URL", running.database_url),
                        ("SECKILL_KEY_PREFIX", running.key_prefix)):
        own = env.get(name)
        password = read_password(data_dir) if name == "REDIS_URL" and running.embedded else None
        if own:
            if redact_url(own) != value:
                raise ConfigError(
                    f"{name} differs from the running `seckill up`'s ({value}, in "
                    f"{running.path}); set REDIS_URL too, to use another store"
                )
        elif password is not None:  # the embedded Valkey's, kept in the data folder
            taken[name] = with_password(value, password)
        elif urlsplit(value).password is not None:
            raise ConfigError(
                f"set {name}: the running `seckill up` uses {value}, and {running.path} keeps "
                "no password"
            )
        else:
            taken[name] = value
    return taken


@contextmanager
def store_services(access: str | None = None) -> Iterator[Services]:
    """The gateway's own services (Redis pool, database, activity store) on the command's
    store (:func:`store_settings`), so that the commands below take exactly the admin API's
    path. ``access`` (default: :func:`store_access`'s, else READ) READ gives services that
    cannot write. A store that cannot be reached inside the block becomes a
    :class:`Failure` that says which and where."""
    import redis
    import sqlalchemy as sa

    from seckill.services import Services
    from seckill.store.plumbing.readonly import ReadOnlyRefused

    access = access or _ACCESS.get()
    settings = store_settings(access)
    services = Services.build(settings, read_only=access == READ)
    try:
        yield services
    except ReadOnlyRefused as exc:
        raise Failure(
            f"{exc}; nothing was written (`seckill reconcile <id> --repair` rebuilds what "
            "Redis lacks)"
        ) from None
    except (redis.RedisError, sa.exc.OperationalError) as exc:
        raise _store_failure(settings, exc) from None
    finally:
        services.close()


def actor() -> Operator:
    """Who the command acts as, in the audit trail and in the events its actions cause:
    ``cli:<SECKILL_OPERATOR or login>``, an admin (it holds the store's credentials)."""
    from seckill.domain.operators import ADMIN, Operator

    return Operator(config.cli_operator(), ADMIN)


@contextmanager
def audit_on_stderr() -> Iterator[None]:
    """The command's audit lines (``seckill.operator.trail``) on standard error, in the stack's
    log format, for the actions it did (a refusal says so in its own one line)."""
    import logging
    import sys

    from seckill import logs

    trail = logging.getLogger("seckill.audit")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.Formatter("seckill-cli", logs.json_wanted()))
    handler.addFilter(lambda record: getattr(record, "fields", {}).get("outcome") == "ok")
    level = trail.level
    trail.addHandler(handler)
    trail.setLevel(logging.INFO)
    try:
        yield
    finally:
        trail.removeHandler(handler)
        trail.setLevel(level)


def checked_activity_id(text: str) -> str:
    """``text`` if it is a well-formed activity id; BadRequest (exit code 2) otherwise."""
    from seckill.domain.activities import is_activity_id

    if not is_activity_id(text):
        raise errors.BadRequest(f"activity id must match [A-Za-z0-9_-]{{1,64}}, got {text!r}")
    return text


def _store_failure(settings: Settings, exc: Exception) -> Failure:
    import redis

    if isinstance(exc, redis.RedisError):
        hint = "" if config.own_redis_url() else (
            f" (the `seckill up` of {settings.data_dir} named it in its {UP_FILE})"
        )
        where = f"Redis at {redact_url(settings.redis_url)}"
    else:
        hint, where = "", f"the database at {redact_url(settings.database_url)}"
    return Failure(f"cannot reach {where}: {type(exc).__name__}: {exc}{hint}")


def refused(exc: errors.SeckillError) -> Failure:
    """A refusal of the store's (an order already cancelled, a sale already ended ...) as the
    command's one-line failure: ``<code>: <message>``."""
    return Failure(f"{exc.code}: {exc.message}")


def no_activity(aid: str) -> Failure:
    """The failure of a command naming an activity the store does not know."""
    return Failure(f"no activity {aid!r}")
