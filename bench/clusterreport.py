"""The Markdown report of ``python -m bench.cluster``: the ratio, Redis CPU per purchase on
each master, and the capacity model's arithmetic, from the runs' JSON."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

TARGET = 0.9  # the purchase path on a cluster >= 0.9x one server

Run = dict[str, Any]


def med(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def of(data: dict[str, Any], backend: str) -> list[Run]:
    return [r for r in data["runs"] if r["backend"] == backend]


def ratios(data: dict[str, Any], key: str = "ok_rate") -> list[float]:
    """cluster / single of ``key`` within each round."""
    single = {r["round"]: r[key] for r in of(data, "single")}
    return [r[key] / single[r["round"]] for r in of(data, "cluster") if single.get(r["round"])]


def gateway_ratios(data: dict[str, Any]) -> list[float]:
    """cluster / single of the gateway's purchases per worker CPU-second, within each round."""
    single = {r["round"]: gateway_rate(r) for r in of(data, "single")}
    return [gateway_rate(r) / single[r["round"]] for r in of(data, "cluster")
            if single.get(r["round"])]


def per_node(runs: list[Run], value: Callable[[dict[str, Any]], float]) -> dict[str, float]:
    """Each master's median over ``runs`` of ``value(node record)``."""
    ports = sorted({port for r in runs for port in r["nodes"]})
    return {port: med([value(r["nodes"][port]) for r in runs if port in r["nodes"]])
            for port in ports}


def cpu_us(node: dict[str, Any]) -> float:
    return float(node["cpu_s"]) * 1e6 / max(1, node["purchases"])


def gateway_rate(run: Run) -> float:
    """Purchases per CPU-second of the gateway's gunicorn workers."""
    return float(run["sold"]) / run["gateway_cpu_s"] if run["gateway_cpu_s"] else 0.0


def busy(data: dict[str, Any], backend: str) -> dict[str, float]:
    """Medians over the rounds of a busy node's figures (``bench.saturate``)."""
    runs = [r for r in data.get("busy", []) if r["backend"] == backend]
    keys = ("rate", "cpu_us", "evalsha_us", "sent_us", "on_cpu", "queued", "node_cores",
            "reads_per_purchase")
    return {k: med([float(r[k]) for r in runs]) for k in keys} if runs else {}


def capacity(data: dict[str, Any]) -> dict[str, Any]:
    """The capacity model: per-master purchases/s from its CPU per purchase (a busy master's,
    and, as a floor, a lightly loaded one's), x masters, and the gateway cores (and hosts)
    needed to feed that, from the gateway's per-core rate."""
    runs = of(data, "cluster")
    light = per_node(runs, cpu_us)
    masters = len(light)
    loaded = busy(data, "cluster")
    per_master = 1e6 / loaded["cpu_us"] if loaded.get("cpu_us") else 0.0
    total = masters * per_master
    core_rate = med([gateway_rate(r) for r in runs])
    cores = total / core_rate if core_rate else 0.0
    host = int(data["settings"]["host_cores"])
    return {"light_us": light, "light_total": sum(1e6 / v for v in light.values() if v),
            "masters": masters, "busy": loaded, "per_master": per_master, "total": total,
            "gateway_per_core": core_rate, "cores": cores, "host_cores": host,
            "hosts": cores / host}


def summary(data: dict[str, Any]) -> list[str]:
    out = ["| backend | purchases/s (200s) | req/s | p50 ms | p99 ms | other statuses | "
           "socket errors | gateway purchases per worker CPU-s | others' CPU (cores) | load |",
           "|---|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    for name in ("single", "cluster"):
        runs = of(data, name)
        others, errors = failures(runs)
        out.append(
            f"| {name} | {med([r['ok_rate'] for r in runs]):,.0f} | "
            f"{med([r['rate'] for r in runs]):,.0f} | {med([r['p50_ms'] for r in runs]):.1f} | "
            f"{med([r['p99_ms'] for r in runs]):.1f} | {fmt(others)} | {fmt(errors)} | "
            f"{med([gateway_rate(r) for r in runs]):,.0f} | "
            f"{med([r['foreign_cores'] for r in runs]):.2f} | "
            f"{med([sum(r['load']) / 2 for r in runs]):.2f} |")
    return out


def failures(runs: list[Run]) -> tuple[dict[str, int], dict[str, int]]:
    """The runs' statuses other than 200 and their socket errors, each summed by kind."""
    others: dict[str, int] = {}
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["statuses"].items():
            if k != "200":
                others[k] = others.get(k, 0) + v
        for k, v in r["socket_errors"].items():
            errors[k] = errors.get(k, 0) + v
    return others, errors


def fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())) or "none"


