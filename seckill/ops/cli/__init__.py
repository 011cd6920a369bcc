"""The ``seckill`` command: run the stack (``up``, in :mod:`seckill.ops.stack.up`), mint a user
token, manage activities, run the orders worker alone, render an nginx config. Its parser and
dispatch are here (``seckill.ops.cli.main``, the console script; ``python -m seckill.ops.cli``);
the commands on the store are one module per resource: :mod:`.activities`, :mod:`.sale`,
:mod:`.orders`, :mod:`.blocks`, :mod:`.webhooks`, :mod:`.operators`, :mod:`.secrets`,
:mod:`.aof`; the store they use, who they act as and how its failures read: :mod:`.store`.
A command's action writes its audit line on standard error (``seckill.operator.trail``).

Exit codes: 0 done; 1 the operation failed (Redis unreachable, activity exists, a child kept
crashing); 2 bad input or configuration, with one line ``seckill: <message>`` and no traceback.

A command imports what only it needs (the operator layer, the store's services, the drill,
Flask) inside its function, in every module of this wing: the parser, ``--help``, ``seckill
token`` and a mistyped command answer without loading them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from seckill import config
from seckill.config import MIN_KEY_BYTES, ConfigError, Settings
from seckill.domain import errors
from seckill.ops.cli.activities import (
    add_product_options,
    cmd_activity_admission,
    cmd_activity_create,
    cmd_activity_restock,
    cmd_activity_show,
    cmd_reconcile,
    units_arg,
)
from seckill.ops.cli.aof import cmd_aof_repair
from seckill.ops.cli.blocks import add_block_commands
from seckill.ops.cli.operators import add_operator_commands
from seckill.ops.cli.orders import cmd_order_cancel, cmd_order_pay
from seckill.ops.cli.sale import add_sale_verbs
from seckill.ops.cli.secrets import add_secret_commands
from seckill.ops.cli.store import READ, WRITE, Failure, audit_on_stderr, store_access
from seckill.ops.cli.variants import add_restock_variant, add_variant_options
from seckill.ops.cli.webhooks import add_webhook_commands
from seckill.sql.sealing import DataKeyError

MAX_TOKEN_TTL = 30 * 24 * 3600
IP_RATE = re.compile(r"off|[1-9][0-9]{0,6}r/[sm]")


# -- argument types --------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def _ip_rate(text: str) -> str:
    if IP_RATE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"expected e.g. 20r/s, 600r/m or off, got {text!r}")
    return text


# -- seckill token ---------------------------------------------------------------------


def cmd_token(args: argparse.Namespace) -> int:
    """``seckill token``: print a user JWT signed with ``SECKILL_JWT_SECRET``."""
    from edge.identity import mint_user_token
    from seckill.domain.activities import USER_ID

    if USER_ID.fullmatch(args.uid) is None:
        raise errors.BadRequest(f"user id must match [A-Za-z0-9_.@-]{{1,64}}, got {args.uid!r}")
    if not 1 <= args.ttl <= MAX_TOKEN_TTL:
        raise errors.BadRequest(f"--ttl must be between 1 and {MAX_TOKEN_TTL} seconds")
    secret = config.operator_secrets()[0]
    if not secret:
        raise ConfigError(
            "SECKILL_JWT_SECRET is not set; export the secret the gateway verifies tokens "
            "with (`seckill up` prints it in development mode)"
        )
    if len(secret.encode()) < MIN_KEY_BYTES:
        raise ConfigError(f"SECKILL_JWT_SECRET must be at least {MIN_KEY_BYTES} bytes")
    print(mint_user_token(args.uid, secret, args.ttl))
    return 0


# -- seckill worker --------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    """``seckill worker``: run the orders worker in this process."""
    from seckill.worker import run

    return run.main(Settings.from_env())


# -- seckill nginx render --------------------------------------------------------------


def cmd_nginx_render(args: argparse.Namespace) -> int:
    """``seckill nginx render``: write a complete nginx.conf (to standard output by default)."""
    from seckill.ops.stack import nginx

    options = nginx.NginxOptions(
        backends=args.backend, port=args.port, admin_port=args.admin_port,
        ip_rate=args.ip_rate, ip_burst=args.ip_burst, ip_connections=args.ip_connections,
        listen_host=args.listen, run_dir=Path(args.run_dir),
        static_root=Path(args.static_root) if args.static_root else None,
        read_timeout=args.read_timeout, access_log=args.access_log,
        edge_cache=not args.no_edge_cache,
    )
    try:
        text = nginx.render(options)
    except nginx.RenderError as exc:
        raise errors.BadRequest(str(exc)) from None
    nginx.prepare_run_dir(options.run_dir)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


# -- seckill reconcile -----------------------------------------------------------------


def cmd_nginx_exporter(args: argparse.Namespace) -> int:
    """``seckill nginx exporter``: nginx's counts from its access log, for Prometheus."""
    from pathlib import Path

    from seckill.ops.stack.nginx_metrics import serve

    return serve(Path(args.log), args.port, args.host)


