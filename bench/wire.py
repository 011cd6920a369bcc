"""The purchase's round trip: redis-py's pipeline and pool vs ``seckill.store.Wire``.

    python -m bench.wire [--calls 20000] [--rounds 3] [--output bench/results/wire.md]

Each variant sends what a purchase sends (EVALSHA of a small writing script, then WAITAOF
``1 0``) to an embedded Valkey of its own (``appendfsync always``) from one thread, ``--calls``
times per round, variants alternated round after round. The figure that matters is **CPU per
call** (``time.process_time``: this process, user + system, so the socket syscalls count):
under gunicorn that is what the two cores are shared by; wall time per call is shown too but
is mostly Valkey's fsync. Each variant first checks its replies, so only working code is timed.

Variants:

* ``pipeline``: ``Pipeline`` of EVALSHA + WAITAOF on the blocking pool, what the gateway did
  before ``Wire``;
* ``script only``: ``Script.__call__`` on the pool, without WAITAOF: the seed endpoint's call;
* ``wire``: ``Wire.call`` with both commands, what the gateway does now.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import Wire, make_pool

SCRIPT = "redis.call('INCR', KEYS[1]) return {'ok', ARGV[1], 5}"


def variants(client: redis.Redis, pool: redis.BlockingConnectionPool
             ) -> dict[str, Callable[[], Any]]:
    script = client.register_script(SCRIPT)
    sha = client.script_load(SCRIPT)
    wire = Wire(pool, limit=8, wait=1.0)

    def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(sha, 1, "bench:wire", "o-1")
        pipe.execute_command("WAITAOF", 1, 0, 1500)
        return pipe.execute(raise_on_error=False)[0]

    def script_only() -> Any:
        return script(keys=["bench:wire"], args=["o-1"])

    def wire_call() -> Any:
        return wire.call(("EVALSHA", sha, 1, "bench:wire", "o-1"), ("WAITAOF", 1, 0, 1500))[0]

    return {"pipeline": pipeline, "script only": script_only, "wire": wire_call}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wire")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-wire-") as tmp, \
            EmbeddedValkey(Path(tmp) / "valkey", appendfsync="always") as valkey:
        settings = Settings.from_env({
            "REDIS_URL": valkey.url, "SECKILL_SECRET_KEY": "k" * 32,
            "SECKILL_JWT_SECRET": "j" * 32, "SECKILL_ADMIN_TOKEN": "a" * 32,
            "SECKILL_DATA_DIR": tmp,
        })
        pool = make_pool(settings)
        client = redis.Redis(connection_pool=pool)
        calls = variants(client, pool)
        for name, call in calls.items():
            if call() != ["ok", "o-1", 5]:
                raise SystemExit(f"{name}: unexpected reply {call()!r}")
        for _ in range(args.rounds):
            for name, call in calls.items():
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                for _ in range(args.calls):
                    call()
                cpu.setdefault(name, []).append((time.process_time() - cpu_start) / args.calls)
                wall.setdefault(name, []).append((time.perf_counter() - wall_start) / args.calls)
        client.close()
    base = statistics.median(cpu["pipeline"])
    lines = [
        "# The purchase's round trip: CPU per call", "",
        f"`python -m bench.wire --calls {args.calls} --rounds {args.rounds}`; Python "
        f"{sys.version.split()[0]}, redis-py {redis.__version__}. Medians of the rounds.", "",
        "| variant | CPU µs per call | vs pipeline | wall µs per call |",
        "|---|---:|---:|---:|",
    ]
    for name in calls:
        median = statistics.median(cpu[name])
        lines.append(f"| {name} | {median * 1e6:.1f} | {median / base:.2f}x | "
                     f"{statistics.median(wall[name]) * 1e6:.1f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output is not None:
        args.output.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
