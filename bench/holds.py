"""The holds side of ``python -m bench.payments``: filling an activity with held orders by the
real purchase script, watching them go (Redis's clock, the order stream tailed), and the real
orders worker as a child process."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from bench.stack import GATEWAY_PREFIX, Stack, server_env
from seckill.ops.stack.embedded import die_with_parent
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.worker.groups import GROUP
from tests.support.servers import REPO_ROOT, stop_process

KEYS = KeySpace(GATEWAY_PREFIX)
POLL = 0.02  # seconds between two looks at the holds


def redis_ms(client: redis.Redis) -> int:
    """Redis's clock (the one every pay_by is on), ms."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_for(check: Callable[[], bool], timeout: float, every: float = 0.05) -> float | None:
    """Seconds until ``check()`` held, or None if it did not within ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            return None
        time.sleep(every)
    return time.monotonic() - start


class Watch(threading.Thread):
    """Every ``POLL``: ``ZCARD holds`` with Redis's clock (TIME, same pipeline), and the
    activity's order stream tailed (XREAD) before the orders worker trims what it stored."""

    def __init__(self, url: str, aid: str, bound: float) -> None:
        super().__init__(name="watch", daemon=True)
        self.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self.holds, self.stream, self.deadline = KEYS.holds(aid), KEYS.orders(aid), bound
        self.samples: list[list[int]] = []  # [Redis ms, holds left]
        self.entries: list[dict[str, str]] = []
        self.cursor, self.error, self.halt = "0-0", "", threading.Event()

    def poll(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.holds)
        pipe.time()
        pipe.xread({self.stream: self.cursor}, count=50_000)
        held, (seconds, micros), got = pipe.execute()
        self.samples.append([int(seconds) * 1000 + int(micros) // 1000, int(held)])
        for _, entries in got or []:
            for entry_id, fields in entries:
                self.entries.append(fields)
                self.cursor = entry_id

    def run(self) -> None:
        try:
            while not self.halt.is_set() and time.monotonic() < self.deadline:
                self.poll()
                self.halt.wait(POLL)
            self.poll()  # the last entries
        except redis.RedisError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.client.close()


def fill(stack: Stack, aid: str, n: int) -> dict[str, int]:
    """``n`` holds by the real purchase script, pipelined (as ``hold_many`` in
    tests/test_payments_faults.py): order id -> pay_by."""
    sha = stack.client.script_load(Scripts(stack.client).purchase.script)
    keys = [*KEYS.activity_keys(aid), *KEYS.payment_keys(aid)]
    held: dict[str, int] = {}
    for start in range(0, n, 250):
        pipe = stack.client.pipeline(transaction=False)
        for i in range(start, min(n, start + 250)):
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, f"x{i:06d}", 1, aid)
        for reply in pipe.execute():
            if reply[0] != "ok":
                raise RuntimeError(f"filling {aid}: {reply}")
            held[str(reply[1])] = int(reply[3])
    return held


def drained(client: redis.Redis, aid: str) -> bool:
    """The orders worker has stored (read and acknowledged) every entry of ``aid``'s stream."""
    try:
        group: Any = next((g for g in client.xinfo_groups(KEYS.orders(aid))
                           if g["name"] == GROUP), None)
        last = str(client.xinfo_stream(KEYS.orders(aid))["last-generated-id"])
    except redis.ResponseError:
        return False
    return bool(group) and not group["pending"] and str(group["last-delivered-id"]) == last


@contextlib.contextmanager
def orders_worker(stack: Stack, args: argparse.Namespace) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m seckill.worker`` with the gateway's environment (its Redis, database and key
    prefix), as ``seckill up`` runs it; up once it logs that it started."""
    env = {**os.environ, **server_env(stack.valkey.url, stack.folder, "gateway", args.workers,
                                      args.worker_connections),
           "SECKILL_EXPIRY_BATCH": str(args.expiry_batch)}
    log_file = stack.folder / "worker.log"
    with log_file.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "seckill.worker"], cwd=str(REPO_ROOT), env=env,
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
    try:
        if wait_for(lambda: process.poll() is not None or "orders worker" in log_file.read_text(
                encoding="utf-8", errors="replace"), 60) is None or process.poll() is not None:
            raise RuntimeError(f"the orders worker did not start: {log_file.read_text()[-2000:]}")
        yield process
    finally:
        stop_process(process)
