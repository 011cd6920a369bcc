"""The webhooks' first performance target as a scenario of ``python -m bench run``
(``--scenario webhooks``): purchases while the webhooks' dispatcher delivers every event to one
endpoint ≥ 0.95x purchases without any endpoint (same run, SQLite, receiver on this machine).

The measurement (on a quiet machine; about 5 minutes with the default 100,000 users)::

    .venv/bin/python -m bench run --scenario webhooks --rounds 5 --duration 10 --name webhooks

A development run (seconds; the figures are noise on a busy machine)::

    .venv/bin/python -m bench run --scenario webhooks --rounds 1 --duration 2 --users 20000 \\
        --name webhooks-dev

The pair, on the same gateway and the same settings, ``purchase`` then ``purchase-shop`` in odd
rounds and the other way round in even ones (the ratio is taken within the round, then the
median over the rounds, by ``bench/webhooksreport.py``):

* ``purchase``: purchases in stock, no endpoint registered and no dispatcher running;
* ``purchase-shop``: the same, while one endpoint (``events: ["*"]``, registered through
  ``POST /admin/webhooks`` of the gateway just before the run) receives every event at a local
  204 receiver (gunicorn + gevent, ``bench.webhooks_dispatch.receiver_app``) from the real
  dispatcher, ``python -m seckill.webhooks`` with the gateway's environment, started before
  the run and stopped (SIGTERM) after it.

``bench run``'s stack runs no orders worker (``bench/stack.py``), and without one no order is
stored and no ``order.created`` written, so when this scenario is named the real orders worker
(``python -m seckill.worker``, the gateway's environment) runs for the whole run, both sides of
the pair (and every other workload of the run) included: only the endpoint and its dispatcher
differ. So does the receiver (idle without an endpoint).

Each run starts clean and is checked after: before it, the worker has stored every order of
the previous runs (the order streams drained), and before ``purchase-shop`` the dispatcher
has fanned out the outbox's earlier events (to no endpoint) before the endpoint is registered,
so the endpoint gets exactly this run's events. At the end of the wrk run the report takes the
deliveries ``delivered`` so far and the backlog (orders sold but not stored yet, events not
fanned out, deliveries pending); then the harness waits (bounded, ``DRAIN_S``) until the worker
stored every sold unit and the dispatcher delivered every event, and checks that sold = stored
orders = order.created events = deliveries delivered (none failed), before it stops the
dispatcher and removes the endpoint (``DELETE /admin/webhooks/<id>``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.drops import sold_check
from bench.holds import drained, wait_for
from bench.machine import processes
from bench.stack import Stack, server_env, server_problems
from bench.workloads import Prepared, Run, Setup, Workload
from seckill.ops.stack.embedded import die_with_parent, free_port
from seckill.sql import deliveries
from seckill.sql.engine import make_engine
from seckill.sql.schema import orders, outbox, webhook_deliveries
from tests.support.servers import REPO_ROOT, running_server, stop_process

SHOP = "purchase-shop"
BASE = "purchase"
NAMES: tuple[str, ...] = (SHOP,)
RECEIVER_WORKERS = 1  # gevent: a few thousand 204s a second, more than the purchases
DRAIN_S = 120.0  # bound: the worker storing a run's orders, the dispatcher delivering them
START_S = 60.0  # bound: a child process logging that it started


@dataclass
class Shop:
    """What the scenario runs beside the stack: the orders worker (the whole run), the
    receiver (idle without an endpoint), the dispatcher (during ``purchase-shop`` runs)."""

    stack: Stack
    env: dict[str, str]
    engine: sa.Engine
    receiver_url: str
    worker: subprocess.Popen[bytes]
    receiver: subprocess.Popen[bytes]
    aids: list[str] = field(default_factory=list)  # the activities of the runs so far
    dispatcher: subprocess.Popen[bytes] | None = None
    dispatchers: int = 0  # started so far
    logs: list[Path] = field(default_factory=list)


def chosen(names: list[str]) -> bool:
    return SHOP in names


def _started(name: str, module: str, env: dict[str, str], log_file: Path,
             says: str) -> subprocess.Popen[bytes]:
    """``python -m <module>`` with ``env``, up once its log contains ``says``."""
    with log_file.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", module], cwd=str(REPO_ROOT), env=env,
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)

    def up() -> bool:
        return process.poll() is not None or says in log_file.read_text(
            encoding="utf-8", errors="replace")

    if wait_for(up, START_S) is None or process.poll() is not None:
        stop_process(process)
        raise RuntimeError(f"the {name} did not start: "
                           f"{log_file.read_text(encoding='utf-8', errors='replace')[-2000:]}")
    return process


@contextlib.contextmanager
def shop(stack: Stack, names: list[str], args: Any) -> Iterator[Shop | None]:
    """The orders worker and the receiver, up until the block ends, when the scenario runs."""
    if not chosen(names):
        yield None
        return
    env = {**os.environ, **server_env(stack.valkey.url, stack.folder, "gateway", args.workers,
                                      args.worker_connections)}
    worker_log = stack.folder / "worker.log"
    worker = _started("orders worker", "seckill.worker", env, worker_log, "orders worker")
    engine = make_engine(env["DATABASE_URL"])
    made: Shop | None = None
    try:
        with receiver(stack) as (url, process):
            made = Shop(stack, env, engine, url, worker, process,
                        logs=[worker_log, stack.folder / "receiver.log"])
            yield made
    finally:
        if made is not None:
            stop_dispatcher(made)
        stop_process(worker)
        engine.dispose()


@contextlib.contextmanager
def receiver(stack: Stack) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``bench.webhooks_dispatch``'s 204 receiver app under gunicorn + gevent on a free port,
    up until the block ends; its URL and process. (Not ``webhooks_dispatch.receiver``:
    stopping it took its 10 s stop timeout here, with a traceback; this one's gunicorn has a
    graceful timeout of 2 s.)"""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-k", "gevent",
               "-w", str(RECEIVER_WORKERS), "--graceful-timeout", "2",
               "--bind", f"127.0.0.1:{port}", "bench.webhooks_dispatch:receiver_app"]
    url = f"http://127.0.0.1:{port}/hooks"
    with running_server(command, url, env={"GUNICORN_ACCESSLOG": ""}, name="receiver",
                        log_file=stack.folder / "receiver.log", ready_status=204) as process:
        yield url, process


