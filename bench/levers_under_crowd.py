"""How long the operator's levers take while a crowd buys and the webhooks' dispatcher
delivers: the real stack (``seckill up``: embedded Valkey, SQLite or ``--database-url``,
nginx, gunicorn, the orders worker, the dispatcher), ``--endpoints`` webhook endpoints
registered to a local 204 receiver, ``--buyers`` threads each buying for distinct users
through the public port, and one operator pausing and resuming an activity of its own (and
reading its stats) through the operator port, back to back, for ``--seconds``.

Reports each lever's p50/p99/max and every non-2xx answer. Bounded in count and time; only
127.0.0.1. The database's levers need it (the activity's row), and SQLite has one writer at
a time: this measures whether the orders worker's batches and the dispatcher's rounds leave
the operator's writes their turn.

    python -m bench.levers_under_crowd --seconds 30 --buyers 8 --endpoints 3
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from edge.identity import mint_user_token
from edge.purchase_url import PurchaseUrlSigner
from seckill.ops.stack.ports import free_listen_port

SECRET = "bench-url-key-0123456789abcdef0123456789abcd"
JWT = "bench-jwt-secret-0123456789abcdef0123456789"
ADMIN = "bench-admin-token-0123456789"


class _Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received += 1
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        return


@contextlib.contextmanager
def receiver() -> Iterator[int]:
    """A local webhook receiver answering 204; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def stack(folder: Path, database_url: str | None) -> Iterator[tuple[int, int]]:
    """``seckill up`` on free ports (per-IP limits off); its public and operator ports."""
    public = free_listen_port()
    admin = free_listen_port(avoid=(public,))
    env = {**os.environ, "SECKILL_ENV": "production", "SECKILL_SECRET_KEY": SECRET,
           "SECKILL_JWT_SECRET": JWT, "SECKILL_ADMIN_TOKEN": ADMIN,
           "SECKILL_DATA_DIR": str(folder / "data"), "SECKILL_USER_RATE": "1000/second",
           "SECKILL_ADMIN_RATE": "1000/second"}
    env.pop("REDIS_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    log = (folder / "up.log").open("wb")
    command = [str(Path(sys.executable).with_name("seckill")), "up", "--port", str(public),
               "--admin-port", str(admin), "--ip-rate", "off", "--no-access-log"]
    up = subprocess.Popen(command,
                          env=env, stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while call("GET", admin, "/healthz")[0] != 200:
            if up.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "up.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"seckill up did not come up:\n{tail}")
            time.sleep(0.5)
        yield public, admin
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(10)
        log.close()


def call(method: str, port: int, path: str, body: Any = None, token: str | None = None,
         conn: http.client.HTTPConnection | None = None, timeout: float = 30.0
         ) -> tuple[int, Any]:
    """One request; (status, JSON body or None). Status 0: no answer (refused, timed out)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=headers)
        response = conn.getresponse()
        data = response.read()
        try:
            return response.status, json.loads(data) if data else None
        except ValueError:
            return response.status, data[:200]
    except OSError:
        conn.close()
        return 0, None
    finally:
        if own:
            conn.close()


def iso(seconds: float) -> str:
    """An ISO 8601 time ``seconds`` from now."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_activity(admin: int, total: int) -> str:
    """An open activity of ``total`` units; its id."""
    aid = f"b{uuid.uuid4().hex[:10]}"
    status, body = call("POST", admin, "/admin/activities", {
        "id": aid, "name": "bench", "total": total, "starts_at": iso(-60),
        "ends_at": iso(3600)}, ADMIN)
    if status != 201:
        raise SystemExit(f"could not create an activity: {status} {body}")
    return aid


def crowd(public: int, aid: str, stop: threading.Event, index: int,
          outcomes: Counter[int]) -> None:
    """One buyer thread: distinct users, each one purchase through a signed URL."""
    signer = PurchaseUrlSigner([SECRET], ttl=60)
    conn = http.client.HTTPConnection("127.0.0.1", public, timeout=30)
    n = 0
    while not stop.is_set():
        uid = f"u{index}x{n}"
        n += 1
        token, _ = signer.sign(aid, uid)
        status, _ = call("POST", public, f"/seckill/{aid}/{token}/buy", None,
                         mint_user_token(uid, JWT, 600), conn)
        outcomes[status] += 1
        if status == 0:
            conn = http.client.HTTPConnection("127.0.0.1", public, timeout=30)
    conn.close()


def operator(admin: int, aid: str, stop: threading.Event,
             timings: dict[str, list[float]], failures: list[str]) -> None:
    """Pause, stats, resume, stats, ... back to back: each call's seconds, and its non-2xx."""
    conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=30)
    steps = [("pause", "POST", f"/admin/activities/{aid}/pause"),
             ("stats", "GET", f"/admin/activities/{aid}/stats"),
             ("resume", "POST", f"/admin/activities/{aid}/resume"),
             ("stats", "GET", f"/admin/activities/{aid}/stats")]
    k = 0
    while not stop.is_set():
        name, method, path = steps[k % len(steps)]
        k += 1
        started = time.monotonic()
        status, body = call(method, admin, path, None, ADMIN, conn)
        timings.setdefault(name, []).append(time.monotonic() - started)
        if not 200 <= status < 300:
            failures.append(f"{name} {status} {body}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=30)
        time.sleep(0.05)
    conn.close()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    """Run once, print the figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--buyers", type=int, default=8, help="buyer threads")
    parser.add_argument("--endpoints", type=int, default=3, help="webhook endpoints (0: none)")
    parser.add_argument("--database-url", default=None, help="default: the stack's SQLite")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 600 or not 0 < args.buyers <= 64 or not 0 <= args.endpoints <= 20:
        parser.error("--seconds in (0, 600], --buyers in 1..64, --endpoints in 0..20")
    with tempfile.TemporaryDirectory(prefix="bench-levers-") as tmp, \
            receiver() as hook_port, stack(Path(tmp), args.database_url) as (public, admin):
        for i in range(args.endpoints):
            status, body = call("POST", admin, "/admin/webhooks", {
                "url": f"http://127.0.0.1:{hook_port}/hook{i}",
                "events": ["order.created", "activity.sold_out"]}, ADMIN)
            if status != 201:
                raise SystemExit(f"could not register an endpoint: {status} {body}")
        sale = new_activity(admin, 10_000_000)
        lever = new_activity(admin, 10)
        stop = threading.Event()
        outcomes: Counter[int] = Counter()
        timings: dict[str, list[float]] = {}
        failures: list[str] = []
        threads = [threading.Thread(target=crowd, args=(public, sale, stop, i, outcomes))
                   for i in range(args.buyers)]
        threads.append(threading.Thread(target=operator,
                                        args=(admin, lever, stop, timings, failures)))
        for thread in threads:
            thread.start()
        stop.wait(args.seconds)
        stop.set()
        for thread in threads:
            thread.join(60)
        found = {
            "seconds": args.seconds, "buyers": args.buyers, "endpoints": args.endpoints,
            "database": args.database_url or "sqlite",
            "purchases": dict(outcomes), "webhooks_received": _Receiver.received,
            "levers": {name: {"count": len(v), "p50_ms": round(percentile(v, 50) * 1000, 1),
                              "p99_ms": round(percentile(v, 99) * 1000, 1),
                              "max_ms": round(max(v) * 1000, 1)}
                       for name, v in sorted(timings.items())},
            "non_2xx": failures[:20], "non_2xx_count": len(failures),
        }
    print(json.dumps(found, indent=2))
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
