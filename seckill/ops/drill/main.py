"""``seckill drill``: a sale-day fire drill. A crowd of distinct buyers through the real stack
while it is paused, resumed, has one child of each kind killed with SIGKILL and is stopped and
started again (the classic faults), and/or while its parts hang, its disk fills and its shop's
receiver misbehaves (the gray ones, :mod:`seckill.ops.drill.gray`); then the purchase
invariants (:mod:`seckill.ops.drill.checks`). Exit 1 when one fails.

Two modes: by default it starts its own ``seckill up`` in a temporary folder
(:mod:`seckill.ops.drill.stack`); with ``--target URL --admin-url URL`` it runs only the crowd
and the invariants, no fault, against a deployment the operator runs, on one throw-away
activity it creates (a rehearsal) and ends. docs/drill.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from seckill.config import ConfigError, operator_secrets, own_redis_url
from seckill.ops.cli.store import Failure
from seckill.ops.drill import gray
from seckill.ops.drill.checks import (
    Evidence,
    Invariant,
    StoredRow,
    check,
    failed,
    none_is_final,
)
from seckill.ops.drill.crowd import Client, Crowd, Record, resolve_unknown
from seckill.ops.drill.database import decision_times, stored_in_database, variant_books
from seckill.ops.drill.dbfaults import Proxy, Schema
from seckill.ops.drill.faults import Canary, Faults, Operator
from seckill.ops.drill.plan import plan_activities, plan_buyers
from seckill.ops.drill.report import Fault, Stopwatch, markdown, text, write
from seckill.ops.drill.stack import PERSON_CLAIM, DrillStack, StackError, seckill_command
from seckill.ops.drill.webhooks import Receiver, check_events
from seckill.ops.stack.ports import free_listen_port

# The faults by the names --faults takes, in the order they run; "restart" last of all.
CLASSIC = ("pause", "kill-valkey", "kill-gunicorn", "kill-worker", "kill-webhooks",
           "kill-nginx", "restart")
GRAY = ("freeze-valkey", "freeze-instance", "webhook-receiver", "disk-full", "database-stop",
        "database-hang")
SETS = {"classic": CLASSIC, "gray": GRAY, "all": CLASSIC[:-1] + GRAY + CLASSIC[-1:]}
# A classic step's --faults name, by the first words of its step name.
CLASSIC_STEPS = {"pause": "pause", "resume": "pause", "kill -9 valkey": "kill-valkey",
                 "kill -9 gunicorn": "kill-gunicorn", "kill -9 orders worker": "kill-worker",
                 "kill -9 webhooks dispatcher": "kill-webhooks", "kill -9 nginx": "kill-nginx",
                 "stop and start": "restart"}


def selected_faults(text: str) -> list[str]:
    """``--faults``: a set's name or a comma list of fault names (and sets), in run order;
    ConfigError for an unknown one."""
    wanted: set[str] = set()
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word in SETS:
            wanted.update(SETS[word])
        elif word in SETS["all"]:
            wanted.add(word)
        else:
            raise ConfigError(f"--faults: unknown {word!r}; known: "
                              + ", ".join([*SETS, *SETS["all"]]))
    return [name for name in SETS["all"] if name in wanted]


def describe(body: dict[str, Any]) -> str:
    """An activity in a few words, for the report's facts."""
    shape = [f"total {body['total']}"] if "total" in body else [
        "variants " + "/".join(f"{v['id']}:{v['total']}" for v in body["variants"])]
    if "payment_window" in body:
        shape.append(f"payment window {body['payment_window']} s")
    if body.get("limit_by") == "person":
        shape.append(f"limit by person, {body.get('per_user_limit', 1)} units each")
    return f"{body['id']} ({', '.join(shape)})"


def _create(operator: Operator, body: dict[str, Any]) -> None:
    status, answer, _ = operator.insist("POST", "/admin/activities", body)
    if status != 201:
        raise StackError(f"creating the drill's activity {body['id']} answered {status}: "
                         f"{json.dumps(answer)[:300]}")


