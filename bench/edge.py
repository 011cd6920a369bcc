"""``python -m bench run --scenario edge``: the crowd's refusals at nginx's price.

One gateway (the harness's gunicorn, ``--workers`` gevent workers) behind two real nginx
fronts, both rendered by ``seckill.ops.stack.nginx`` with per-IP limits off:

* ``nginx``: today's config, whose edge cache (zone ``edge``) repeats the activity-level
  refusals the gateway marks with ``X-Accel-Expires`` for the rest of their second;
* ``nginx-off``: ``NginxOptions.edge_cache=False``, every request reaches the gateway (as
  before the issue).

The workloads (``bench.workloads``: ``*-nginx`` and ``*-nginx-off``) are set up here: a sold-out,
an ended or a paused activity whose state every gateway worker already answers with (polled
until steady, so that a worker's one-second-old copy of the activity cannot hand out URLs in
the first second of a flood), request files of distinct users, and after each run the checks
of the answers nginx repeated (``X-Cache: HIT``, counted by the wrk script): some for every
cached refusal, none for a purchase or on the uncached front. The report's section and the
targets are ``bench.edgereport``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import workloads
from bench.stack import JWT_SECRET, Server, Stack
from bench.workloads import WORKLOADS, Prepared, Run, Setup, Workload
from edge.identity import mint_user_token
from tests.support.servers import nginx_server

FRONTS = {"nginx": True, "nginx-off": False}  # server name: edge cache on
# The refusals nginx must repeat (an X-Cache: HIT in every run), and the purchase workloads
# whose answers it must never repeat (no HIT at all).
CACHED = ("url-sold-out-nginx", "url-ended-nginx", "url-paused-nginx", "buy-ended-nginx",
          "buy-paused-nginx")
NEVER_CACHED = ("buy-sold-out-nginx", "purchase-nginx", "open-sale-nginx")
ERRORS = {"sold-out": "sold_out", "ended": "ended", "paused": "paused"}
# How long every answer must already be the new state before a flood starts: a worker's copy of
# an activity is reloaded every SECKILL_META_TTL (1 s by default), so 1.5 s of agreement
# means every worker has reloaded since the change. The deadline bounds a state that never
# shows.
STEADY_S = 1.5
STEADY_DEADLINE_S = 20.0


def used(names: list[str]) -> list[str]:
    """The fronts the named workloads run against."""
    return [front for front in FRONTS if any(WORKLOADS[n].server == front for n in names)]


@contextlib.contextmanager
def fronts(stack: Stack, folder: Path, names: list[str]) -> Iterator[list[str]]:
    """The nginx fronts ``names`` need, in front of the stack's gateway, registered in
    ``stack.servers`` (so ``stack.base(front)`` is its public listener) until the block ends."""
    with contextlib.ExitStack() as stop:
        for name in used(names):
            front = stop.enter_context(nginx_server(
                [stack.base("gateway").removeprefix("http://")], folder / name, ip_rate="off",
                edge_cache=FRONTS[name]))
            stack.servers[name] = Server(name, front.base, front.process,
                                         front.run_dir / "error.log")
        yield used(names)


def settings(names: list[str]) -> str:
    """The report's sentence on the fronts, empty when none ran."""
    if not used(names):
        return ""
    return (
        "\n\nThe edge's fronts: two real nginx (the config `seckill nginx render` writes, "
        "`worker_processes auto`, per-IP limits off) in front of the same gateway: `nginx` "
        "with the edge cache of activity-level refusals, `nginx-off` rendered with "
        "`edge_cache=False` (every request reaches the gateway, as before the issue). Each "
        "pair of a workload through both fronts runs back to back, its order swapped every "
        "other round. Before a refusal flood every gateway worker answers the activity's new "
        f"state ({STEADY_S:g} s of agreeing answers, asked of the gateway directly).")


def in_order(chosen: list[Workload], round_no: int) -> list[Workload]:
    """The round's order: the harness's, but each ``X`` / ``X-off`` pair swapped in even
    rounds, so neither front always runs first (Redis and its AOF only grow in a run)."""
    out = list(chosen)
    if round_no % 2:
        return out
    for i in range(len(out) - 1):
        if out[i + 1].name == f"{out[i].name}-off":
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def kind(workload: Workload) -> str:
    """``url-sold-out``, ``buy-ended``, ``purchase``, ``open-sale``, ...: the workload without
    its front."""
    return workload.name.removesuffix("-off").removesuffix("-nginx")