def cpu_ticks(state: Shop) -> tuple[float, dict[str, int]]:
    """Now, and the CPU ticks used so far by the gateway, the orders worker, the dispatcher
    (when one runs) and the receiver, each with its children (gunicorn's workers)."""
    roots = {"gateway": state.stack.servers["gateway"].process.pid, "worker": state.worker.pid,
             "receiver": state.receiver.pid}
    if state.dispatcher is not None:
        roots["dispatcher"] = state.dispatcher.pid
    table = processes()
    return time.monotonic(), {
        name: sum(used for pid, (parent, used) in table.items() if root in (pid, parent))
        for name, root in roots.items()}


def cores(before: tuple[float, dict[str, int]], after: tuple[float, dict[str, int]]
          ) -> dict[str, float]:
    """Cores' worth of CPU each used between the two readings (a reaped gunicorn worker's
    ticks are lost: none is, in a run)."""
    elapsed, tick = max(after[0] - before[0], 1e-6), os.sysconf("SC_CLK_TCK")
    return {name: round((used - before[1].get(name, 0)) / tick / elapsed, 2)
            for name, used in after[1].items()}


def start_dispatcher(state: Shop) -> None:
    state.dispatchers += 1
    log_file = state.stack.folder / f"dispatcher-{state.dispatchers}.log"
    state.logs.append(log_file)
    state.dispatcher = _started("webhooks dispatcher", "seckill.webhooks", state.env, log_file,
                                "running")


def stop_dispatcher(state: Shop) -> None:
    """SIGTERM (it finishes the attempts in flight), by PID."""
    if state.dispatcher is not None:
        stop_process(state.dispatcher, timeout=30)
        state.dispatcher = None


def _count(state: Shop, query: Any) -> int:
    with state.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def unfanned(state: Shop) -> int:
    """Events of the outbox not fanned out yet, every activity."""
    return _count(state, sa.select(sa.func.count()).select_from(outbox)
                  .where(outbox.c.fanned.is_(None)))


def figures(state: Shop, aid: str, endpoint: str | None) -> dict[str, int]:
    """The activity's stored orders, its events (and how many are not fanned out yet), and
    the endpoint's deliveries by status (all of them this run's: it is new)."""
    o, d = outbox, webhook_deliveries
    with state.engine.connect() as conn:
        stored = conn.execute(sa.select(sa.func.count()).select_from(orders)
                              .where(orders.c.activity_id == aid)).scalar_one()
        events, waiting = conn.execute(
            sa.select(sa.func.count(), sa.func.count().filter(o.c.fanned.is_(None)))
            .where(o.c.activity_id == aid)).one()
        by_status: dict[str, int] = {}
        if endpoint is not None:
            by_status = {str(s): int(n) for s, n in conn.execute(
                sa.select(d.c.status, sa.func.count()).where(d.c.endpoint_id == endpoint)
                .group_by(d.c.status))}
    return {"stored": int(stored), "events": int(events), "not_fanned": int(waiting),
            "delivered": by_status.get(deliveries.DELIVERED, 0),
            "pending": by_status.get(deliveries.PENDING, 0),
            "failed_deliveries": by_status.get(deliveries.FAILED, 0)}


def wait_stored(state: Shop, aids: list[str]) -> None:
    """Until the worker stored every order of ``aids`` (their streams drained); bounded."""
    client = state.stack.client
    if wait_for(lambda: all(drained(client, a) for a in aids), DRAIN_S, 0.1) is None:
        raise RuntimeError(f"the orders worker did not store the orders of {aids} within "
                           f"{DRAIN_S:g} s")


