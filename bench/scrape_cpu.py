"""What one scrape of ``/metrics`` costs the gateway in CPU, with no flood to hide it:

    python -m bench.scrape_cpu [--activities 100] [--scrapes 100] [--interval 0.1]

One embedded Valkey and the gateway under gunicorn (2 gevent workers, as ``bench.scrape``),
``--activities`` open activities with a sale each; then the gunicorn processes' CPU time
(psutil, master and workers) over ``--scrapes`` scrapes every ``--interval`` seconds, less
their CPU over as long a time with nobody scraping; divided by the scrapes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from bench.cluster import say
from bench.scrape import METRICS_TOKEN, SCRAPER_HEADERS, crowd_of_activities
from bench.stack import Server, started
from bench.workloads import Setup


def cpu_seconds(server: Server) -> float:
    """User + system CPU of the gunicorn master and its workers so far."""
    master = psutil.Process(server.process.pid)
    total = 0.0
    for process in [master, *master.children(recursive=True)]:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def main(argv: list[str] | None = None) -> int:
    """Measure and print the CPU per scrape."""
    top = argparse.ArgumentParser(prog="python -m bench.scrape_cpu", description=__doc__)
    top.add_argument("--activities", type=int, default=100)
    top.add_argument("--scrapes", type=int, default=100)
    top.add_argument("--interval", type=float, default=0.1)
    top.add_argument("--workers", type=int, default=2)
    args = top.parse_args(argv)
    with started(["gateway"], args.workers, 1000,
                 gateway_env={"SECKILL_METRICS_TOKEN": METRICS_TOKEN}) as stack, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-scrape-cpu-") as tmp:
        crowd_of_activities(Setup(stack, Path(tmp)), args.activities)
        server = stack.servers["gateway"]
        request = urllib.request.Request(f"{server.base}/metrics",
                                         headers=SCRAPER_HEADERS)
        size = len(urllib.request.urlopen(request, timeout=10).read())  # warm
        time.sleep(2)
        window = args.scrapes * args.interval
        before, clock = cpu_seconds(server), time.monotonic()
        time.sleep(window)
        idle, idle_s = cpu_seconds(server) - before, time.monotonic() - clock
        before, clock = cpu_seconds(server), time.monotonic()
        next_at = clock
        for _ in range(args.scrapes):  # bounded: --scrapes requests, one at a time
            with urllib.request.urlopen(request, timeout=10) as answer:
                answer.read()
            next_at += args.interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        busy, busy_s = cpu_seconds(server) - before, time.monotonic() - clock
    extra = busy - idle * busy_s / idle_s
    say(f"body {size:,} bytes; idle {idle:.3f} s CPU over {idle_s:.1f} s; scraped {busy:.3f} s "
        f"CPU over {busy_s:.1f} s ({args.scrapes} scrapes): {extra / args.scrapes * 1000:.2f} "
        f"ms CPU per scrape, {extra / busy_s:.3f} cores, "
        f"{extra / busy_s / psutil.cpu_count() * 100:.1f} % of the machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
