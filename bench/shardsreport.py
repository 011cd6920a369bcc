"""The Markdown report of ``python -m bench.shards``: the ratio sharded/unsharded per round,
where the hot item's calls landed on the masters, and the capacity note, from the runs' JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.clusterreport import busy, failures, fmt, header, med

RATIO_TARGET = 0.9  # a sharded hot item >= 0.9x an unsharded one, in stock
SPLIT_TARGET = 20.0  # each master's share of the calls within ±20 % of the mean
KINDS = ("unsharded", "sharded")

Run = dict[str, Any]

__all__ = ["busy_master", "fmt", "render"]


def of(data: dict[str, Any], kind: str) -> list[Run]:
    return [r for r in data["runs"] if r["kind"] == kind]


def ratios(data: dict[str, Any], key: str = "ok_rate") -> list[float]:
    """sharded / unsharded of ``key`` within each round."""
    base = {r["round"]: r[key] for r in of(data, "unsharded")}
    return [r[key] / base[r["round"]] for r in of(data, "sharded") if base.get(r["round"])]


def per_call(node: dict[str, Any], key: str) -> float:
    """µs per EVALSHA call of a master in a run: ``cpu_s`` (INFO cpu) or ``evalsha_usec``."""
    calls = max(1, node["evalsha_calls"])
    return node["cpu_s"] * 1e6 / calls if key == "cpu_s" else node[key] / calls


def load(node: dict[str, Any]) -> float:
    """A master's CPU during a run, in cores."""
    return float(node["cpu_s"]) / max(1e-9, node["seconds"])


def hot_master(run: Run) -> str:
    """The master that took most of a run's calls (an unsharded run's: all of them)."""
    return max(run["nodes"], key=lambda port: run["nodes"][port]["evalsha_calls"])


def busy_master(path: Path) -> dict[str, Any] | None:
    """A busy cluster master's CPU per purchase from ``bench.cluster``'s JSON, if there."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = busy(data, "cluster")
    if not found:
        return None
    return {"source": str(path), "code": data.get("code", "?"), "started": data.get("started"),
            "cpu_us": found["cpu_us"], "evalsha_us": found["evalsha_us"],
            "rate": found["rate"]}


def calls_per_sale(run: Run) -> float:
    return sum(n["evalsha_calls"] for n in run["nodes"].values()) / max(1, run["sold"])


def gateway_us(run: Run) -> float:
    """CPU of the gateway's gunicorn workers per unit sold, µs."""
    return float(run["gateway_cpu_s"]) * 1e6 / max(1, run["sold"])


def redis_us(run: Run) -> float:
    """CPU of every master (INFO cpu) per unit sold, µs."""
    return sum(float(n["cpu_s"]) for n in run["nodes"].values()) * 1e6 / max(1, run["sold"])


def cpu_text(data: dict[str, Any]) -> str:
    """What the CPU per unit sold predicts for the ratio when everything shares the cores."""
    if data.get("pinned"):
        return ""
    total = {kind: med([gateway_us(r) + redis_us(r) for r in of(data, kind)])
             for kind in KINDS}
    parts = {kind: (med([gateway_us(r) for r in of(data, kind)]),
                    med([redis_us(r) for r in of(data, kind)])) for kind in KINDS}
    return (
        " Here the gateway, wrk and every Valkey node share the same cores, so the rate "
        "follows the CPU a purchase costs in all: gateway workers + Redis, unsharded "
        f"{parts['unsharded'][0]:.0f} + {parts['unsharded'][1]:.0f} = "
        f"{total['unsharded']:.0f} µs, sharded {parts['sharded'][0]:.0f} + "
        f"{parts['sharded'][1]:.0f} = {total['sharded']:.0f} µs per unit sold (medians; wrk's "
        f"own CPU not counted), a ratio of {total['unsharded'] / max(1.0, total['sharded']):.2f}x"
        ". Its Redis CPU per call is higher as each master wakes up for a third of the calls "
        "(fewer purchases per wake-up; `bench/results/cluster.md` saw the same with unsharded "
        "activities spread over the masters); on a part the script does one more read (the "
        "buyer's claim). `--pin` (Valkey on its own core, as on separate hosts) keeps the "
        "masters' CPU off the gateway's cores.")