def _stored_by_status(base: str, jwt_secret: str, records: list[Record]
                      ) -> dict[str, list[StoredRow]]:
    """Against a deployment: each winner's order status (``confirmed`` once stored)."""
    from edge.identity import mint_user_token

    found: dict[str, list[StoredRow]] = {}
    client = Client(base)
    try:
        for r in records:
            if r.endpoint != "buy" or r.status != 200:
                continue
            token = mint_user_token(r.uid, jwt_secret, 600)
            status, body, _ = client.call("GET", f"/seckill/{r.aid}/order", token)
            if status == 200 and body.get("status") in ("confirmed", "cancelled"):
                found.setdefault(r.aid, []).append(
                    StoredRow(str(body.get("order_id")), r.aid, r.uid, str(body["status"])))
    finally:
        client.close()
    return found


def _differences(differences: dict[str, Any]) -> str:
    """A reconcile's differences in one line: each counter's two values, each list's size
    and first entry."""
    parts = []
    for key, value in differences.items():
        if isinstance(value, dict) and "count" in value:
            first = next((v for v in value.values() if isinstance(v, list) and v), [None])[0]
            parts.append(f"{key}: {value['count']}, e.g. {json.dumps(first)}")
        else:
            parts.append(f"{key}: {json.dumps(value)}")
    return "; ".join(parts)


# How long a difference may last: an update (a hold's expiry, a payment) read before its order
# waits for that order, which a worker killed -9 holds until the next worker reclaims it
# (SECKILL_WORKER_CLAIM_IDLE_MS, 30 s), and reconcile counts it half-way meanwhile. A difference
# still there after this is a failure.
RECONCILE_SETTLE_S = 75.0


def reconcile_all(aids: list[str], env: dict[str, str] | None = None,
                  settle_s: float = RECONCILE_SETTLE_S) -> dict[str, tuple[bool, str]]:
    """``seckill reconcile <aid>`` (read-only) for each activity, in ``env`` (None: this
    process's environment), asked again every 2 s until clean or ``settle_s`` have passed:
    clean, or what it said last."""
    found = {}
    deadline = time.monotonic() + settle_s
    for aid in aids:
        while True:
            done = subprocess.run([*seckill_command(), "reconcile", aid], env=env,
                                  capture_output=True, text=True, timeout=120)
            try:
                report = json.loads(done.stdout)
                clean = done.returncode == 0 and not report.get("differences")
                said = _differences(report.get("differences") or {})
            except ValueError:
                clean, said = False, " ".join((done.stdout + done.stderr).split())[-400:]
            if clean or time.monotonic() > deadline:
                break
            time.sleep(2)
        found[aid] = (clean, said)
    return found


def _wait_until(started: float, at: float) -> None:
    """The crowd's schedule: the next step is due at ``at`` seconds."""
    delay = at - (time.monotonic() - started)
    if delay > 0:
        time.sleep(delay)


def _finish(args: argparse.Namespace, report_dir: Path, title: str, facts: list[str],
            faults: list[Fault], crowd: Crowd, invariants: list[Invariant],
            resolved: dict[tuple[str, str], dict[str, Any]], clock: Stopwatch | None = None
            ) -> int:
    body = markdown(title, facts, faults, crowd.records, invariants, resolved, clock=clock)
    path = write(report_dir, body, faults, crowd.records)
    print(text(faults, crowd.records, invariants, resolved, clock), flush=True)
    verdict = "an invariant FAILED" if failed(invariants) else "every invariant held"
    print(f"seckill drill: {verdict}; report: {path}", flush=True)
    return 1 if failed(invariants) else 0


def _shop(operator: Operator) -> Receiver:
    """The shop's receiver, started and registered for every event type."""
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    receiver = Receiver(secret).start()
    status, answer, _ = operator.insist(
        "POST", "/admin/webhooks", {"url": receiver.url, "events": ["*"], "secret": secret})
    if status != 201:
        receiver.stop()
        raise StackError(f"registering the shop's webhook endpoint answered {status}: {answer}")
    return receiver


