"""The operator's commands on activities: ``seckill activity create|show|restock|admission``
and ``seckill reconcile``. Each turns its options into the operator action's input, calls the
action of ``seckill.operator`` (the admin API's own), and prints the result as text. The store
they use: ``seckill.ops.cli.store``; the sale-day verbs (``list|pause|resume|end``):
``seckill.ops.cli.sale``; orders: ``seckill.ops.cli.orders``.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from seckill.domain import errors
from seckill.domain.product import Product
from seckill.ops.cli.store import (
    CREATE,
    READ,
    WRITE,
    Failure,
    actor,
    checked_activity_id,
    no_activity,
    refused,
    store_services,
)
from seckill.ops.cli.variants import variants_body
from seckill.ops.stack.up import redact_url

if TYPE_CHECKING:
    from seckill.domain.activities import Activity
    from seckill.sql.book import OrderBook

__all__ = ["add_product_options", "cmd_activity_admission", "cmd_activity_create",
           "cmd_activity_restock", "cmd_activity_show", "cmd_reconcile", "price_cents",
           "units_arg"]


# -- seckill activity create: its options as the admin API's body -----------------------


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
    if getattr(args, "limit_by", None) is not None:
        body["limit_by"] = args.limit_by
    body.update(_product(args).body())
    listed = variants_body(args)
    if listed is not None:  # the API refuses them with packets, or with a total
        body["variants"] = listed
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
    if listed is None or args.total is not None:
        body["total"] = _total(args)
    for option in ("per_user_limit", "shards"):
        if getattr(args, option) is not None:
            body[option] = getattr(args, option)
    return body



def price_cents(text: str) -> int:
    """``--price`` (an amount in the currency's units, ``12.50``) as whole cents; BadRequest
    naming the price otherwise."""
    try:
        cents = Decimal(text) * 100
    except InvalidOperation:
        cents = Decimal("NaN")
    if not cents.is_finite() or cents != cents.to_integral_value() or cents < 0:
        raise errors.BadRequest(f"--price must be an amount in whole cents such as 499.99, "
                                f"got {text!r}", field="price")
    return int(cents)


def _product(args: argparse.Namespace) -> Product:
    """What the sale page shows, from ``seckill activity create``'s options (its ``body()``
    is the admin API's, as for a stored activity)."""
    priced = args.price is not None
    return Product(description=args.description, image_url=args.image_url,
                   price_amount=price_cents(args.price) if priced else None,
                   price_currency=args.currency if priced else None)


def add_product_options(create: argparse.ArgumentParser) -> None:
    """``seckill activity create``'s options for what the sale page shows."""
    create.add_argument("--description", help="shown on the sale page (at most 2000 characters)")
    create.add_argument("--image-url", help="the product's picture: https://... or /path")
    create.add_argument("--price", metavar="AMOUNT",
                        help="the price shown, e.g. 499.99")
    create.add_argument("--currency", default="EUR", help="ISO 4217 code (default EUR)")


# -- seckill activity ------------------------------------------------------------------


def cmd_activity_create(args: argparse.Namespace) -> int:
    """``seckill activity create``: validate and create an activity (every gateway process
    hears of it), then print it."""
    from seckill.domain.activities import PACKETS
    from seckill.domain.clock import now_ms
    from seckill.operator import activities
    from seckill.ops.cli.progress import ProgressBar

    activity = activities.new_activity(_activity_body(args))  # before any store is opened
    progress = None
    if activity.kind == PACKETS:
        progress = ProgressBar(sys.stderr, f"{activity.total} packets")
    with store_services(CREATE) as services:
        try:
            activities.create(services, activity, progress, by=actor())
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
    from seckill.domain.variants import with_sold

    activity = book.load_activity(aid)
    if activity is None or activity.total is None:
        return activity
    live, _ = live_and_cancelled(book.orders_of(aid))
    taken = len(live) if activity.kind == PACKETS else sum(o.quantity for o in live.values())
    return dataclasses.replace(activity, remaining=max(activity.total - taken, 0),
                               variants=with_sold(activity.variants,
                                                  (o.items for o in live.values())))


def cmd_activity_restock(args: argparse.Namespace) -> int:
    """``seckill activity restock``: add (or remove unsold) units, then print the activity."""
    from seckill.domain.clock import now_ms
    from seckill.operator import activities

    checked_activity_id(args.id)
    activities.checked_add(args.units)  # before any store is opened
    with store_services(WRITE) as services:
        try:
            found = activities.find(services, args.id)
            if found.variants or args.variant is not None:
                updated = activities.restock_variant(services, found, args.units, args.variant,
                                                     by=actor())
            else:
                updated = activities.restock(services, found, args.units, by=actor())
        except errors.UnknownActivity:
            raise no_activity(args.id) from None
        except (errors.InsufficientStock, errors.UnknownVariant) as exc:
            raise refused(exc) from None
    print(json.dumps(updated.public(now_ms()), indent=2))
    return 0


def cmd_activity_admission(args: argparse.Namespace) -> int:
    """``seckill activity admission``: set a queue's admission factor live, then print the
    activity."""
    from seckill.domain.clock import now_ms
    from seckill.operator import activities, levers

    checked_activity_id(args.id)
    factor = levers.parse_factor({"factor": args.factor})  # before any store is opened
    with store_services(WRITE) as services:
        try:
            found = levers.queued(activities.find(services, args.id))
        except errors.UnknownActivity:
            raise no_activity(args.id) from None
        except errors.BadRequest as exc:  # no queue: what the activity is, not the input
            raise Failure(f"activity {args.id!r}: {exc.message}") from None
        updated = levers.set_admission_factor(services, found, factor, by=actor())
    print(json.dumps(updated.public(now_ms()), indent=2))
    return 0


def units_arg(text: str) -> int:
    """The argparse type of a number of units: an integer, negative allowed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# -- seckill reconcile -----------------------------------------------------------------


def cmd_reconcile(args: argparse.Namespace) -> int:
    """``seckill reconcile``: compare Redis with the database (``--repair``: rebuild), print it."""
    from seckill.operator import audit

    checked_activity_id(args.id)
    with store_services() as services:
        try:
            report = audit.reconcile(services, args.id, repair=args.repair, by=actor())
        except errors.UnknownActivity:
            raise Failure(f"no activity {args.id!r} in the database") from None
    print(json.dumps(report, indent=2))
    return 0
