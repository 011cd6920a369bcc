"""The orders worker's throughput with the transactional outbox and without.

    .venv/bin/python -m bench.worker_outbox [--orders 20000] [--rounds 5] [--batch N]

Each run: a fresh key prefix and SQLite file, an activity of ``--orders`` units created
through the operator API, ``--orders`` purchases queued by the real purchase script (one
EVALSHA per buyer, pipelined), then the real worker (``build_worker``: the stream read, the
database batch, ``lua/confirm.lua``'s acknowledgement) is timed from its first step until
every order is stored. "with" writes each order's event (and the activity's sold_out) in the
batch's transaction, as shipped; "without" sets ``OrderBook.outbox = False`` (the bench's
switch only). Rounds alternate which goes first; the figure is the ratio of the medians
(target >= 0.9x). An embedded Valkey (appendfsync always) of its own, in a temp folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
import sqlalchemy as sa

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.sql.outbox import event_rows
from seckill.sql.schema import orders
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.web.app import create_app
from seckill.worker.run import build_worker

ADMIN_TOKEN = "bench-admin-token-0123456789"


def _env(redis_url: str, prefix: str, data_dir: Path, batch: int | None) -> dict[str, str]:
    env = {"DATABASE_URL": f"sqlite:///{data_dir / 'orders.db'}", "SECKILL_ENV": "production",
           "REDIS_URL": redis_url, "SECKILL_SECRET_KEY": "bench-url-key-" + "0" * 32,
           "SECKILL_JWT_SECRET": "bench-jwt-secret-" + "0" * 32,
           "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN, "SECKILL_KEY_PREFIX": prefix,
           "SECKILL_DATA_DIR": str(data_dir), "SECKILL_ADMIN_RATE": "1000/second",
           "SECKILL_WORKER_BLOCK_MS": "50"}
    if batch is not None:
        env["SECKILL_WORKER_BATCH"] = str(batch)
    return env


def one_run(redis_url: str, work: Path, count: int, with_outbox: bool,
            batch: int | None) -> tuple[float, float]:
    """Seconds the worker took to store ``count`` queued orders: wall clock, and this
    process's CPU (the worker's Python and SQLite's, not Redis's nor the disk's)."""
    prefix = f"b{uuid.uuid4().hex[:10]}"
    data_dir = work / prefix
    data_dir.mkdir()
    settings = Settings.from_env(_env(redis_url, prefix, data_dir, batch))
    app = create_app(settings)
    aid = f"a{uuid.uuid4().hex[:10]}"
    now = datetime.now(UTC)
    answer = app.test_client().post(
        "/admin/activities", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        json={"id": aid, "name": "bench", "total": count,
              "starts_at": (now - timedelta(minutes=1)).isoformat(),
              "ends_at": (now + timedelta(hours=1)).isoformat()})
    assert answer.status_code == 201, answer.get_json()
    app.extensions["seckill"].close()
    rds = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        _queue(rds, KeySpace(prefix), aid, count)
    finally:
        rds.close()
    worker = build_worker(settings)
    worker.book.outbox = with_outbox
    engine = worker.book.engine
    try:
        started, cpu = time.perf_counter(), time.process_time()
        seen = 0
        for _ in range(count):  # bounded: every step sees at least one entry until done
            seen += worker.step()
            if seen >= count:
                break
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
        with engine.connect() as conn:
            stored = conn.execute(sa.select(sa.func.count()).select_from(orders)).scalar_one()
            events = len(event_rows(conn))  # a batch's row holds its events
        assert stored == count, (stored, count)
        assert events == (count + 1 if with_outbox else 0), events
        return took, cpu
    finally:
        worker.client.close()
        engine.dispose()


def _queue(rds: redis.Redis, keys: KeySpace, aid: str, count: int) -> None:
    script = Scripts(rds).purchase
    sha = rds.script_load(script.script)
    for start in range(0, count, 1000):
        pipe = rds.pipeline(transaction=False)
        for n in range(start, min(count, start + 1000)):
            pipe.execute_command("EVALSHA", sha, 3, *keys.activity_keys(aid), f"u{n:07d}", 1,
                                 aid)
        for reply in pipe.execute():
            assert reply[0] == "ok", reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=None,
                        help="SECKILL_WORKER_BATCH (default: the worker's own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as tmp:
        work = Path(tmp)
        server = EmbeddedValkey(work / "valkey", appendfsync="always")
        server.start()
        try:
            rates: dict[bool, list[float]] = {True: [], False: []}
            cpu_rates: dict[bool, list[float]] = {True: [], False: []}
            for n in range(args.rounds):
                for mode in ((True, False) if n % 2 else (False, True)):
                    took, cpu = one_run(server.url, work, args.orders, mode, args.batch)
                    rates[mode].append(args.orders / took)
                    cpu_rates[mode].append(args.orders / cpu)
                    print(f"round {n + 1} {'with' if mode else 'without'} outbox: "
                          f"{args.orders / took:,.0f} orders/s ({took:.2f} s wall, "
                          f"{cpu:.2f} s CPU)", flush=True)
        finally:
            server.stop()
    for label, got in (("wall clock", rates), ("per CPU second", cpu_rates)):
        with_, without = statistics.median(got[True]), statistics.median(got[False])
        per_round = [w / o for w, o in zip(got[True], got[False], strict=True)]
        print(f"{label}: median with outbox {with_:,.0f} orders/s, without {without:,.0f}: "
              f"{with_ / without:.2f}x (target >= 0.9x); per round "
              + ", ".join(f"{r:.2f}" for r in per_round))


if __name__ == "__main__":
    main()