def _steps(faults_run: Faults, gray_run: gray.GrayFaults, chosen: list[str]
           ) -> list[tuple[float, str, Callable[[Fault], None]]]:
    """The chosen steps with the moment each is due (a fraction of the crowd's duration):
    the classic ones alone at their usual moments, else spread evenly."""
    classic = [(at, name, step) for at, name, step in faults_run.plan()
               if CLASSIC_STEPS[name] in chosen]
    if not any(name in GRAY for name in chosen):
        return classic
    by_name = {key: (name, step) for key, name, step in gray_run.plan()}
    ordered = [(name, step) for _, name, step in classic if name != "stop and start"]
    ordered += [by_name[key] for key in GRAY if key in chosen]
    ordered += [(name, step) for _, name, step in classic if name == "stop and start"]
    return [(0.05 + 0.8 * n / max(1, len(ordered)), name, step)
            for n, (name, step) in enumerate(ordered)]


def run_embedded(args: argparse.Namespace) -> int:
    """The full drill on a stack of its own."""
    chosen = selected_faults(args.faults)
    clock = Stopwatch()
    receiver: Receiver | None = None
    proxy: Proxy | None = None
    schema: Schema | None = None
    folder = Path(tempfile.mkdtemp(prefix="seckill-drill-"))
    report_dir = Path(args.report).resolve() if args.report else folder / "report"
    run = datetime.now(UTC).strftime("%H%M%S")
    database_url = ""
    stack_database: str | None = None
    if args.database:
        schema = Schema(args.database, run)
        schema.create()
        proxy = Proxy(free_listen_port(), *schema.server())
        stack_database, database_url = schema.through(proxy.port), schema.direct()
    stack = DrillStack(folder, args.redis_nodes, args.replicas, stack_database)
    database_url = database_url or f"sqlite:///{stack.sqlite_path}"
    disk_reason = stack.mount_small_disk() if "disk-full" in chosen else ""
    print(f"seckill drill: starting `{' '.join(stack.argv()[2:])}` in {folder}; faults: "
          f"{', '.join(chosen) or 'none'}", flush=True)
    code = 1
    try:
        took = stack.start()
        operator = Operator(stack.admin_base, stack.admin_token)
        receiver = _shop(operator)
        activities = plan_activities(run, args.users, args.duration, target=False)
        for body in activities:
            _create(operator, body)
        aids = [str(a["id"]) for a in activities]
        clock.lap("set-up (the stack's start, the activities, the shop's receiver)")
        phase = ["calm"]
        started = time.monotonic()
        crowd = Crowd(stack.base, stack.admin_base, stack.jwt_secret, stack.admin_token,
                      plan_buyers(run, args.users, activities), args.duration,
                      lambda: phase[0], started, person_claim=PERSON_CLAIM)
        asker = crowd.ask_early()
        faults_run = Faults(stack, operator, Canary(stack.base, stack.jwt_secret, aids[0]),
                            aids[0], aids, crowd)
        gray_run = gray.GrayFaults(stack, operator, crowd, aids[0], receiver, proxy,
                                   disk_reason, faults_run.healthy)
        timeline = [Fault("calm", 0.0)]
        crowd.start()
        gap = max(1.0, 0.04 * args.duration)  # each step's window long enough to be seen
        for fraction, name, step in _steps(faults_run, gray_run, chosen):
            _wait_until(started, max(fraction * args.duration + crowd.shift,
                                     time.monotonic() - started + (gap if timeline[1:] else 0)))
            fault = Fault(name, round(time.monotonic() - started, 2))
            timeline.append(fault)
            phase[0] = name
            print(f"seckill drill: {fault.at:6.1f}s {name}", flush=True)
            step(fault)
            phase[0] = fault.name
        last = Fault("after the faults", round(time.monotonic() - started, 2))
        timeline.append(last)
        phase[0] = last.name
        faults_done = time.monotonic() - started
        crowd.join(args.duration + 120)
        crowd_took = time.monotonic() - started
        clock.lap(_crowd_lap(args.duration, crowd.shift, faults_done, crowd_took))
        asker.stop()
        resolved = resolve_unknown(stack.base, stack.jwt_secret, crowd.records, crowd.now,
                                   crowd.tokens)
        clock.lap("unknown outcomes asked again")
        stats = operator.drained(aids)
        clock.lap("the orders worker's drain")
        env = {**stack.env(), "SECKILL_DATA_DIR": str(stack.data)}
        bodies = {str(a["id"]): a for a in activities}
        stored = stored_in_database(database_url, aids)
        evidence = Evidence(crowd.records, stats, stored, resolved, reconcile_all(aids, env),
                            faults_run.snapshots, activities=bodies)
        clock.lap("reconcile")
        evidence.variant_books = variant_books(operator, database_url, bodies)
        invariants = check(evidence)
        invariants.append(none_is_final(asker.early, resolved, stored))
        invariants += _gray_invariants(gray_run, crowd.records, stack, database_url, aids[0],
                                       stored) if any(n in GRAY for n in chosen) else []
        clock.lap("variant books and the gray faults' readings")
        invariants.append(check_events(database_url, aids, receiver))
        clock.lap("the shop's events (the dispatcher's backlog)")
        facts = [f"`seckill drill {' '.join(sys.argv[2:])}`".replace("  ", " "),
                 f"stack: {stack.shape()}; first start took {took:.1f} s; "
                 f"SECKILL_PERSON_CLAIM={PERSON_CLAIM}",
                 f"faults: {', '.join(chosen) or 'none'}",
                 f"{args.users} distinct buyers over {args.duration:.0f} s; activities: "
                 + ", ".join(describe(a) for a in activities),
                 f"{len(crowd.records)} requests recorded (every one in requests.csv)"]
        code = _finish(args, report_dir, "Sale-day drill", facts, timeline, crowd, invariants,
                       resolved, clock)
    except StackError as exc:
        print(f"seckill drill: the drill could not run: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        if receiver is not None:
            receiver.stop()
        stop_code, _ = stack.stop()
        if stop_code not in (0, None):
            print(f"seckill drill: `seckill up` exited {stop_code} on the final stop",
                  file=sys.stderr)
        stack.unmount(keep=not (code == 0 and args.report))
        if proxy is not None:
            proxy.close()
        if schema is not None:
            schema.drop()
        if code == 0 and args.report:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"seckill drill: the stack's folder (data, logs) is kept: {folder}", flush=True)
    return code