def cmd_reconcile_access(args: argparse.Namespace) -> int:
    """``seckill reconcile``: read-only (nothing written anywhere) unless ``--repair``."""
    with store_access(WRITE if args.repair else READ):
        return cmd_reconcile(args)


# -- seckill up ------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    """``seckill up``: run the whole stack in the foreground."""
    from seckill.ops.stack import up

    if args.log_json:  # for this process and, through the environment, every child
        os.environ["SECKILL_LOG_FORMAT"] = "json"
    return up.run(args)


def cmd_drill(args: argparse.Namespace) -> int:
    """``seckill drill``: the sale-day fire drill (docs/drill.md); exit 1 if an invariant fails."""
    from seckill.ops import drill

    return drill.run(args)


# -- the parser ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``seckill`` command's argument parser, every subcommand included."""
    parser = argparse.ArgumentParser(
        prog="seckill", description="A flash-sale gateway (see README.md and API.md)."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    up = commands.add_parser("up", help="run the whole stack in the foreground")
    up.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    up.add_argument("--port", type=_port, default=8080, help="public port (default 8080)")
    up.add_argument("--admin-port", type=_port, default=8081,
                    help="operator port, loopback only, once nginx is in front (default 8081)")
    up.add_argument("--instances", type=_positive, default=2,
                    help="gunicorn instances behind nginx (default 2)")
    up.add_argument("--workers", type=_positive, default=2,
                    help="gevent workers per gunicorn instance (default 2)")
    up.add_argument("--ip-rate", type=_ip_rate, default="20r/s",
                    help="nginx per-client-IP rate, e.g. 20r/s, or off (default 20r/s)")
    up.add_argument("--no-nginx", action="store_true", help="serve through gunicorn directly")
    up.add_argument("--log-json", action="store_true",
                    help="every process logs one JSON object per line (SECKILL_LOG_FORMAT=json)")
    up.add_argument("--no-access-log", action="store_true",
                    help="no access log (default: <data>/logs/access.log, with each outcome)")
    up.add_argument("--redis-nodes", type=int, metavar="N",
                    help="an embedded Valkey Cluster of N masters (N >= 3) instead of one server")
    up.add_argument("--replicas", type=int, metavar="R",
                    help="with --redis-nodes: R replicas of each master (default 0)")
    up.set_defaults(handler=cmd_up)

    drill = commands.add_parser(
        "drill", help="a sale-day fire drill: a crowd through a stack of its own while its "
                      "children are killed, then the purchase invariants (docs/drill.md)")
    drill.add_argument("--users", type=_positive, default=3000,
                       help="distinct buyers (default 3000)")
    drill.add_argument("--duration", type=_positive, default=60, metavar="SECONDS",
                       help="how long the crowd runs (default 60)")
    drill.add_argument("--redis-nodes", type=int, metavar="N",
                       help="an embedded Valkey Cluster of N masters (N >= 3)")
    drill.add_argument("--replicas", type=int, metavar="R",
                       help="with --redis-nodes: R replicas of each master")
    drill.add_argument("--report", metavar="DIR",
                       help="write report.md, chart.svg and requests.csv there")
    drill.add_argument("--target", metavar="URL",
                       help="no stack of its own, no fault: the crowd against this deployment "
                            "(SECKILL_JWT_SECRET, SECKILL_ADMIN_TOKEN from the environment)")
    drill.add_argument("--admin-url", metavar="URL", help="with --target: its operator listener")
    drill.add_argument("--faults", default="classic", metavar="LIST",
                       help="which faults: classic (default), gray, all, or a comma list of "
                            "their names (docs/drill.md)")
    drill.add_argument("--database", metavar="URL",
                       help="a PostgreSQL server for the drill's stack (a schema of its own, "
                            "dropped afterwards, reached through a proxy of the drill's own)")
    drill.set_defaults(handler=cmd_drill)

    token = commands.add_parser("token", help="print a user JWT signed with SECKILL_JWT_SECRET")
    token.add_argument("uid", help="the user id (the token's sub)")
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    token.set_defaults(handler=cmd_token)

    worker = commands.add_parser("worker", help="run the orders worker alone (Redis -> database)")
    worker.set_defaults(handler=cmd_worker)

    nginx = commands.add_parser("nginx", help="nginx in front of gunicorn instances")
    nginx_verbs = nginx.add_subparsers(dest="verb", metavar="VERB", required=True)
    render = nginx_verbs.add_parser("render", help="write a complete nginx.conf")
    render.add_argument("--backend", action="append", required=True, metavar="HOST:PORT",
                        help="a gunicorn instance (repeat for each)")
    render.add_argument("--port", type=_port, default=8080, help="public port (default 8080)")
    render.add_argument("--admin-port", type=_port, default=8081,
                        help="operator port, on 127.0.0.1 (default 8081)")
    render.add_argument("--ip-rate", type=_ip_rate, default="20r/s",
                        help="per-client-IP rate, e.g. 20r/s, or off (default 20r/s)")
    render.add_argument("--ip-burst", type=int, default=40,
                        help="requests over the rate let through at once, per IP (default 40)")
    render.add_argument("--ip-connections", type=_positive, default=50,
                        help="open connections per IP (default 50)")
    render.add_argument("--listen", default="0.0.0.0", metavar="HOST",
                        help="address of the public listener (default 0.0.0.0)")
    render.add_argument("--static-root", metavar="DIR",
                        help="the sale page's folder "
                             "(default: frontends/sale_page of this package)")
    render.add_argument("--read-timeout", type=_positive, default=10, metavar="SECONDS",
                        help="how long an instance may take to answer (default 10)")
    render.add_argument("--access-log", action="store_true",
                        help="write <run-dir>/access.log (default: off)")
    render.add_argument("--no-edge-cache", action="store_true",
                        help="never answer the crowd's activity-level refusals from nginx "
                             "(docs/deployment.md, the nginx config)")
    render.add_argument("--run-dir", default="/tmp/seckill-nginx",
                        help="nginx's pid, logs and temp files (default /tmp/seckill-nginx)")
    render.add_argument("-o", "--output", help="file to write (default: standard output)")
    render.set_defaults(handler=cmd_nginx_render)
    exporter = nginx_verbs.add_parser(
        "exporter", help="serve nginx's counts (requests by status, its own 429s, 502/504s, "
                         "the refusals it repeated per activity) for Prometheus, read from "
                         "its access log")
    exporter.add_argument("--log", required=True, help="the access log (either stack format)")
    exporter.add_argument("--port", type=_port, required=True)
    exporter.add_argument("--host", default="127.0.0.1")
    exporter.set_defaults(handler=cmd_nginx_exporter)

    activity = commands.add_parser(
        "activity", help="create, list, show, restock, pause, resume or end activities (REDIS_URL, "
        "or the running up's)"
    )
    verbs = activity.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", help="create an activity (the admin API's validation)")
    create.add_argument("--id", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--kind", choices=("stock", "packets"), default="stock",
                        help="stock (units for sale, the default) or packets (red envelopes)")
    create.add_argument("--total", help="stock: units for sale, or 'unlimited'")
    create.add_argument("--amount", type=int, metavar="CENTS",
                        help="packets: the amount to split, in cents")
    create.add_argument("--count", type=int, help="packets: how many packets")
    starts = create.add_mutually_exclusive_group()
    starts.add_argument("--starts-at", help="ISO 8601 with an offset, e.g. 2026-11-21T12:00:00Z")
    starts.add_argument("--starts-in", type=int, metavar="SECONDS",
                        help="start this many seconds from now (default: now)")
    ends = create.add_mutually_exclusive_group(required=True)
    ends.add_argument("--ends-at", help="ISO 8601 with an offset")
    ends.add_argument("--duration", type=int, metavar="SECONDS", help="sale length in seconds")
    create.add_argument("--per-user-limit", type=int, help="units one user may buy (default 1)")
    create.add_argument("--shards", type=int, metavar="N",
                        help="stock: split it into N parts (1..64) spread over a cluster's "
                             "masters, for one hot item (default 1)")
    create.add_argument("--payment-window", type=int, metavar="SECONDS",
                        help="buyers have this long to pay (0..86400); an unpaid order expires "
                             "and its units go back on sale (default 0: a purchase is final)")
    create.add_argument("--admission", choices=("first_come", "queue", "draw"),
                        help="who may buy: first come (default), a queue in a random order "
                             "for those who join before the start, or a draw")
    opens = create.add_mutually_exclusive_group()
    opens.add_argument("--queue-opens-in", type=int, metavar="SECONDS",
                       help="queue/draw: the queue opens this many seconds from now "
                            "(default: now)")
    opens.add_argument("--queue-opens-at", help="queue/draw: ISO 8601 with an offset")
    create.add_argument("--challenge", action="store_true",
                        help="queue/draw: joining needs a solved proof-of-work challenge")
    create.add_argument("--limit-by", choices=("user", "person"),
                        help="stock: one purchase (and --per-user-limit units) per account "
                             "(user, default) or per verified person across their accounts "
                             "(person: needs SECKILL_PERSON_CLAIM)")
    add_product_options(create)
    add_variant_options(create)
    create.set_defaults(handler=cmd_activity_create)
    add_sale_verbs(verbs)
    show = verbs.add_parser("show", help="print an activity (reads only)")
    show.add_argument("id")
    show.set_defaults(handler=cmd_activity_show)
    restock = verbs.add_parser(
        "restock", help="add units to an activity's stock (negative: remove unsold units)"
    )
    restock.add_argument("id")
    restock.add_argument("units", type=units_arg, help="units to add; e.g. 50, or -5")
    add_restock_variant(restock)
    restock.set_defaults(handler=cmd_activity_restock)
    factor = verbs.add_parser(
        "admission", help="set a queue's admission factor live (admitted <= units left x it)")
    factor.add_argument("id")
    factor.add_argument("--factor", type=float, required=True, help="above 0, at most 100")
    factor.set_defaults(handler=cmd_activity_admission)

    order = commands.add_parser("order", help="operator actions on orders")
    order_verbs = order.add_subparsers(dest="verb", metavar="VERB", required=True)
    cancel = order_verbs.add_parser("cancel", help="cancel an order: its stock goes back")
    cancel.add_argument("order_id")
    cancel.set_defaults(handler=cmd_order_cancel)
    pay = order_verbs.add_parser("pay", help="record a held order's payment (payment window)")
    pay.add_argument("order_id")
    pay.add_argument("--ref", required=True, help="the payment's reference (idempotency key)")
    pay.set_defaults(handler=cmd_order_pay)

    rec = commands.add_parser(
        "reconcile", help="compare an activity's Redis state with the database (reads only)"
    )
    rec.add_argument("id")
    rec.add_argument("--repair", action="store_true",
                     help="rebuild Redis from the database when it lost the activity or they "
                          "differ (and no order waits)")
    rec.set_defaults(handler=cmd_reconcile_access)

    add_block_commands(commands)
    add_webhook_commands(commands)
    add_operator_commands(commands)

    aof = commands.add_parser("aof", help="a stopped Valkey server's append-only file")
    aof_verbs = aof.add_subparsers(dest="verb", metavar="VERB", required=True)
    aof_repair = aof_verbs.add_parser(
        "repair", help="drop incomplete transactions (torn MULTI) from the AOF of a stopped "
                       "server, keeping the original beside it; then valkey-check-aof")
    aof_repair.add_argument("path", help="a manifest, a folder holding manifests (e.g. the "
                                         "data folder of seckill up), or an AOF file")
    aof_repair.add_argument("--dry-run", action="store_true", help="say what would be cut")
    aof_repair.set_defaults(handler=cmd_aof_repair)
    add_secret_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``seckill`` command; returns its exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with audit_on_stderr():
            return int(handler(args))
    except (ConfigError, errors.BadRequest) as exc:
        print(f"seckill: {exc}", file=sys.stderr)
        return 2
    except (Failure, FileNotFoundError, errors.SeckillError, DataKeyError) as exc:
        print(f"seckill: {exc}", file=sys.stderr)
        return 1

