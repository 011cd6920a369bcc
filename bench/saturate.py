"""A master's purchase rate with its event loop kept busy: the check of the capacity model.

Through HTTP on this 2-core machine a master decides a few hundred purchases per second, one
per wake-up of its event loop, and each pays for its own socket read, reply and AOF ``fsync``:
the CPU per purchase measured so is what a master costs when lightly loaded. Here the exact
commands the gateway sends for a purchase (built by
``seckill.store.sale.purchase.stock.Purchases`` and ``send_script`` through a wire that records
instead of sending: EVALSHA of ``lua/purchase.lua`` with the per-user rate counters, then
WAITAOF 1 0) are written to the node pre-encoded over ``connections`` sockets from one thread
(``selectors``), ``depth`` purchases in flight on each (1: the gateway's shape, one purchase
per connection at a time, each its own socket read on the node), and the replies read back with
hiredis, so that the client costs little and the node has work waiting at every wake-up, as it
would behind many gateway hosts. Every reply is checked (EVALSHA ``ok``, WAITAOF ``1``); the
run is bounded by ``purchases`` and by ``seconds``.
"""

from __future__ import annotations

import selectors
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import hiredis
import redis

from bench.clusterstack import node_delta, sample_node
from seckill.config import Settings
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.plumbing.connection import Client, send_script
from seckill.store.plumbing.durability import Durability
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.recovery import Restorer
from seckill.store.sale.purchase.borrowing import ShardedPurchases
from seckill.store.sale.purchase.stock import Purchases

PREFIX = "bsat"