def _crowd_lap(duration: float, shift: float, faults_done: float, took: float) -> str:
    """Why the crowd took longer than ``--duration``."""
    why = [f"--duration {duration:.0f} s"]
    if shift >= 0.5:
        why.append(f"{shift:.1f} s with no new buyer while the site was down")
    if faults_done > duration + shift + 0.5:
        why.append(f"the faults and their recoveries ran until {faults_done:.1f} s")
    rest = took - max(duration + shift, faults_done)
    if rest >= 0.5:
        why.append(f"{rest:.1f} s for the last buyers in flight (a request may wait up to "
                   "15 s, longer than nginx's read timeout)")
    return "the crowd: " + "; ".join(why)


def _gray_invariants(gray_run: gray.GrayFaults, records: list[Record], stack: DrillStack,
                     database_url: str, aid: str, stored: dict[str, list[StoredRow]]
                     ) -> list[Invariant]:
    """The gray faults' invariants, after what the database and the sale say once back."""
    windows = gray_run.windows
    hang = next((w for w in windows if w.kind == "database-hang" and not w.not_run), None)
    settled: dict[str, Any] = {}
    decided: dict[str, int] = {}
    if hang is not None:
        end = next((lv for lv in gray_run.levers if lv.what == "end"), None)
        settled = gray.settled_state(database_url, stack.base, aid,
                                     gray.epoch_ms(end.body.get("ends_at")) if end else None)
        decided = decision_times(database_url, aid)
    return [gray.followed_new_master(windows, records, aid),
            gray.gets_moved_away(windows, records),
            gray.disk_full_refuses(windows, records),
            gray.database_bounded(windows, gray_run.probes, records),
            gray.levers_hold(windows, gray_run.levers, settled, stored.get(aid), decided)]


