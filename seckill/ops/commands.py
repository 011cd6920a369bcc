"""The operator's commands on the store: ``seckill activity create|show|restock``,
``seckill order cancel`` and ``seckill reconcile``. Each takes the same code path as the
matching admin API call, through the gateway's own services."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from seckill.config import Settings
from seckill.domain import errors
from seckill.ops.up import redact_url

if TYPE_CHECKING:
    from seckill.services import Services


class Failure(RuntimeError):
    """The command was well formed but could not be carried out (exit 1)."""


# -- seckill activity ------------------------------------------------------------------


@contextmanager
def _services() -> Iterator[Services]:
    """The gateway's own services (Redis pool, database, activity store) on this environment,
    so that the commands below take exactly the admin API's path; a store that cannot be
    reached inside the block becomes a :class:`Failure` that says which and where."""
    import redis
    import sqlalchemy as sa

    from seckill.services import Services

    # These commands use no secret: read the rest of the configuration without requiring one.
    settings = Settings.from_env({**os.environ, "SECKILL_ENV": "development"})
    services = Services.build(settings)
    try:
        yield services
    except (redis.RedisError, sa.exc.OperationalError) as exc:
        raise _store_failure(settings, exc) from None
    finally:
        services.close()


def _activity_id(text: str) -> str:
    from seckill.domain.activities import is_activity_id

    if not is_activity_id(text):
        raise errors.BadRequest(f"activity id must match [A-Za-z0-9_-]{{1,64}}, got {text!r}")
    return text


def _store_failure(settings: Settings, exc: Exception) -> Failure:
    import redis

    if isinstance(exc, redis.RedisError):
        hint = "" if os.environ.get("REDIS_URL") else (
            " (REDIS_URL is not set; `seckill up` prints the REDIS_URL of its embedded Valkey)"
        )
        where = f"Redis at {redact_url(settings.redis_url)}"
    else:
        hint, where = "", f"the database at {redact_url(settings.database_url)}"
    return Failure(f"cannot reach {where}: {type(exc).__name__}: {exc}{hint}")


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
    from seckill.domain.activities import PACKETS, iso_from_ms, ms_from_iso, now_ms

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
    if args.kind == PACKETS:
        # The admin API's validation says what is missing or misplaced.
        body["kind"] = PACKETS
        for option in ("amount", "count", "total", "per_user_limit"):
            if getattr(args, option) is not None:
                body[option] = getattr(args, option)
        return body
    for option in ("amount", "count"):
        if getattr(args, option) is not None:
            raise errors.BadRequest(f"--{option} is for --kind packets")
    body["total"] = _total(args)
    if args.per_user_limit is not None:
        body["per_user_limit"] = args.per_user_limit
    return body


def cmd_activity_create(args: argparse.Namespace) -> int:
    """``seckill activity create``: validate and create an activity, then print it."""
    from seckill.domain.activities import PACKETS, now_ms, parse_new_activity
    from seckill.ops.progress import ProgressBar
    from seckill.store import catalog

    activity = parse_new_activity(_activity_body(args))  # the admin API's validation
    progress = None
    if activity.kind == PACKETS:
        progress = ProgressBar(sys.stderr, f"{activity.total} packets")
    with _services() as services:
        try:
            catalog.create_activity(services.book, services.activities, activity, progress)
        except errors.ActivityExists:
            raise Failure(f"activity {activity.id!r} already exists") from None
    print(json.dumps(activity.public(now_ms()), indent=2))
    return 0


def cmd_activity_show(args: argparse.Namespace) -> int:
    """``seckill activity show``: print an activity (rebuilt from the database if Redis lost it)."""
    from seckill.domain.activities import now_ms

    _activity_id(args.id)
    with _services() as services:
        # Through the cache, as GET /seckill/activities/<aid>: rebuilt from the database
        # if Redis has lost it.
        activity = services.cache.get(args.id)
    if activity is None:
        raise Failure(f"no activity {args.id!r}")
    print(json.dumps(activity.public(now_ms()), indent=2))
    return 0


def cmd_activity_restock(args: argparse.Namespace) -> int:
    """``seckill activity restock``: add (or remove unsold) units, then print the activity."""
    import dataclasses

    from seckill.domain.activities import MAX_TOTAL, now_ms

    _activity_id(args.id)
    if abs(args.units) > MAX_TOTAL:
        raise errors.BadRequest(f"units must be in -{MAX_TOTAL}..{MAX_TOTAL}")
    with _services() as services:
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


def units_arg(text: str) -> int:
    """The argparse type of a number of units: an integer, negative allowed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# -- seckill order cancel / seckill reconcile --------------------------------------------


def cmd_order_cancel(args: argparse.Namespace) -> int:
    """``seckill order cancel``: cancel an order (its stock goes back), print the result."""

    with _services() as services:
        try:
            remaining = services.stock.cancel(args.order_id)  # the admin API's path
        except (errors.UnknownOrder, errors.AlreadyCancelled) as exc:
            raise Failure(f"{exc.code}: {exc.message}") from None
    print(json.dumps({"status": "cancelled", "order_id": args.order_id, "remaining": remaining}))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    """``seckill reconcile``: compare Redis with the database (``--repair``: rebuild), print it."""
    from seckill.store.recovery import reconcile

    _activity_id(args.id)
    with _services() as services:
        try:
            report = reconcile(services.restorer, args.id, repair=args.repair)
        except errors.UnknownActivity:
            raise Failure(f"no activity {args.id!r} in the database") from None
    print(json.dumps(report, indent=2))
    return 0
