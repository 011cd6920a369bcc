"""Where a worker's CPU goes under one workload: py-spy on every worker during a wrk run.

    python -m bench.profile [--workload purchase] [--seconds 10] [--top 25] [--output FILE]

Starts the same stack as ``python -m bench run`` (Valkey, the gateway and the workload's own
server under gunicorn with gevent workers), sets up the workload as the harness does
(``bench.workloads.prepare``), runs wrk for ``--seconds`` while ``py-spy record --format raw``
samples every gunicorn worker (idle samples left out: a worker waiting in the gevent hub is
not using the CPU), and prints the functions by share of the samples: *self* (the function
itself was running) and *inclusive* (it was on the stack). Needs ``py-spy`` (the ``bench``
extra); it reads the workers' memory, so it needs ptrace rights over them, which their parent
has as root.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import psutil

from bench import drops
from bench.stack import started
from bench.workloads import WORKLOADS, Setup, prepare
from bench.wrk import run_wrk

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (to/module.py)``: lines folded together."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    parts = Path(match["file"]).parts
    short = "/".join(parts[-2:]) if len(parts) > 1 else match["file"]
    if "site-packages" in parts:
        short = "/".join(parts[parts.index("site-packages") + 1:])
    return f"{match['func']} ({short})"


def summarize(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in raw.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            continue
        count = int(match["count"])
        frames = [frame_name(f) for f in match["stack"].split(";") if f.strip()]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return total, own, inclusive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # The drops workloads but `purchase-before` (it needs a second gateway: bench run does that)
    timed = [n for n, w in WORKLOADS.items() if not w.counted and not w.big
             and n != drops.BEFORE]
    parser.add_argument("--workload", default="purchase", choices=timed)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--output", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists() or shutil.which("wrk") is None:
        parser.error("needs py-spy (pip install py-spy) and wrk (apt-get install wrk)")
    workload = WORKLOADS[args.workload]
    options = SimpleNamespace(users=max(30_000, (args.seconds + 3) * 8_000), soldout_units=10,
                              buyers=0, units=0, alt_buyers=0, alt_units=0)
    server = workload.server
    ready = drops.prepare if args.workload in drops.NAMES else prepare
    with started(sorted({"gateway", server}), args.workers, 1000,
                 gateway_env=drops.gateway_env([args.workload])) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-profile-") as tmp:
        folder = Path(tmp)
        setup = Setup(stack, folder)
        setup.jwts(options.users)
        # A short warm-up, as the harness does, so imports and pools are not profiled.
        warm = ready(setup, workload, options, "warm")
        run_wrk(stack.base(server), warm.requests_file, workload.method, threads=2,
                connections=args.connections, duration=2, timeout=2)
        prepared = ready(setup, workload, options, "profiled")
        workers = psutil.Process(stack.servers[server].process.pid).children()
        spies = []
        for worker in workers:
            out = folder / f"{worker.pid}.txt"
            spies.append((out, subprocess.Popen(
                [spy, "record", "--pid", str(worker.pid), "--duration", str(args.seconds),
                 "--rate", str(args.rate), "--format", "raw", "--output", str(out),
                 "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        result = run_wrk(stack.base(server), prepared.requests_file, workload.method,
                         threads=2, connections=args.connections, duration=args.seconds + 1,
                         timeout=2)
        raw = ""
        for out, process in spies:
            try:
                process.wait(args.seconds + 30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            raw += out.read_text(encoding="utf-8") if out.exists() else ""
    total, own, inclusive = summarize(raw)
    lines = [
        f"# Profile: `{args.workload}`, {args.workers} gevent workers, -c {args.connections}, "
        f"{args.seconds} s", "",
        f"wrk: {result.rate:,.0f} req/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
        f"statuses {result.statuses}; py-spy: {total:,} non-idle samples over "
        f"{len(workers)} workers at {args.rate}/s.", "",
        "| self % | function |", "|---:|---|",
        *[f"| {n / total * 100:.1f} | {name} |" for name, n in own.most_common(args.top)],
        "", "| inclusive % | function |", "|---:|---|",
        *[f"| {n / total * 100:.1f} | {name} |" for name, n in inclusive.most_common(args.top)],
    ] if total else ["py-spy recorded no samples (ptrace not allowed?)"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