def prepare(setup: Setup, workload: Workload, args: Any, tag: str) -> Prepared:
    """The activity and request file of one run through a front, and the checks after it."""
    what = kind(workload)
    if what in ("purchase", "open-sale", "buy-sold-out"):
        # The harness's own set-up and checks (winners = units, every 200 a sale, ...).
        plain = "sold-out" if what == "buy-sold-out" else what
        prepared = workloads.prepare(setup, WORKLOADS[plain], args, tag)
    else:
        prepared = refusals(setup, what, args, tag)
    return Prepared(prepared.requests_file, prepared.lines,
                    with_cache_check(prepared.after, workload))


def refusals(setup: Setup, what: str, args: Any, tag: str) -> Prepared:
    """A flood on an activity in state ``what`` (``url-ended``, ``buy-paused``, ...)."""
    route, state = what.split("-", 1)
    sold_out = state == "sold-out"
    units = args.soldout_units if sold_out else args.users * 10
    aid = setup.gateway_activity(total=units)
    if sold_out:
        setup.sell_out(aid, units)
    else:
        lever = "end" if state == "ended" else "pause"
        status, body = setup.admin("POST", f"/admin/activities/{aid}/{lever}")
        if status != 200:
            raise RuntimeError(f"{lever} {aid}: {status} {body}")
    steady(setup, aid, route, ERRORS[state])
    if route == "url":
        jwts = setup.jwts(args.users)
        lines = [f"/seckill/url?activity={aid}\t{jwt}" for jwt in jwts]
    else:
        lines = setup.purchase_lines(aid, args.users)
    expected_sold = units if sold_out else 0

    def nothing_sold(run: Run) -> None:
        time.sleep(0.5)  # answers wrk stopped waiting for
        meta = setup.meta(setup.gateway_keys, aid)
        run.checks.update(units=units, sold=meta.get("sold", 0), buyers=meta["buyers"])
        if meta.get("sold", 0) != expected_sold or meta["buyers"] != expected_sold:
            run.failed = True
            run.notes.append(f"WRONG: {state} activity, {expected_sold} sold before the run, "
                             f"now {meta.get('sold')} sold to {meta['buyers']} buyers")

    return Prepared(setup.write(tag, lines), len(lines), nothing_sold)


def steady(setup: Setup, aid: str, route: str, error: str) -> None:
    """Ask the gateway directly (a new user each time, so no per-user limit) until its
    answers on ``route`` have said ``error`` for STEADY_S without a break."""
    base = setup.stack.base("gateway")
    since: float | None = None
    deadline = time.monotonic() + STEADY_DEADLINE_S
    n = 0
    while True:
        n += 1
        uid = f"steady-{aid}-{n}"
        headers = {"Authorization": f"Bearer {mint_user_token(uid, JWT_SECRET, ttl=600)}"}
        if route == "url":
            status, body = setup.call(base, "GET", f"/seckill/url?activity={aid}", None,
                                      headers)
        else:
            token, _ = setup.signer.sign(aid, uid)
            status, body = setup.call(base, "POST", f"/seckill/{aid}/{token}/buy", None,
                                      headers)
        now = time.monotonic()
        if body.get("error") != error:
            since = None
        elif since is None:
            since = now
        elif now - since >= STEADY_S:
            return
        if now > deadline:
            raise RuntimeError(f"{route} of {aid} never said {error!r} for {STEADY_S} s; "
                               f"last: {status} {body}")
        time.sleep(0.02)  # a poll, not a wait for a guessed time: the loop checks the answer


def with_cache_check(after: Callable[[Run], None], workload: Workload
                     ) -> Callable[[Run], None]:
    """``after``, then what nginx repeated: a cached refusal must have been repeated (else
    the run measured the gateway, not nginx), a purchase never, the uncached front never."""

    def check(run: Run) -> None:
        after(run)
        hits = run.result.cache.get("HIT", 0)
        run.checks.update(cache=dict(run.result.cache), nginx_hits=hits)
        if workload.server == "nginx-off" and run.result.cache:
            run.failed = True
            run.notes.append(f"WRONG: the uncached front said X-Cache: {run.result.cache}")
        elif workload.name in CACHED and run.result.requests and not hits:
            run.failed = True
            run.notes.append("WRONG: nginx repeated none of these refusals from its cache")
        elif workload.name in NEVER_CACHED and hits:
            run.failed = True
            run.notes.append(f"WRONG: nginx repeated {hits} purchase answers from its cache")

    return check


def problems(stack: Stack, names: list[str]) -> dict[str, list[str]]:
    """Each front's error-log lines of level error or worse (the log keeps warn and up)."""
    levels = ("[error]", "[crit]", "[alert]", "[emerg]")
    out = {}
    for name in used(names):
        log = stack.servers[name].log_file
        try:
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = [f"{log} could not be read"]
        out[name] = [line for line in lines if any(level in line for level in levels)]
    return out
