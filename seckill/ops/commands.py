"""The operator's commands on the store: ``seckill activity create|show|restock``,
``seckill order cancel`` and ``seckill reconcile``. Each takes the same code path as the
matching admin API call, through the gateway's own services.

Which store: ``REDIS_URL`` (and ``DATABASE_URL``) when set; else the running ``seckill up``'s,
found through the ``up.json`` in its data folder. Never a Redis nobody named: with neither, a
command exits 2 and says how to point it at one. The read-only commands (``activity show``,
``reconcile`` without ``--repair``) write nothing: their Redis connections refuse every command
that is not a read, their database connections refuse writes, and they create no file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from seckill.config import ConfigError, Settings, data_dir_from
from seckill.domain import errors
from seckill.ops.up import UP_FILE, find_running_up, redact_url

if TYPE_CHECKING:
    from seckill.domain.activities import Activity
    from seckill.services import Services
    from seckill.sql.book import OrderBook


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

    env = {**(os.environ if environ is None else environ), "SECKILL_ENV": "development"}
    if not env.get("REDIS_URL"):
        env.update(_from_running_up(env))
    settings = Settings.from_env(env)
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
        if own:
            if redact_url(own) != value:
                raise ConfigError(
                    f"{name} differs from the running `seckill up`'s ({value}, in "
                    f"{running.path}); set REDIS_URL too, to use another store"
                )
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


def checked_activity_id(text: str) -> str:
    """``text`` if it is a well-formed activity id; BadRequest (exit code 2) otherwise."""
    from seckill.domain.activities import is_activity_id

    if not is_activity_id(text):
        raise errors.BadRequest(f"activity id must match [A-Za-z0-9_-]{{1,64}}, got {text!r}")
    return text


def _store_failure(settings: Settings, exc: Exception) -> Failure:
    import redis

    if isinstance(exc, redis.RedisError):
        hint = "" if os.environ.get("REDIS_URL") else (
            f" (the `seckill up` of {settings.data_dir} named it in its {UP_FILE})"
        )
        where = f"Redis at {redact_url(settings.redis_url)}"
    else:
        hint, where = "", f"the database at {redact_url(settings.database_url)}"
    return Failure(f"cannot reach {where}: {type(exc).__name__}: {exc}{hint}")


# -- seckill activity ------------------------------------------------------------------


def _total(args: argparse.Namespace) -> int | None:
    if args.total is None:
        raise errors.BadRequest("--total is required for kind stock (a number or 'unlimited')")
    if args.total.strip().lower() == "unlimited":
        return None
    try:
        return int(args.total)
    except ValueError:
        raise errors.BadRequest(
            f"total must be an integer or 'unlimited', got {args.total!r}", field="total"
        ) from None


def _activity_body(args: argparse.Namespace) -> dict[str, Any]:
    from seckill.domain.activities import PACKETS
    from seckill.domain.clock import iso_from_ms, ms_from_iso, now_ms
    from seckill.ops.sale_commands import product_body

    if args.starts_at is not None:
        starts_at = args.starts_at
    else:
        starts_at = iso_from_ms(now_ms() + 1000 * (args.starts_in or 0))
    if args.ends_at is not None:
        ends_at = args.ends_at
    else:
        ends_at = iso_from_ms(ms_from_iso(starts_at, "starts_at") + 1000 * args.duration)
    body: dict[str, Any] = {
        "id": args.id, "name": args.name, "starts_at": starts_at, "ends_at": ends_at,
    }
    if args.payment_window is not None:
        body["payment_window"] = args.payment_window
    if args.admission is not None:
        body["admission"] = args.admission
    if args.queue_opens_at is not None or args.queue_opens_in is not None:
        body["queue_opens_at"] = args.queue_opens_at or iso_from_ms(
            now_ms() + 1000 * args.queue_opens_in)
    elif args.admission in ("queue", "draw"):
        body["queue_opens_at"] = iso_from_ms(now_ms())  # the queue opens now
    if args.challenge:
        body["challenge"] = True
    body.update(product_body(args))
    if args.kind == PACKETS:
        # The admin API's validation says what is missing or misplaced.
        body["kind"] = PACKETS
        for option in ("amount", "count", "total", "per_user_limit", "shards"):
            if getattr(args, option) is not None:
                body[option] = getattr(args, option)
        return body
    for option in ("amount", "count"):
        if getattr(args, option) is not None:
            raise errors.BadRequest(f"--{option} is for --kind packets")
    body["total"] = _total(args)
    for option in ("per_user_limit", "shards"):
        if getattr(args, option) is not None:
            body[option] = getattr(args, option)
    return body


def cmd_activity_create(args: argparse.Namespace) -> int:
    """``seckill activity create``: validate and create an activity, then print it."""
    from seckill.domain.activities import PACKETS, parse_new_activity
    from seckill.domain.clock import now_ms
    from seckill.ops.progress import ProgressBar
    from seckill.store.sale import catalog

    activity = parse_new_activity(_activity_body(args))  # the admin API's validation
    progress = None
    if activity.kind == PACKETS:
        progress = ProgressBar(sys.stderr, f"{activity.total} packets")
    with store_services(CREATE) as services:
        try:
            catalog.create_activity(services.book, services.activities, activity, progress)
        except errors.ActivityExists:
            raise Failure(f"activity {activity.id!r} already exists") from None
    print(json.dumps(activity.public(now_ms()), indent=2))
    return 0


def cmd_activity_show(args: argparse.Namespace) -> int:
    """``seckill activity show``: print an activity. Reads only: when Redis has no copy, the
    database's is printed, with a note on stderr, and nothing is rebuilt."""
    from seckill.domain.clock import now_ms

    checked_activity_id(args.id)
    note = ""
    with store_services(READ) as services:
        activity = services.activities.load(args.id)
        if activity is None:
            activity = _from_database(services.book, args.id)
            if activity is not None:
                note = (
                    f"Redis at {redact_url(services.settings.redis_url)} holds no copy of "
                    f"activity {args.id!r}: shown from the database, nothing written (the "
                    "gateway rebuilds it on its next request for it; or run `seckill "
                    f"reconcile {args.id} --repair`)"
                )
    if activity is None:
        raise Failure(f"no activity {args.id!r}")
    print(json.dumps(activity.public(now_ms()), indent=2))
    if note:
        print(f"seckill: {note}", file=sys.stderr)
    return 0


