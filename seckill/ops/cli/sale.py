"""``seckill activity list|pause|resume|end``: the operator's sale-day commands, the actions
of ``seckill.operator`` the operator API calls too (``GET /admin/activities``,
``POST /admin/activities/<aid>/...``), printed as text."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import CONSOLE_STATES
from seckill.ops.cli import listing
from seckill.ops.cli.store import (
    READ,
    WRITE,
    actor,
    checked_activity_id,
    no_activity,
    refused,
    store_services,
)

_COLUMNS = ("id", "state", "paused", "remaining", "total", "sold", "starts_at", "ends_at")


def cmd_activity_list(args: argparse.Namespace) -> int:
    """``seckill activity list``: every activity with its state and numbers (reads only)."""
    from seckill.domain.clock import now_ms
    from seckill.operator import activities

    def page(cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        found, following = activities.page(services, cursor, activities.MAX_PAGE, args.state,
                                           rebuild=False)
        at = now_ms()
        return [{**a.listed(at), "state": a.console_state(at)} for a in found], following

    with store_services(READ) as services:
        rows = listing.every_page(page, None)
    listing.print_rows(rows, args.json, _COLUMNS, none="(no activity" + (
        f" in state {args.state})" if args.state else ")"))
    return 0


def cmd_activity_lever(args: argparse.Namespace) -> int:
    """``seckill activity pause|resume|end``: pull the lever, then print the activity."""
    from seckill.domain.clock import now_ms
    from seckill.operator import activities, levers

    checked_activity_id(args.id)
    pull = {"pause": levers.pause, "resume": levers.resume, "end": levers.end}[args.verb]
    with store_services(WRITE) as services:
        try:
            activity = pull(services, activities.find(services, args.id), by=actor())
        except errors.UnknownActivity:
            raise no_activity(args.id) from None
        except errors.AlreadyEnded as exc:
            raise refused(exc) from None
    print(json.dumps(activity.public(now_ms()), indent=2))
    return 0


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