def run_target(args: argparse.Namespace) -> int:
    """Only the crowd and the invariants, against a running deployment, on a rehearsal."""
    jwt_secret, admin_token = operator_secrets()
    if not jwt_secret or not admin_token:
        raise ConfigError("--target needs the deployment's SECKILL_JWT_SECRET and "
                          "SECKILL_ADMIN_TOKEN in the environment")
    if not args.admin_url:
        raise ConfigError("--target goes with --admin-url (the operator listener)")
    base, admin_base = args.target.rstrip("/"), args.admin_url.rstrip("/")
    run = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    report_dir = Path(args.report or f"seckill-drill-{run}").resolve()
    operator = Operator(admin_base, admin_token)
    activity = plan_activities(run, args.users, args.duration, target=True)[0]
    aid = str(activity["id"])
    status, answer, _ = operator.insist("POST", "/admin/activities", activity)
    if status != 201:
        operator.close()
        unknown = "rehearsal" in (answer.get("fields") or [])
        raise Failure(
            "this deployment does not know the activity field `rehearsal` (it would count the "
            "drill's activity in its stats): nothing was created" if unknown else
            f"creating the rehearsal activity {aid} answered {status}: "
            f"{json.dumps(answer)[:300]}")
    print(f"seckill drill: rehearsal activity {aid} created on {admin_base}", flush=True)
    try:
        started = time.monotonic()
        crowd = Crowd(base, admin_base, jwt_secret, admin_token,
                      plan_buyers(run, args.users, [activity]), args.duration,
                      lambda: "crowd", started)
        crowd.start()
        crowd.join(args.duration + 120)
        resolved = resolve_unknown(base, jwt_secret, crowd.records, crowd.now)
        stats = operator.drained([aid])
        # The child `seckill reconcile` inherits this environment (its REDIS_URL).
        reconciled = reconcile_all([aid]) if own_redis_url() else None
        evidence = Evidence(crowd.records, stats, _stored_by_status(base, jwt_secret,
                                                                    crowd.records),
                            resolved, reconciled, stored_from="the order status (stored)",
                            activities={aid: activity})
        invariants = check(evidence)
    finally:
        status, _, _ = operator.insist("POST", f"/admin/activities/{aid}/end")
        print(f"seckill drill: rehearsal activity {aid} ended ({status})", flush=True)
        operator.close()
    facts = [f"target {base} (operator {admin_base}); rehearsal activity {aid}, total "
             f"{activity['total']}, ended afterwards",
             f"{args.users} distinct buyers over {args.duration:.0f} s; no fault",
             f"{len(crowd.records)} requests recorded (every one in requests.csv)"]
    return _finish(args, report_dir, "Sale-day drill against a deployment", facts,
                   [Fault("crowd (no faults)", 0.0)], crowd, invariants, resolved)


def run(args: argparse.Namespace) -> int:
    """``seckill drill``: the exit code (1 when an invariant failed)."""
    if args.users < 1 or args.duration <= 0:
        raise ConfigError("--users and --duration must be positive")
    faults = getattr(args, "faults", "classic")
    args.faults = faults
    args.database = getattr(args, "database", None)
    selected_faults(faults)  # an unknown name is a bad option, before anything starts
    if args.target:
        if args.database or faults != "classic":
            raise ConfigError("--target runs no fault and uses the deployment's database")
        if args.redis_nodes is not None or args.replicas is not None:
            raise ConfigError("--target runs against a deployment: no --redis-nodes/--replicas")
        return run_target(args)
    if args.redis_nodes is not None and args.redis_nodes < 3:
        raise ConfigError("--redis-nodes must be at least 3")
    if args.replicas is not None and args.redis_nodes is None:
        raise ConfigError("--replicas goes with --redis-nodes N")
    return run_embedded(args)