class RecordingWire:
    """A ``ScriptWire`` that records the commands of each call and answers as Redis would for
    a sale in stock, so that ``Purchases.purchase`` builds exactly what the gateway sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def run_script(self, script: Any, keys: list[str], args: list[Any],
                   *after: tuple[Any, ...]) -> list[Any]:
        def record(*commands: tuple[Any, ...]) -> list[Any]:
            self.sent.extend(commands)
            return [["ok", "o-1", 1], *([[1, 0]] * len(after))]

        return send_script(record, script, keys, args, *after)

    def close(self) -> None:
        """Nothing to close."""


def encode(command: tuple[Any, ...]) -> bytes:
    """One command in RESP."""
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def purchases_bytes(client: Client, aid: str, users: range, folder: Path) -> list[bytes]:
    """Each user's purchase as the gateway sends it (default ``SECKILL_USER_RATE``, durability
    ``local``), RESP-encoded: one bytes object per purchase."""
    settings = Settings.from_env({"SECKILL_SECRET_KEY": "x" * 32, "SECKILL_JWT_SECRET": "x" * 32,
                                  "SECKILL_ADMIN_TOKEN": "x" * 32})
    keys, scripts = KeySpace(PREFIX), Scripts(client)
    book = OrderBook(make_engine(f"sqlite:///{folder / 'saturate.db'}"))
    wire = RecordingWire()
    runner = DurableRunner(client, wire, Durability("local"),
                           Restorer(client, keys, scripts, book).ensure)
    stock = Purchases(runner, keys, scripts,
                      ShardedPurchases(runner.run, keys, scripts, runner.restore, client),
                      rates=settings.user_rates)
    out = []
    for i in users:
        wire.sent.clear()
        stock.purchase(aid, f"s{i:07d}", 1)
        out.append(b"".join(encode(c) for c in wire.sent))
    if not out or not wire.sent or wire.sent[-1][0] != "WAITAOF":
        raise RuntimeError(f"the recorded purchase is not EVALSHA + WAITAOF: {wire.sent}")
    return out


def create(client: Client, aid: str, total: int) -> None:
    """An open activity of ``total`` units, written as the gateway writes one."""
    at = now_ms()
    ActivityStore(client, KeySpace(PREFIX), Scripts(client)).create(Activity(
        id=aid, name="Saturate", starts_ms=at - 60_000, ends_ms=at + 3600_000,
        total=total, remaining=total,
    ))


class _Connection:
    """One socket to the node: its purchases still to send, its replies not yet paired."""

    def __init__(self, host: str, port: int, purchases: list[bytes]) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.queue = purchases[::-1]  # popped from the end
        self.reader = hiredis.Reader()
        self.replies: list[Any] = []
        self.in_flight = 0

    def send(self, count: int) -> None:
        batch = [self.queue.pop() for _ in range(min(count, len(self.queue)))]
        if batch:
            self.sock.sendall(b"".join(batch))
            self.in_flight += len(batch)

    def receive(self) -> list[bool]:
        """Read what came; whether each purchase completed since was right (script ``ok``,
        WAITAOF confirming the local fsync)."""
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the node closed a connection")
        self.reader.feed(chunk)
        while (reply := self.reader.gets()) is not False:
            self.replies.append(reply)
        pairs = len(self.replies) // 2
        done, self.replies = self.replies[:2 * pairs], self.replies[2 * pairs:]
        self.in_flight -= pairs
        return [isinstance(script, list) and script[0] == b"ok" and isinstance(waited, list)
                and waited[0] == 1 for script, waited in zip(done[0::2], done[1::2],
                                                             strict=True)]


def _drive(host: str, port: int, work: list[list[bytes]], depth: int,
           deadline: float) -> dict[str, int]:
    """Send each connection's purchases keeping ``depth`` of them in flight on it (the next
    goes out as soon as one is answered), all from this one thread; count the answers."""
    tally = {"ok": 0, "bad": 0}
    selector = selectors.DefaultSelector()
    live: dict[int, _Connection] = {}
    try:
        for mine in work:
            conn = _Connection(host, port, mine)
            live[conn.sock.fileno()] = conn
            selector.register(conn.sock, selectors.EVENT_READ)
            conn.send(depth)
        while live and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1.0):
                conn = live[key.fd]
                for good in conn.receive():
                    tally["ok" if good else "bad"] += 1
                if time.monotonic() < deadline:
                    conn.send(depth - conn.in_flight)
                if conn.in_flight == 0:
                    selector.unregister(conn.sock)
                    conn.sock.close()
                    del live[key.fd]
    finally:
        for conn in live.values():
            conn.sock.close()
        selector.close()
    return tally


def saturate(client: Client, node: redis.Redis, host: str, port: int, aid: str,
             purchases: int, connections: int, depth: int, seconds: float) -> dict[str, Any]:
    """Drive the node on ``host:port`` (which owns ``aid``'s slot) with ``purchases`` purchases
    of ``aid``; what it did and how fast. ``client`` reaches the activity's keys (a cluster
    client on a cluster), ``node`` is a plain client of the node (INFO)."""
    create(client, aid, purchases * 2)
    node.script_load(Scripts(client).purchase.script)  # the recorded sends are EVALSHA only
    with tempfile.TemporaryDirectory(prefix="seckill-saturate-") as tmp:
        each = purchases_bytes(client, aid, range(purchases), Path(tmp))
    work = [each[i::connections] for i in range(connections)]
    before = sample_node(node)
    tally = _drive(host, port, work, depth, time.monotonic() + seconds)
    moved = node_delta(before, sample_node(node))
    sold = int(client.hget(KeySpace(PREFIX).meta(aid), "sold") or 0)
    done = tally["ok"]
    return {
        "purchases": done, "bad_replies": tally["bad"], "sold": sold,
        "seconds": moved["seconds"], "rate": done / moved["seconds"],
        "cpu_us": moved["cpu_s"] * 1e6 / max(1, done),
        "evalsha_us": moved["evalsha_usec"] / max(1, moved["evalsha_calls"]),
        "sent_us": moved["sent_usec"] / max(1, done),
        "node_cores": moved["cpu_s"] / moved["seconds"],
        # The main thread's wall time: on a CPU, waiting for one (the machine is shared), and
        # neither (blocked: in fsync, as work is always waiting here).
        "on_cpu": moved["run_s"] / moved["seconds"],
        "queued": moved["queued_s"] / moved["seconds"],
        "reads_per_purchase": moved["reads"] / max(1, done),
        "complete": done == purchases,
    }


def new_aid() -> str:
    return f"sat{uuid.uuid4().hex[:10]}"
