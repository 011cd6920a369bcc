"""``seckill block``, ``seckill unblock`` and ``seckill blocks``: the operator's blocks from the
command line, the actions of ``seckill.operator.blocks`` the admin API calls too
(``POST /admin/blocks``, ``DELETE /admin/blocks/...``, ``GET /admin/blocks``), printed as text.

Blocks live in the database (``seckill.sql.blocks``); every running gateway process refuses a
blocked buyer within a second of the command's answer."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seckill.domain import errors
from seckill.ops.cli import listing
from seckill.ops.cli.store import READ, WRITE, actor, no_activity, refused, store_services

_COLUMNS = ("kind", "id", "activity", "created_at", "reason")


def _who(args: argparse.Namespace) -> tuple[str, str]:
    return ("user", args.user) if args.user is not None else ("person", args.person)


def cmd_block(args: argparse.Namespace) -> int:
    """``seckill block``: block a user or a person (on one activity, or every one)."""
    from seckill.operator import blocks

    kind, subject = _who(args)
    body: dict[str, Any] = {kind: subject}
    if args.activity is not None:
        body["activity"] = args.activity
    if args.reason is not None:
        body["reason"] = args.reason
    with store_services(WRITE) as services:
        # The admin API's validation (exit 2 naming the field), in the gateway's person form.
        wanted = blocks.new_block(body, services.settings.person_canon)
        try:
            stored = blocks.block(services, wanted, by=actor())
        except errors.UnknownActivity:
            raise no_activity(str(args.activity)) from None
    print(json.dumps(stored.body(), indent=2))
    return 0


def cmd_unblock(args: argparse.Namespace) -> int:
    """``seckill unblock``: lift a block (the one on ``--activity``, or the one on every
    activity)."""
    from seckill.domain.blocks import UnknownBlock
    from seckill.operator import blocks

    kind, subject = _who(args)
    with store_services(WRITE) as services:
        named = blocks.target(kind, subject, args.activity, services.settings.person_canon)
        try:
            lifted = blocks.unblock(services, *named, by=actor())
        except UnknownBlock as exc:
            raise refused(exc) from None
    print(json.dumps(lifted.body(), indent=2))
    return 0


def cmd_blocks(args: argparse.Namespace) -> int:
    """``seckill blocks``: every block in force, in the order they were made (reads only)."""
    from seckill.operator import blocks

    def page(after: int) -> tuple[list[dict[str, Any]], int | None]:
        found, following = blocks.page(services, after, blocks.MAX_PAGE)
        return [b.body() for b in found], following

    with store_services(READ) as services:
        rows = listing.every_page(page, 0)
    listing.print_rows(rows, args.json, _COLUMNS, _line, none="(no block)")
    return 0


def _line(row: dict[str, Any]) -> tuple[str, ...]:
    kind = "user" if "user" in row else "person"
    return (kind, row[kind], row["activity"] or "(every)", row["created_at"],
            row["reason"] or "-")


def _add_who(parser: argparse.ArgumentParser, verb: str) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="UID", help=f"{verb} this account (a token's sub)")
    who.add_argument("--person", metavar="PID",
                     help=f"{verb} this person, every account of theirs (the value of the "
                          "SECKILL_PERSON_CLAIM claim)")


def add_block_commands(commands: Any) -> None:
    """``seckill block``, ``seckill unblock`` and ``seckill blocks``."""
    block = commands.add_parser(
        "block", help="block a user or a person: 403 blocked on the URL, the queue and the "
                      "purchase, in every gateway process within a second")
    _add_who(block, "block")
    block.add_argument("--activity", metavar="ID",
                       help="only on this activity (default: on every activity)")
    block.add_argument("--reason", help="why (at most 200 characters; shown in the list)")
    block.set_defaults(handler=cmd_block)

    unblock = commands.add_parser(
        "unblock", help="lift a block (the one on --activity, or the one on every activity)")
    _add_who(unblock, "unblock")
    unblock.add_argument("--activity", metavar="ID",
                         help="the block on this activity (default: the one on every activity)")
    unblock.set_defaults(handler=cmd_unblock)

    listed = commands.add_parser("blocks", help="list the blocks in force (reads only)")
    listed.add_argument("--json", action="store_true", help="one JSON object per line")
    listed.set_defaults(handler=cmd_blocks)