def register(setup: Setup, state: Shop) -> str:
    """Start the dispatcher, let it fan out the earlier events (to no endpoint), then
    register the endpoint; its id."""
    start_dispatcher(state)
    if wait_for(lambda: unfanned(state) == 0, DRAIN_S, 0.1) is None:
        raise RuntimeError(f"the dispatcher did not fan out the outbox within {DRAIN_S:g} s")
    status, body = setup.admin("POST", "/admin/webhooks",
                               {"url": state.receiver_url, "events": ["*"]})
    if status != 201:
        raise RuntimeError(f"registering the endpoint failed: {status} {body}")
    return str(body["id"])


def prepare(state: Shop, setup: Setup, workload: Workload, args: Any, tag: str) -> Prepared:
    """One run of the pair (``purchase`` too, while the scenario runs): the previous runs'
    orders stored first; for ``purchase-shop`` the dispatcher and the endpoint."""
    wait_stored(state, state.aids)
    endpoint = register(setup, state) if workload.name == SHOP else None
    users = args.users
    aid = setup.gateway_activity(total=users * 10)
    state.aids.append(aid)
    lines = setup.write(tag, setup.purchase_lines(aid, users))
    return Prepared(lines, users, after_run(state, setup, aid, endpoint, cpu_ticks(state)))


def after_run(state: Shop, setup: Setup, aid: str, endpoint: str | None,
              ticks: tuple[float, dict[str, int]]) -> Callable[[Run], None]:
    """What the run left (at its end), then the drain and the checks (see the docstring)."""
    sold_checks = sold_check(setup, setup.gateway_keys, aid)

    def check(run: Run) -> None:
        # from the end of the set-up to here: the settle, wrk's run, a second after it
        run.checks["cores"] = cores(ticks, cpu_ticks(state))
        sold_checks(run)
        now = figures(state, aid, endpoint)
        sold = int(run.checks["sold"])
        not_stored = sold - now["stored"]
        # without an endpoint nothing is owed to anyone: no backlog
        backlog = not_stored + now["not_fanned"] + now["pending"] if endpoint else 0
        run.checks.update(delivered_at_end=now["delivered"], not_stored_at_end=not_stored,
                          not_fanned_at_end=now["not_fanned"], pending_at_end=now["pending"],
                          backlog_at_end=backlog)
        try:
            if endpoint is None:
                wait_stored(state, [aid])
                run.checks.update(figures(state, aid, None))
                return
            started = time.monotonic()

            def done() -> bool:
                got = figures(state, aid, endpoint)
                return (got["stored"] >= sold and got["not_fanned"] == 0
                        and got["pending"] == 0)

            if wait_for(done, DRAIN_S, 0.1) is None:
                run.failed = True
                run.notes.append(f"WRONG: not every event delivered within {DRAIN_S:g} s: "
                                 f"{figures(state, aid, endpoint)}")
            run.checks["drained_s"] = round(time.monotonic() - started, 2)
            final = figures(state, aid, endpoint)
            run.checks.update(final)
            counts = (sold, final["stored"], final["events"], final["delivered"])
            if len(set(counts)) != 1 or final["failed_deliveries"]:
                run.failed = True
                run.notes.append(f"WRONG: sold, stored, events, delivered = {counts}, "
                                 f"{final['failed_deliveries']} failed")
        finally:
            if endpoint is not None:
                stop_dispatcher(state)
                status, body = setup.admin("DELETE", f"/admin/webhooks/{endpoint}")
                if status != 200:
                    raise RuntimeError(f"removing the endpoint failed: {status} {body}")

    return check


def in_order(workloads: list[Workload], round_no: int) -> list[Workload]:
    """The round's order: ``purchase`` and ``purchase-shop`` swap places in even rounds."""
    out = list(workloads)
    names = [w.name for w in out]
    if round_no % 2 or SHOP not in names or BASE not in names:
        return out
    i, j = names.index(BASE), names.index(SHOP)
    out[i], out[j] = out[j], out[i]
    return out


def settings(names: list[str]) -> str:
    """The report's paragraph on the scenario's set-up, empty when it did not run."""
    if not chosen(names):
        return ""
    return ("\n\nThe webhooks' pair (unlike the stack above, with the orders worker): the real "
            "orders worker (`python -m seckill.worker`, the gateway's environment and "
            "SQLite database) runs for the whole run, every workload included (its Redis "
            "commands count in the runs' commands per request), and so does a 204 receiver "
            f"(gunicorn, {RECEIVER_WORKERS} gevent worker). `purchase-shop` runs while one "
            "endpoint (`events: [\"*\"]`, registered through `POST /admin/webhooks` just "
            "before) gets every event from the real dispatcher (`python -m seckill.webhooks`, "
            "default options, started before the run and stopped after it); `purchase` runs "
            "without endpoint or dispatcher. Before each run the worker has stored every "
            "earlier order, and the dispatcher has fanned out the earlier events before the "
            "endpoint exists; the pair's order swaps every round.")


def problems(state: Shop | None) -> dict[str, list[str]]:
    """The worker's and the dispatchers' error lines."""
    if state is None:
        return {}
    return {path.stem: server_problems(path) for path in state.logs}
