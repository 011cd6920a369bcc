"""``python -m bench.webhooks_dispatch``: how fast the webhooks' dispatcher delivers.

    python -m bench.webhooks_dispatch [--events 20000] [--rounds 3] [--database URL]
                                      [--receiver gunicorn|threaded]
                                      [--output bench/results/webhooks_dispatch]

Each round: a fresh database (a SQLite file unless ``--database`` names a PostgreSQL server,
then a schema of the round's own), one endpoint, ``--events`` events written to the outbox
with ``add_events`` as the orders worker writes them (one batch row per transaction, which
the dispatcher's fan-out expands; two per order: created then paid, a thousand per
transaction), then the
real dispatcher (``run_dispatcher``, default options) started and timed until every delivery
is ``delivered``; bounded (``--timeout`` seconds a round). The receiver, in processes of its
own on this machine, answers 204 to every POST over keep-alive: gunicorn with gevent workers
(``receiver_app`` below), or ``tests/support/webhook_receiver.py``'s threaded server. Reports the
median of the rounds' events per second (target: >= 1,000).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.cluster import say, write_report
from bench.machine import describe, load_average
from seckill.domain.events import ORDER_CREATED, ORDER_PAID, order_event
from seckill.ops.stack.embedded import die_with_parent
from seckill.ops.stack.ports import free_listen_port
from seckill.sql import deliveries
from seckill.sql.engine import make_engine
from seckill.sql.outbox import add_events
from seckill.sql.schema import ensure_schema, webhook_deliveries, webhook_endpoints
from seckill.webhooks.options import DispatchOptions
from seckill.webhooks.run import run_dispatcher
from tests.support.servers import REPO_ROOT, stop_process
from tests.support.webhook_receiver import new_secret

TARGET = 1000.0


def receiver_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The benchmark's receiver under gunicorn: reads the body, answers 204."""
    environ["wsgi.input"].read()
    start_response("204 No Content", [("Content-Length", "0")])
    return [b""]


@contextmanager
def receiver(kind: str, workers: int) -> Iterator[str]:
    """A 204 receiver on a free loopback port, in processes of its own; its URL."""
    port = free_listen_port()
    if kind == "gunicorn":
        command = [sys.executable, "-m", "gunicorn", "-k", "gevent", "-w", str(workers),
                   "--bind", f"127.0.0.1:{port}", "--keep-alive", "30", "--no-control-socket",
                   "--log-level", "warning", "bench.webhooks_dispatch:receiver_app"]
    else:
        command = [sys.executable, "-m", "tests.support.webhook_receiver", "--port", str(port)]
    process = subprocess.Popen(command, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL,
                               start_new_session=True, preexec_fn=die_with_parent)
    try:
        url = f"http://127.0.0.1:{port}/hooks"
        deadline = time.monotonic() + 30
        while True:
            try:
                import urllib3

                if urllib3.request("POST", url, body=b"{}", retries=False,
                                   timeout=1).status == 204:
                    break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the receiver did not start: {command}") from None
            time.sleep(0.1)
        yield url
    finally:
        stop_process(process, timeout=10)


@contextmanager
def database(base: str | None, folder: Path) -> Iterator[str]:
    """A fresh database for a round: a SQLite file, or a schema on ``base`` (PostgreSQL)."""
    if not base:
        yield f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}"
        return
    schema = f"bench{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(make_engine(base).url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield (sa.engine.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
               .render_as_string(hide_password=False))
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def fill(engine: sa.Engine, url: str, events: int) -> None:
    """One endpoint at ``url``; ``events`` events (created, paid per order) in the outbox."""
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(webhook_endpoints.insert().values(
            id="ep_bench", url=url, events='["*"]', secret=new_secret(),
            created_ms=int(time.time() * 1000)))
    at = int(time.time() * 1000)
    made = [order_event(kind, {"order_id": f"o{i // 2}", "status": "confirmed",
                               "activity": "bench", "user": f"u{i // 2}", "quantity": 1}, at)
            for i, kind in zip(range(events), [ORDER_CREATED, ORDER_PAID] * events,
                               strict=False)]
    for start in range(0, events, 1000):
        with engine.begin() as conn:
            add_events(conn, made[start:start + 1000], batch=True)  # as the worker writes


def delivered(engine: sa.Engine) -> int:
    d = webhook_deliveries
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(d)
                                .where(d.c.status == deliveries.DELIVERED)).scalar_one())


def one_round(url: str, database_url: str, events: int, timeout: float) -> dict[str, Any]:
    """Fill, then time the dispatcher until every event is delivered."""
    engine = make_engine(database_url)
    try:
        fill(engine, url, events)
        stop = threading.Event()
        thread = threading.Thread(target=run_dispatcher, args=(database_url,),
                                  kwargs={"stop": stop, "options": DispatchOptions()},
                                  daemon=True)
        started = time.monotonic()
        thread.start()
        try:
            while (done := delivered(engine)) < events:
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"only {done} of {events} delivered in {timeout} s")
                time.sleep(0.05)
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            thread.join(timeout=30)
        with engine.connect() as conn:
            counted = conn.execute(sa.select(webhook_endpoints.c.delivered,
                                             webhook_endpoints.c.retried)).one()
        return {"events": events, "seconds": round(elapsed, 3),
                "per_second": round(events / elapsed, 1), "delivered_counter": counted[0],
                "retried": counted[1]}
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a round, at most")
    parser.add_argument("--database", default=None, help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--receiver", choices=("gunicorn", "threaded"), default="gunicorn")
    parser.add_argument("--receiver-workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=Path("bench/results/webhooks_dispatch"))
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    load_before = load_average()
    with tempfile.TemporaryDirectory() as folder, receiver(args.receiver,
                                                           args.receiver_workers) as url:
        for number in range(1, args.rounds + 1):
            with database(args.database, Path(folder)) as database_url:
                result = one_round(url, database_url, args.events, args.timeout)
            say(f"round {number}: {result['events']} events in {result['seconds']} s = "
                f"{result['per_second']} events/s")
            rounds.append(result)
    median = statistics.median(r["per_second"] for r in rounds)
    kind = "PostgreSQL" if args.database else "SQLite"
    met = "met" if median >= TARGET else "NOT met"
    text = (
        "# Webhooks: the dispatcher's delivery rate\n\n"
        f"`python -m bench.webhooks_dispatch --events {args.events} --rounds {args.rounds} "
        f"--receiver {args.receiver}`{' --database <PostgreSQL>' if args.database else ''}\n\n"
        f"{args.events} events (created + paid per order) to one endpoint, {kind}, the "
        f"receiver ({args.receiver}, 204) on this machine, default options (batch 300, 16 "
        "sends in flight per endpoint, keep-alive).\n\n"
        "| round | seconds | events/s |\n|---:|---:|---:|\n"
        + "".join(f"| {i} | {r['seconds']} | {r['per_second']} |\n"
                  for i, r in enumerate(rounds, start=1))
        + f"\nMedian: **{median:.0f} events/s** (target >= {TARGET:.0f}: {met}).\n\n"
        f"Machine: {describe('sqlalchemy', 'urllib3', 'standardwebhooks')}; load average "
        f"before {load_before[0]:.2f}, after {load_average()[0]:.2f}.\n"
    )
    write_report(args.output, text, {"rounds": rounds, "median_per_second": median,
                                      "target": TARGET, "database": kind,
                                      "receiver": args.receiver})
    return 0 if median >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