def summary(data: dict[str, Any]) -> list[str]:
    out = ["| hot item | purchases/s (200s) | req/s | p50 ms | p99 ms | other statuses | "
           "socket errors | EVALSHA calls per unit sold | Redis round trips per unit sold | "
           "gateway workers' CPU µs per unit sold | Redis CPU µs per unit sold (all masters) "
           "| others' CPU (cores) | load |",
           "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        runs = of(data, kind)
        others, errors = failures(runs)
        trips = med([sum(n["reads"] for n in r["nodes"].values()) / max(1, r["sold"])
                     for r in runs])
        out.append(
            f"| {kind} | {med([r['ok_rate'] for r in runs]):,.0f} | "
            f"{med([r['rate'] for r in runs]):,.0f} | {med([r['p50_ms'] for r in runs]):.1f} | "
            f"{med([r['p99_ms'] for r in runs]):.1f} | {fmt(others)} | {fmt(errors)} | "
            f"{med([calls_per_sale(r) for r in runs]):.3f} | {trips:.3f} | "
            f"{med([gateway_us(r) for r in runs]):.0f} | {med([redis_us(r) for r in runs]):.0f} | "
            f"{med([r['foreign_cores'] for r in runs]):.2f} | "
            f"{med([sum(r['load']) / 2 for r in runs]):.2f} |")
    return out


def split_table(data: dict[str, Any]) -> list[str]:
    """Per master: its parts, share of the calls, µs per call (medians over the runs). An
    unsharded item's figures are over the runs whose activity that master held."""
    out = ["| hot item | master (port) | runs | parts on it | share of the EVALSHA calls | "
           "units sold per run | EVALSHA µs/call (commandstats) | **CPU µs / call** (INFO "
           "cpu, user+sys) | node CPU during the run (cores) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        for port in data["masters"]:
            runs = [r for r in of(data, kind) if kind == "sharded" or hot_master(r) == port]
            nodes = [r["nodes"][port] for r in runs]
            if not nodes:
                continue
            out.append(
                f"| {kind} | {port} | {len(runs)} | {med([n['parts'] for n in nodes]):.0f} | "
                f"{med([r['share_pct'][port] for r in runs]):.1f} % | "
                f"{med([n['purchases'] for n in nodes]):,.0f} | "
                f"{med([per_call(n, 'evalsha_usec') for n in nodes]):.1f} | "
                f"**{med([per_call(n, 'cpu_s') for n in nodes]):.1f}** | "
                f"{med([load(n) for n in nodes]):.2f} |")
    return out


def placement(data: dict[str, Any]) -> str:
    """How the sharded item's parts sat on the masters, run after run."""
    layouts = {", ".join(f"{n['parts']} on {port}" for port, n in r["nodes"].items())
               for r in of(data, "sharded")}
    if len(layouts) == 1:
        return f"its {data['settings']['shards']} parts sat {layouts.pop()} in every run"
    return "its parts did NOT sit the same way in every run: " + "; ".join(sorted(layouts))


def capacity(data: dict[str, Any]) -> dict[str, Any]:
    sharded, unsharded = of(data, "sharded"), of(data, "unsharded")
    masters = len(data["masters"])
    out: dict[str, Any] = {"masters": masters}
    for key in ("cpu_s", "evalsha_usec"):
        one = med([per_call(r["nodes"][hot_master(r)], key) for r in unsharded])
        each = {port: med([per_call(r["nodes"][port], key) for r in sharded])
                for port in data["masters"]}
        spread = med(list(each.values()))
        share = {port: med([r["share_pct"][port] for r in sharded]) / 100
                 for port in data["masters"]}
        # The busiest master fills first: the item's ceiling is where the first one is full.
        first_full = min((1e6 / each[p]) / share[p] for p in each if each[p] and share[p])
        out[key] = {"unsharded_us": one, "sharded_us": each, "sharded_median_us": spread,
                    "unsharded": 1e6 / one if one else 0.0,
                    "sharded": masters * 1e6 / spread if spread else 0.0,
                    "sharded_split": first_full}
    return out


def capacity_text(data: dict[str, Any]) -> list[str]:
    cap = capacity(data)
    m = cap["masters"]
    lines = [
        "A master is one event loop (Valkey `io-threads 1`, the default here): it decides at "
        "most 1 s / (its CPU per call) purchases per second. An unsharded hot item lives in "
        "one slot, so on one master: its ceiling is one master's. A sharded one's calls "
        f"spread over the masters: {m} x one master's, or, exactly, where its busiest master "
        "fills first (each master's 1e6 / µs per call divided by its share of the calls). "
        "The µs per call below come from these HTTP runs, where this 2-core machine keeps a "
        "master lightly loaded (one purchase per wake-up, each paying its own socket read, "
        "reply and fsync, and the sharded item's masters each see a third of the calls, so "
        "more wake-ups per call): they overstate what a busy master pays, and the ceilings "
        "from them are floors. EVALSHA's own µs (commandstats: the script, no I/O) bound it "
        "from the other side.",
        "",
        "```",
    ]
    for key, label in (("cpu_s", "CPU µs per call (INFO cpu, the whole process)"),
                       ("evalsha_usec", "EVALSHA µs per call (commandstats, execution only)")):
        c = cap[key]
        lines += [
            f"{label}:",
            f"  unsharded: 1 x 1e6 / {c['unsharded_us']:.1f} = {c['unsharded']:,.0f} "
            "purchases/s (its master, median of the runs)",
            f"  sharded:   {m} x 1e6 / {c['sharded_median_us']:.1f} = {c['sharded']:,.0f} "
            "purchases/s (per master: "
            + ", ".join(f"{p} {v:.1f}" for p, v in c["sharded_us"].items())
            + f"); busiest master full first: {c['sharded_split']:,.0f} purchases/s",
            f"  sharded / unsharded ceiling: {c['sharded'] / max(1e-9, c['unsharded']):.2f}x",
        ]
    b = data.get("busy_master")
    if b:
        lines += [
            f"A busy cluster master ({b['source']}, {b['code']}, started {b['started']}: "
            "bench.saturate, work waiting at every wake-up):",
            f"  unsharded: 1 x 1e6 / {b['cpu_us']:.1f} = {1e6 / b['cpu_us']:,.0f} purchases/s "
            f"(measured there: {b['rate']:,.0f}/s)",
            f"  sharded:   {m} x 1e6 / {b['cpu_us']:.1f} = {m * 1e6 / b['cpu_us']:,.0f} "
            "purchases/s (the home-part purchase is the same one-round-trip EVALSHA + "
            "WAITAOF of lua/purchase.lua)",
        ]
    return [*lines, "```"]


def verdicts(data: dict[str, Any]) -> tuple[float, list[float], list[float]]:
    return (med(ratios(data)), ratios(data),
            [r["max_deviation_pct"] for r in of(data, "sharded")])


def render(data: dict[str, Any]) -> str:
    s = data["settings"]
    ratio, found, deviations = verdicts(data)
    worst = max(deviations, default=0.0)
    failed = [r for r in data["runs"] if r["failed"]]
    noted = [r for r in data["runs"] if r["notes"]]
    lines = [
        *header("One hot item on a 3-master cluster: sharded against unsharded", data,
                f"; `wrk` {data['wrk']}; Valkey {data['valkey']}"),
        "Setup: an embedded Valkey Cluster of 3 masters, no replicas "
        "(`seckill.ops.stack.cluster.EmbeddedCluster`), AOF on, `appendfsync "
        f"{s['appendfsync']}`; a gateway on it: `wsgi:app` under gunicorn `-c "
        f"gunicorn.conf.py`, {s['workers']} gevent workers, worker_connections "
        f"{s['worker_connections']}, production mode, durability `local` (WAITAOF 1 0 in the "
        "purchase's one send), the default per-user rate limit, `SECKILL_REDIS_CLUSTER=on`; no "
        "nginx, no orders worker (`bench.clusterstack.started_backends`, as `bench.cluster`; "
        "the single server and its gateway it also starts stay idle). Everything on "
        "127.0.0.1; "
        + (f"pinned (`--pin`): {data['pinned']}." if data.get("pinned") else
           "wrk on the same 2 cores as the gateway and every Valkey node (not pinned)."),
        "",
        f"Runs: `wrk -t {s['threads']} -c {s['connections']} -d {s['duration']}s --timeout "
        f"{s['timeout']:g}s`, purchases on ONE new activity per run, each request a distinct "
        f"user (up to {s['users']:,}) with a signed purchase URL, {s['total']:,} units (never "
        "short: every purchase takes the one-round-trip path, checked: no part lent or "
        "borrowed, no claim left). **unsharded**: a plain activity, its slot on the masters in "
        f"turn round after round; **sharded**: `\"shards\": {s['shards']}`, its parts on "
        "evenly spaced slots, each buyer on their home part (crc32(user) mod n). "
        f"{s['rounds']} rounds after a {s['warmup']:g} s warm-up of each; the order swaps "
        "every round, the ratio is taken within a round, then the median. Per master, INFO "
        "commandstats and INFO cpu before and after every run.",
        "",
        "## Purchases per second (medians of the rounds)",
        "",
        *summary(data),
        "",
        f"**sharded / unsharded: {ratio:.2f}x** (per round: "
        f"{', '.join(f'{v:.2f}' for v in found)}; purchases answered 200 per second); the "
        f"target ≥ {RATIO_TARGET}x is **{'met' if ratio >= RATIO_TARGET else 'not met'}**. On "
        f"total answers per second: {med(ratios(data, 'rate')):.2f}x; p50 "
        f"{med(ratios(data, 'p50_ms')):.2f}x, p99 {med(ratios(data, 'p99_ms')):.2f}x."
        + cpu_text(data),
        "",
        "## Where the hot item's calls land (medians of the runs)",
        "",
        "Share: the master's EVALSHA calls (INFO commandstats, after - before) over all "
        "masters' in the run. The sharded item: " + placement(data) + ". An unsharded "
        "item's rows are over the runs whose activity sat on that master (all its calls "
        "there, none elsewhere: the other masters' rows are left out).",
        "",
        *split_table(data),
        "",
        f"Largest deviation of a master's calls from the mean over the masters, per sharded "
        f"run: {', '.join(f'{v:.1f} %' for v in deviations)} (median "
        f"{med(deviations):.1f} %, worst {worst:.1f} %); the target ±{SPLIT_TARGET:g} % is "
        f"**{'met' if deviations and worst <= SPLIT_TARGET else 'not met'}** in "
        f"{sum(v <= SPLIT_TARGET for v in deviations)} of {len(deviations)} runs. Unsharded "
        "runs put every call on one master (deviation "
        + ", ".join(f"{r['max_deviation_pct']:.0f} %" for r in of(data, "unsharded"))
        + ": that master does all the work while the others idle).",
        "",
        "## Capacity note",
        "",
        *capacity_text(data),
        "",
        "## Correctness",
        "",
        (f"**{len(failed)} run(s) had 200s without a sale behind them** (see their notes "
         "below)." if failed else "Every run: units sold in the parts (Redis) ≥ its 200s, the "
         "stats endpoint agrees with the parts, and each part's buyers equal its units sold.")
        + (" Runs with notes: " + "; ".join(f"{r['kind']} round {r['round']}: "
                                            f"{'; '.join(r['notes'])}" for r in noted) + "."
           if noted else " No run left the one-round-trip path or answered anything but 200."),
        "",
        "## Every run",
        "",
        "| hot item | round | purchases/s | req/s | p50 ms | p99 ms | statuses | sold | sold "
        "per part | EVALSHA calls per master (share) | max deviation | lent / borrowed / "
        "claims | others' CPU | load before → after | notes |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---|---:|---|---:|---|---|",
    ]
    for r in data["runs"]:
        lines.append(
            f"| {r['kind']} | {r['round']} | {r['ok_rate']:,.0f} | {r['rate']:,.0f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {fmt(r['statuses'])} | {r['sold']:,} | "
            + ", ".join(f"{p['sold']:,}" for p in r["parts"]) + " | "
            + ", ".join(f"{n['evalsha_calls']:,} ({r['share_pct'][port]:.0f} %)"
                        for port, n in r["nodes"].items())
            + f" | {r['max_deviation_pct']:.1f} % | {r['lent']} / {r['borrowed']} / "
            f"{r['claims']} | {r['foreign_cores']:.2f} | {r['load'][0]:.2f} → "
            f"{r['load'][1]:.2f} | {'; '.join(r['notes'])} |")
    problems = data["problems"]
    lines += ["", "## Gateway log", "",
              f"{len(problems)} error lines (tracebacks, worker timeouts)"
              + (":" if problems else "."), *[f"    {line[:200]}" for line in problems[:5]]]
    return "\n".join(lines) + "\n"
