"""``seckill webhooks add|list|remove|deliveries|replay|run``: the shop's webhook endpoints from
the command line, the actions of ``seckill.operator.webhooks`` the admin API calls too
(``/admin/webhooks``), printed as text; and the dispatcher that sends the events
(``seckill.webhooks``), which ``seckill up`` also runs as a child.

Endpoints live in the database: a running dispatcher sends the next events to a new endpoint,
and stops sending to a removed one, without a restart."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seckill.domain import errors
from seckill.ops.cli import listing
from seckill.ops.cli.store import READ, WRITE, actor, refused, store_services

_LIST_COLUMNS = ("id", "url", "events", "backlog", "failed", "last_attempt")
_DELIVERY_COLUMNS = ("event_id", "type", "subject", "status", "attempts", "last_attempt_at",
                     "last_code", "next_attempt_at")


def cmd_add(args: argparse.Namespace) -> int:
    """``seckill webhooks add URL``: register an endpoint; prints it with its secret (shown
    this once)."""
    from seckill.operator import webhooks

    body: dict[str, Any] = {"url": args.url, "events": args.events or ["*"]}
    if args.secret is not None:
        body["secret"] = args.secret
    url, events, secret = webhooks.new_endpoint(body)  # the admin API's validation: exit 2
    with store_services(WRITE) as services:
        made = webhooks.register(services, url, events, secret, by=actor())
    print(json.dumps(made.body(with_secret=True), indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """``seckill webhooks list``: every endpoint, with its backlog, failures and last attempt
    (reads only; secrets are never shown)."""
    from seckill.operator import webhooks

    def page(after: str | None) -> tuple[list[dict[str, Any]], str | None]:
        found, following = webhooks.page(services, after, webhooks.MAX_PAGE)
        return [e.body() for e in found], following

    with store_services(READ) as services:
        rows = listing.every_page(page, None)
    listing.print_rows(rows, args.json, _LIST_COLUMNS, _endpoint_line,
                       none="(no webhook endpoint)")
    return 0


def _endpoint_line(row: dict[str, Any]) -> tuple[str, ...]:
    summary = row["summary"]
    last = summary["last_attempt"]
    shown = "-" if last is None else (
        f"{last['at']} {last['code'] if last['code'] is not None else last['error']}")
    return (row["id"], row["url"], ",".join(row["events"]), str(summary["backlog"]),
            str(summary["failed"]), shown)


def cmd_remove(args: argparse.Namespace) -> int:
    """``seckill webhooks remove ID``: nothing more is sent to it (its pending deliveries
    included)."""
    from seckill.operator import webhooks

    with store_services(WRITE) as services:
        try:
            removed = webhooks.remove(services, args.id, by=actor())
        except errors.UnknownWebhook as exc:
            raise refused(exc) from None
    print(json.dumps(removed.body(), indent=2))
    return 0


def cmd_deliveries(args: argparse.Namespace) -> int:
    """``seckill webhooks deliveries ID``: its deliveries in event order (reads only)."""
    from seckill.operator import webhooks

    def page(after: int) -> tuple[list[dict[str, Any]], int | None]:
        return webhooks.deliveries(services, args.id, args.status, after, webhooks.MAX_PAGE)

    with store_services(READ) as services:
        try:
            rows = listing.every_page(page, 0)
        except errors.UnknownWebhook as exc:
            raise refused(exc) from None
    listing.print_rows(rows, args.json, _DELIVERY_COLUMNS,
                       none="(no delivery" + (f" {args.status})" if args.status else ")"))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """``seckill webhooks replay ID --since ISO``: send again every event since then that the
    endpoint subscribes to, under its original webhook-id."""
    from seckill.domain.clock import iso_from_ms
    from seckill.operator import webhooks

    since = webhooks.since_of({"since": args.since})  # exit 2 naming since
    with store_services(WRITE) as services:
        try:
            count = webhooks.replay(services, args.id, since, by=actor())
        except errors.UnknownWebhook as exc:
            raise refused(exc) from None
    print(json.dumps({"id": args.id, "since": iso_from_ms(since), "replayed": count}))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``seckill webhooks run``: the dispatcher in this process, on ``DATABASE_URL`` (or the
    data folder's database), until SIGTERM or Ctrl-C (the attempts in flight finish)."""
    from seckill import config
    from seckill.config import Settings
    from seckill.webhooks import run  # lazily: the dispatcher's own dependencies

    # The dispatcher uses the database alone: none of the gateway's secrets is needed.
    settings = Settings.from_env({**config.environment(), "SECKILL_ENV": "development"})
    return run.main(settings)


def add_webhook_commands(commands: Any) -> None:
    """``seckill webhooks ...``."""
    from seckill.domain.events import EVENT_TYPES
    from seckill.sql.webhooks import STATUSES

    hooks = commands.add_parser(
        "webhooks", help="the shop's webhook endpoints: signed events of the orders "
                         "(Standard Webhooks), and the dispatcher that sends them")
    verbs = hooks.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="register an endpoint; prints its secret (once)")
    add.add_argument("url", help="http:// or https://, without user:password@; private "
                                 "addresses are fine")
    add.add_argument("--events", nargs="+", metavar="TYPE",
                     help=f"the types sent to it ({', '.join(EVENT_TYPES)}; default: all, *)")
    add.add_argument("--secret", metavar="whsec_...",
                     help="the signing secret (default: 24 random bytes)")
    add.set_defaults(handler=cmd_add)

    listed = verbs.add_parser("list", help="every endpoint, its backlog and failures "
                                           "(reads only)")
    listed.add_argument("--json", action="store_true", help="one JSON object per line")
    listed.set_defaults(handler=cmd_list)

    remove = verbs.add_parser("remove", help="remove an endpoint (its pending deliveries too)")
    remove.add_argument("id", help="the endpoint's id (ep_...)")
    remove.set_defaults(handler=cmd_remove)

    deliveries = verbs.add_parser("deliveries", help="an endpoint's deliveries, in event "
                                                     "order (reads only)")
    deliveries.add_argument("id", help="the endpoint's id (ep_...)")
    deliveries.add_argument("--status", choices=STATUSES, help="only these")
    deliveries.add_argument("--json", action="store_true", help="one JSON object per line")
    deliveries.set_defaults(handler=cmd_deliveries)

    replay = verbs.add_parser("replay", help="send again every event since a time, under "
                                             "their original webhook-ids")
    replay.add_argument("id", help="the endpoint's id (ep_...)")
    replay.add_argument("--since", required=True, metavar="ISO",
                        help="e.g. 2026-11-21T12:00:00Z")
    replay.set_defaults(handler=cmd_replay)

    run = verbs.add_parser("run", help="run the dispatcher alone (seckill up runs one)")
    run.set_defaults(handler=cmd_run)
