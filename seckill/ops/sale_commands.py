"""``seckill activity list|pause|resume|end``: the operator's sale-day commands, on the same
path as the operator API (``GET /admin/activities``, ``POST /admin/activities/<aid>/...``)."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import CONSOLE_STATES
from seckill.ops.commands import READ, WRITE, Failure, checked_activity_id, store_services

_COLUMNS = ("id", "state", "paused", "remaining", "total", "sold", "starts_at", "ends_at")


def cmd_activity_list(args: argparse.Namespace) -> int:
    """``seckill activity list``: every activity with its state and numbers (reads only)."""
    from seckill.domain.clock import now_ms

    rows: list[dict[str, Any]] = []
    with store_services(READ) as services:
        cursor = None
        while True:
            found, cursor = services.controls.page(cursor, 200, args.state, rebuild=False)
            at = now_ms()
            rows += [{**a.listed(at), "state": a.console_state(at)} for a in found]
            if cursor is None:
                break
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    table = [_COLUMNS] + [tuple(_cell(row.get(c)) for c in _COLUMNS) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
              .rstrip())
    if not rows:
        print("(no activity" + (f" in state {args.state})" if args.state else ")"),
              file=sys.stderr)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def cmd_activity_lever(args: argparse.Namespace) -> int:
    """``seckill activity pause|resume|end``: pull the lever, then print the activity."""
    from seckill.domain.clock import now_ms

    checked_activity_id(args.id)
    with store_services(WRITE) as services:
        try:
            if args.verb == "end":
                activity = services.controls.end(args.id)
            else:
                activity = services.controls.set_paused(args.id, args.verb == "pause")
        except errors.UnknownActivity:
            raise Failure(f"no activity {args.id!r}") from None
        except errors.AlreadyEnded as exc:
            raise Failure(f"{exc.code}: {exc.message}") from None
    print(json.dumps(activity.public(now_ms()), indent=2))
    return 0


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


def product_body(args: argparse.Namespace) -> dict[str, Any]:
    """The product fields of ``seckill activity create``'s options."""
    body: dict[str, Any] = {}
    if args.description is not None:
        body["description"] = args.description
    if args.image_url is not None:
        body["image_url"] = args.image_url
    if args.price is not None:
        body["price"] = {"amount": price_cents(args.price), "currency": args.currency}
    return body


def add_product_options(create: argparse.ArgumentParser) -> None:
    """``seckill activity create``'s options for what the sale page shows."""
    create.add_argument("--description", help="shown on the sale page (at most 2000 characters)")
    create.add_argument("--image-url", help="the product's picture: https://... or /path")
    create.add_argument("--price", metavar="AMOUNT",
                        help="the price shown, e.g. 499.99")
    create.add_argument("--currency", default="EUR", help="ISO 4217 code (default EUR)")


def add_sale_verbs(verbs: Any) -> None:
    """``seckill activity list``, ``pause``, ``resume`` and ``end``."""
    listed = verbs.add_parser("list", help="every activity with its state and numbers (reads "
                                           "only)")
    listed.add_argument("--state", choices=CONSOLE_STATES,
                        help="only activities in this state")
    listed.add_argument("--json", action="store_true", help="one JSON object per line")
    listed.set_defaults(handler=cmd_activity_list)
    for verb, text in (("pause", "pause a sale: no URL, no purchase until resumed"),
                       ("resume", "resume a paused sale"),
                       ("end", "end a sale now")):
        lever = verbs.add_parser(verb, help=text)
        lever.add_argument("id")
        lever.set_defaults(handler=cmd_activity_lever)
