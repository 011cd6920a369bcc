"""``seckill operators add|list|revoke``: named operators from the command line, the actions of
``seckill.operator.operators`` the admin API calls too (``POST /admin/operators``,
``GET /admin/operators``, ``DELETE /admin/operators/<name>``), printed as text.

Operators live in the database (``seckill.sql.operators``): a running gateway takes a new
token, and refuses a revoked one, in every process within a second of the command's answer.
The command itself needs no token: it acts with the store's credentials, as ``cli:<login>``
(``SECKILL_OPERATOR`` names someone else) in the audit trail."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from seckill.domain import errors
from seckill.domain.operators import ROLES
from seckill.ops.cli import listing
from seckill.ops.cli.store import CREATE, READ, WRITE, actor, refused, store_services

_COLUMNS = ("name", "role", "created_at", "created_by", "revoked_at", "revoked_by")


def cmd_add(args: argparse.Namespace) -> int:
    """``seckill operators add NAME --role ROLE``: make an operator; prints them with their
    token, shown this once."""
    from seckill.operator import operators

    name, role = operators.new_operator({"name": args.name, "role": args.role})
    # CREATE: a deployment may make its operators before its gateway's first start.
    with store_services(CREATE) as services:
        try:
            made, token = operators.add(services, name, role, by=actor())
        except errors.SeckillError as exc:
            if exc.status >= 500:
                raise
            raise refused(exc) from None
    print(json.dumps({**made.body(), "token": token}, indent=2))
    print(f"The token is shown this once: hand it to {name} (nothing keeps it; revoke and add "
          "another name if it is lost).", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """``seckill operators list``: every operator ever made, revoked ones too (reads only;
    never a token)."""
    from seckill.operator import operators

    with store_services(READ) as services:
        rows: list[dict[str, Any]] = [o.body() for o in operators.listed(services)]
    listing.print_rows(rows, args.json, _COLUMNS, none="(no named operator: only "
                                                       "SECKILL_ADMIN_TOKEN)")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    """``seckill operators revoke NAME``: their token is refused everywhere within a second."""
    from seckill.operator import operators

    name = operators.checked_name(args.name)
    with store_services(WRITE) as services:
        try:
            revoked = operators.revoke(services, name, by=actor())
        except errors.SeckillError as exc:
            if exc.status >= 500:
                raise
            raise refused(exc) from None
    print(json.dumps(revoked.body(), indent=2))
    return 0


def add_operator_commands(commands: Any) -> None:
    """``seckill operators add``, ``list`` and ``revoke``."""
    group = commands.add_parser(
        "operators", help="named operators and their roles: add (prints the token once), "
                          "list, revoke")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="make an operator; prints their token, this once")
    add.add_argument("name", help="[A-Za-z0-9_.@-]{1,64}, never given again once revoked")
    add.add_argument("--role", required=True, choices=ROLES,
                     help="viewer (reads), operator (the sale-day levers) or admin (also "
                          "activities, webhook endpoints, payments by hand, operators)")
    add.set_defaults(handler=cmd_add)
    listed = verbs.add_parser("list", help="every operator, revoked ones too (reads only)")
    listed.add_argument("--json", action="store_true", help="one JSON object per line")
    listed.set_defaults(handler=cmd_list)
    revoke = verbs.add_parser("revoke", help="revoke an operator: their token is refused in "
                                             "every gateway process within a second")
    revoke.add_argument("name")
    revoke.set_defaults(handler=cmd_revoke)