def nodes_table(data: dict[str, Any]) -> list[str]:
    out = ["| backend | master (port) | activities | purchases per run | EVALSHA µs/call "
           "(commandstats) | commandstats µs / purchase (commands clients sent) | "
           "**CPU µs / purchase** (INFO cpu, user+sys) | of which main thread | "
           "round trips / purchase | node CPU during the run (cores) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("single", "cluster"):
        runs = of(data, name)
        columns = [
            per_node(runs, lambda n: n["activities"]),
            per_node(runs, lambda n: n["purchases"]),
            per_node(runs, lambda n: n["evalsha_usec"] / max(1, n["evalsha_calls"])),
            per_node(runs, lambda n: n["sent_usec"] / max(1, n["purchases"])),
            per_node(runs, cpu_us),
            per_node(runs, lambda n: n["cpu_main_s"] * 1e6 / max(1, n["purchases"])),
            per_node(runs, lambda n: n["reads"] / max(1, n["purchases"])),
            per_node(runs, lambda n: n["cpu_s"] / max(1e-9, n["seconds"])),
        ]
        for port in columns[0]:
            a, p, e, s, c, m, rt, load = (col[port] for col in columns)
            out.append(f"| {name} | {port} | {a:.0f} | {p:,.0f} | {e:.1f} | {s:.1f} | "
                       f"**{c:.1f}** | {m:.1f} | {rt:.2f} | {load:.2f} |")
    return out


def busy_table(data: dict[str, Any]) -> list[str]:
    out = ["| node | purchases/s | **CPU µs / purchase** (INFO cpu) | EVALSHA µs/call | "
           "commandstats µs / purchase | its main thread on a CPU | runnable, waiting for a "
           "CPU | round trips / purchase |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label in (("single", "the single server"), ("cluster", "a cluster master")):
        b = busy(data, name)
        if b:
            out.append(f"| {label} | {b['rate']:,.0f} | **{b['cpu_us']:.1f}** | "
                       f"{b['evalsha_us']:.1f} | {b['sent_us']:.1f} | {b['on_cpu']:.0%} | "
                       f"{b['queued']:.0%} | {b['reads_per_purchase']:.2f} |")
    return out


def capacity_text(data: dict[str, Any]) -> list[str]:
    cap = capacity(data)
    b, m = cap["busy"], cap["masters"]
    if not b:
        return ["No busy-node runs (`--saturate 0`): no capacity model."]
    lines = [
        "Assumptions: a master is one event loop (Valkey `io-threads 1`, the default here), "
        "so it decides at most 1 s / (its CPU per purchase) purchases per second, the CPU per "
        "purchase being a busy master's (above: work waiting at every wake-up, one socket "
        "read per purchase as behind many gateways, the AOF written and fsynced once per "
        "wake-up for everything it decided); every master costs the same (same binary, "
        "settings and hardware; one was measured); the activities spread evenly over the "
        "masters (one hot activity is decided by one master: the per-master figure is its "
        "ceiling); the disk syncs faster than the loop fills a batch (with `appendfsync "
        "always` a master whose disk is slower waits for it: the measured rate and the share "
        "of time its loop spent on a CPU say how close this machine came); the gateway's "
        "per-core rate is purchases per CPU-second of the gunicorn workers in the cluster "
        "runs (user + sys, their syscalls included), measured with wrk on the same cores and "
        "without nginx, which costs CPU on the gateway hosts too.",
        "",
        "```",
        f"one master:  1e6 / {b['cpu_us']:.1f} µs per purchase = {cap['per_master']:,.0f} "
        f"purchases/s (measured busy: {b['rate']:,.0f}/s with its loop on a CPU "
        f"{b['on_cpu']:.0%} of the time and waiting for one {b['queued']:.0%})",
        f"cluster:     {m} masters x {cap['per_master']:,.0f} = {cap['total']:,.0f} purchases/s",
        f"gateway:     {cap['gateway_per_core']:,.0f} purchases per worker core-second "
        "(median of the cluster runs)",
        f"to feed it:  {cap['total']:,.0f} / {cap['gateway_per_core']:,.0f} = "
        f"{cap['cores']:.1f} gateway cores = {cap['hosts']:.1f} hosts of {cap['host_cores']} "
        "cores",
        "floor (each master's CPU per purchase in the HTTP runs, lightly loaded, one purchase "
        "per wake-up): " + " + ".join(f"1e6 / {v:.0f}" for v in cap["light_us"].values())
        + f" = {cap['light_total']:,.0f} purchases/s",
        "```",
    ]
    return lines


def header(title: str, data: dict[str, Any], machine_extra: str = "") -> list[str]:
    """A report's title, the command that wrote it, the code and the machine."""
    return [
        f"# {title}",
        "",
        f"Command: `{data['command']}` (from the repository root; started {data['started']}, "
        f"took {data['elapsed_s'] / 60:.1f} min)",
        "",
        *([f"Note: {data['note']}", ""] if data.get("note") else []),
        f"Code: {data['code']}",
        "",
        f"Machine: {data['machine']}{machine_extra}.",
        "",
    ]


def render(data: dict[str, Any]) -> str:
    s = data["settings"]
    found = ratios(data)
    ratio = med(found)
    idle = data["idle_cpu_ms_per_s"]
    lines = [
        *header("Redis Cluster vs one server: the purchase path, Redis CPU per purchase, "
                "capacity", data, f"; `wrk` {data['wrk']}; Valkey {data['valkey']}"),
        f"Setup: one embedded Valkey, and an embedded Valkey Cluster of 3 masters with "
        f"{s['replicas']} replica(s) each (`seckill.ops.stack.cluster.EmbeddedCluster`); both with "
        f"AOF on, `appendfsync {s['appendfsync']}`. A gateway on each: `wsgi:app` under "
        f"gunicorn `-c gunicorn.conf.py`, {s['workers']} gevent workers, worker_connections "
        f"{s['worker_connections']}, production mode, durability `local` (WAITAOF 1 0 in the "
        "purchase's one send, to the master that ran the script), the default per-user rate "
        "limit, `SECKILL_REDIS_CLUSTER=off` / `on`; no nginx, no orders worker. Everything on "
        "127.0.0.1; "
        + (f"pinned (`--pin`): {data['pinned']}." if data.get("pinned") else
           "wrk on the same 2 cores as the gateways and every Valkey node (not pinned)."),
        "",
        f"Runs: `wrk -t {s['threads']} -c {s['connections']} -d {s['duration']}s --timeout "
        f"{s['timeout']:g}s`, purchases in stock, up to {s['users']:,} distinct users per run, "
        f"spread round-robin over {s['per_master'] * 3} new activities per run "
        f"({s['per_master']} on each master of the cluster; the single server gets as many, "
        f"chosen the same way). {s['rounds']} rounds after a {s['warmup']:g} s warm-up per "
        "side; the order swaps every round (single then cluster, cluster then single, ...), "
        "the ratio is taken within a round, then the median.",
        "",
        "## Purchases per second (medians of the rounds)",
        "",
        *summary(data),
        "",
        f"**cluster / single: {ratio:.2f}x** (per round: "
        f"{', '.join(f'{v:.2f}' for v in found)}; purchases answered 200 per second); the "
        f"issue's target ≥ {TARGET}x is **{'met' if ratio >= TARGET else 'not met'}**. On "
        "total answers per second: "
        f"{med(ratios(data, 'rate')):.2f}x. The gateway's own cost: purchases per CPU-second "
        f"of its workers, cluster / single, {med(gateway_ratios(data)):.2f}x (per round: "
        f"{', '.join(f'{v:.2f}' for v in gateway_ratios(data))}), i.e. "
        f"{1e6 / max(1.0, med([gateway_rate(r) for r in of(data, 'single')])):.0f} µs of "
        "worker CPU per purchase on one server and "
        f"{1e6 / max(1.0, med([gateway_rate(r) for r in of(data, 'cluster')])):.0f} µs on the "
        "cluster.",
        "",
        "## Redis CPU per purchase, per master (medians of the rounds)",
        "",
        "EVALSHA µs/call is `INFO commandstats`' usec_per_call of EVALSHA (the script, including "
        "the commands it runs). commandstats µs / purchase sums the usec of every command "
        "clients sent (EVALSHA, WAITAOF, the background threads' reads; the script's own "
        "HMGET/HGET/HSET/... are left out, being inside EVALSHA's time) over the run, divided "
        "by the purchases that master decided (units sold in its activities). CPU µs / purchase "
        "is the growth of INFO cpu `used_cpu_user + used_cpu_sys` (the process, and its main "
        "thread) over the run, per purchase: command execution plus socket reads and writes, "
        "the AOF write and fsync, and the idle cron.",
        "",
        *nodes_table(data),
        "",
        "Idle CPU with no traffic (ms of CPU per second, the cron and, on the cluster, the bus's "
        "pings): " + "; ".join(f"{name}: " + ", ".join(f"{port} {v:.1f}" for port, v in
                                                      idle[name].items()) for name in idle)
        + ". Included in the per-purchase figures above (it is small beside them).",
        "",
        "## A node kept busy (`bench.saturate`, medians of the rounds)",
        "",
        f"The gateway's exact purchase commands (EVALSHA of `lua/purchase.lua` with the "
        "per-user rate counters, then WAITAOF 1 0), pre-encoded, sent straight to one node "
        f"(the single server; the cluster's first master, to its own slot) over "
        f"{s['saturate_connections']} connections with one purchase in flight on each, "
        f"{s['saturate']:,} purchases per run, every reply checked; the two alternate, "
        "order swapped each round. Through HTTP this machine cannot keep a node busy (its 2 "
        "cores run the gateways and wrk too): there each purchase arrives alone and pays for "
        "its own wake-up, reply and fsync. The scheduler's view of the node's main thread "
        "(`/proc/<pid>/schedstat`) says where its time went: on a CPU, runnable but waiting "
        "for one (the machine is shared), or neither (blocked: in fsync; no idle wait, as "
        "work is always queued).",
        "",
        *busy_table(data),
        "",
        "## Capacity model",
        "",
        *capacity_text(data),
        "",
        "## Every run",
        "",
        "| backend | round | purchases/s | req/s | p50 ms | p99 ms | statuses | sold | gateway "
        "CPU s | purchases / worker CPU-s | Redis CPU µs / purchase per master | others' CPU "
        "| load before → after | notes |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---|---|",
    ]
    for r in data["runs"]:
        lines.append(
            f"| {r['backend']} | {r['round']} | {r['ok_rate']:,.0f} | {r['rate']:,.0f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {fmt(r['statuses'])} | {r['sold']:,} | "
            f"{r['gateway_cpu_s']:.1f} | {gateway_rate(r):,.0f} | "
            + ", ".join(f"{cpu_us(n):.0f}" for n in r["nodes"].values())
            + f" | {r['foreign_cores']:.2f} | {r['load'][0]:.2f} → {r['load'][1]:.2f} | "
            f"{'; '.join(r['notes'])} |")
    lines += ["", "## Gateway logs", ""]
    for name, problems in data["problems"].items():
        lines.append(f"* {name}: {len(problems)} error lines (tracebacks, worker timeouts)")
        lines += [f"      {line[:200]}" for line in problems[:5]]
    return "\n".join(lines) + "\n"