def _from_database(book: OrderBook, aid: str) -> Activity | None:
    """The activity as the database alone tells it: what is left is the total less the units
    of the live orders (a packet each, for packets)."""
    import dataclasses

    from seckill.domain.activities import PACKETS
    from seckill.domain.orders import live_and_cancelled

    activity = book.load_activity(aid)
    if activity is None or activity.total is None:
        return activity
    live, _ = live_and_cancelled(book.orders_of(aid))
    taken = len(live) if activity.kind == PACKETS else sum(o.quantity for o in live.values())
    return dataclasses.replace(activity, remaining=max(activity.total - taken, 0))


def cmd_activity_restock(args: argparse.Namespace) -> int:
    """``seckill activity restock``: add (or remove unsold) units, then print the activity."""
    import dataclasses

    from seckill.domain.activities import MAX_TOTAL
    from seckill.domain.clock import now_ms

    checked_activity_id(args.id)
    if abs(args.units) > MAX_TOTAL:
        raise errors.BadRequest(f"units must be in -{MAX_TOTAL}..{MAX_TOTAL}")
    with store_services(WRITE) as services:
        try:
            # The admin API's path: POST /admin/activities/<aid>/stock {"add": units}.
            found = services.cache.get(args.id)
            if found is None:
                raise Failure(f"no activity {args.id!r}")
            total, remaining = services.stock.restock(found.id, args.units)
        except errors.InsufficientStock as exc:
            raise Failure(f"{exc.code}: {exc.message}") from None
    updated = dataclasses.replace(found, total=total, remaining=remaining)
    print(json.dumps(updated.public(now_ms()), indent=2))
    return 0


def cmd_activity_admission(args: argparse.Namespace) -> int:
    """``seckill activity admission``: set a queue's admission factor live, then print the
    activity (the admin API's path: POST /admin/activities/<aid>/admission)."""
    import dataclasses

    from seckill.domain.admission import parse_factor
    from seckill.domain.clock import now_ms

    checked_activity_id(args.id)
    factor = parse_factor({"factor": args.factor})  # the admin API's validation
    with store_services(WRITE) as services:
        found = services.cache.get(args.id)
        if found is None:
            raise Failure(f"no activity {args.id!r}")
        if not found.queued:
            raise Failure(f"activity {args.id!r} has no queue (admission first_come)")
        services.queue.set_factor(found.id, factor)
    updated = dataclasses.replace(found, admission_factor=factor)
    print(json.dumps(updated.public(now_ms()), indent=2))
    return 0


def units_arg(text: str) -> int:
    """The argparse type of a number of units: an integer, negative allowed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# -- seckill order cancel / seckill reconcile --------------------------------------------


def cmd_order_cancel(args: argparse.Namespace) -> int:
    """``seckill order cancel``: cancel an order (its stock goes back), print the result."""

    with store_services(WRITE) as services:
        try:
            remaining = services.stock.cancel(args.order_id)  # the admin API's path
        except (errors.UnknownOrder, errors.AlreadyCancelled) as exc:
            raise Failure(f"{exc.code}: {exc.message}") from None
    print(json.dumps({"status": "cancelled", "order_id": args.order_id, "remaining": remaining}))
    return 0


def cmd_order_pay(args: argparse.Namespace) -> int:
    """``seckill order pay``: record a held order's payment (the admin API's path), print it."""
    with store_services(WRITE) as services:
        try:
            paid = services.payments.pay(args.order_id, args.ref)
        except errors.SeckillError as exc:
            if exc.status >= 500:
                raise
            raise Failure(f"{exc.code}: {exc.message}") from None
    print(json.dumps(paid))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    """``seckill reconcile``: compare Redis with the database (``--repair``: rebuild), print it."""
    from seckill.store.audit.reconcile import reconcile

    checked_activity_id(args.id)
    with store_services() as services:
        try:
            report = reconcile(services.restorer, args.id, repair=args.repair)
        except errors.UnknownActivity:
            raise Failure(f"no activity {args.id!r} in the database") from None
    print(json.dumps(report, indent=2))
    return 0
