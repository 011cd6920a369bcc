"""The Markdown report, the PNG plot and the raw JSON of a ``python -m bench run``."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.memory import MemoryResult
from bench.workloads import ORDER, WORKLOADS, Run

MIB = 1024 * 1024


@dataclass
class Report:
    command: str
    started: str
    machine: str
    wrk: str
    settings: str
    runs: list[Run]
    rss: dict[str, list[int]] = field(default_factory=dict)  # server -> worker RSS, bytes
    rss_idle: dict[str, list[int]] = field(default_factory=dict)
    memory: MemoryResult | None = None
    problems: dict[str, list[str]] = field(default_factory=dict)
    note: str = ""
    code: str = ""
    rounds: int = 0
    elapsed: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # a scenario's own figures (JSON)

    def of(self, workload: str) -> list[Run]:
        return [r for r in self.runs if r.workload == workload]

    def ratio(self, workload: str) -> float | None:
        """Median over rounds of (this run's rate / its baseline's rate in the same round)."""
        base = WORKLOADS[workload].baseline
        if base is None:
            return None
        baseline = {r.round: r.rate for r in self.of(base)}
        ratios = [r.rate / baseline[r.round] for r in self.of(workload)
                  if baseline.get(r.round)]
        return statistics.median(ratios) if ratios else None

    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.runs)


def median(runs: Sequence[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(r) for r in runs) if runs else 0.0


def per_rejection(runs: Sequence[Run]) -> tuple[float, float, int]:
    """Redis (round trips, commands) per 410 over all ``runs``, and the 410s counted."""
    rejected = sum(r.result.statuses.get("410", 0) for r in runs)
    if not rejected:
        return 0.0, 0.0, 0
    return (sum(r.reads for r in runs) / rejected, sum(r.commands for r in runs) / rejected,
            rejected)


def breakdown(runs: Sequence[Run], limit: int = 8) -> str:
    requests = sum(r.result.requests for r in runs)
    calls: dict[str, int] = {}
    for r in runs:
        for name, n in r.calls.items():
            calls[name] = calls.get(name, 0) + n
    if not requests or not calls:
        return "none"
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:limit]
    return ", ".join(f"{name} {n / requests:.3g}" for name, n in top)


def fmt_statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())) or "0"


def sum_counts(dicts: Sequence[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def summary_rows(report: Report) -> list[str]:
    rows = []
    for name in ORDER:
        runs = report.of(name)
        if not runs:
            continue
        w = WORKLOADS[name]
        ratio = report.ratio(name)
        ratio_text = "n/a" if ratio is None else f"{ratio:.2f}x {w.baseline}"
        expected = sum(r.expected_answers for r in runs)
        total = sum(r.result.requests for r in runs)
        unexpected = sum_counts([r.unexpected for r in runs])
        errors = sum_counts([{k: v for k, v in r.result.errors.items() if k != "status" and v}
                             for r in runs])
        rt = median(runs, lambda r: r.per_request()[0])
        cmds = median(runs, lambda r: r.per_request()[1])
        rows.append(
            f"| {name} | {runs[0].connections} | {median(runs, lambda r: r.rate):,.0f} | "
            f"{ratio_text} | "
            f"{median(runs, lambda r: r.result.p50_ms):.1f} | "
            f"{median(runs, lambda r: r.result.p99_ms):.1f} | {expected:,} / {total:,} | "
            f"{fmt_statuses(unexpected)} | {fmt_statuses(errors)} | {rt:.2f} | {cmds:.2f} | "
            f"{median(runs, lambda r: r.foreign):.2f} | "
            f"{median(runs, lambda r: sum(r.load) / 2):.2f} |"
        )
    return rows


@dataclass
class Target:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run
    margin: str


def _ratio_target(report: Report, workload: str, goal: float, text: str) -> Target:
    ratio = report.ratio(workload)
    if ratio is None:
        return Target(text, "not measured", None, "")
    met = ratio >= goal
    margin = f"{(ratio / goal - 1) * 100:+.0f}% vs the target"
    return Target(text, f"{ratio:.2f}x", met, margin)


def targets(report: Report) -> list[Target]:
    out = [
        _ratio_target(report, "purchase", 1.0,
                      "full purchase path ≥ 1.0x the no-edge seed endpoint"),
        _ratio_target(report, "sold-out", 0.8, "sold-out flood ≥ 0.8x the bare hello"),
    ]
    flood = report.of("sold-out")
    if flood:
        rt, cmds, rejected = per_rejection(flood)
        out.append(Target(
            "zero Redis calls per rejected request (sold-out flood)",
            f"{cmds:.4f} commands, {rt:.4f} round trips per 410 ({rejected:,} 410s; "
            f"{breakdown(flood, 5)} per request)",
            cmds == 0, "met" if cmds == 0 else f"{sum(r.commands for r in flood):,} commands "
            "in all"))
    out.append(_ratio_target(report, "url", 0.8, "URL issuance ≥ 0.8x the seed endpoint"))
    for name in ("purchase", "url", "sold-out"):
        runs = report.of(name)
        if runs:
            p99 = median(runs, lambda r: r.result.p99_ms)
            out.append(Target(f"p99 < 100 ms at 100 connections ({name})", f"{p99:.0f} ms",
                              p99 < 100, f"{p99 / 100:.1f}x the limit" if p99 >= 100 else
                              f"{100 - p99:.0f} ms to spare"))
    for name in ("purchase-c1000", "sold-out-c1000"):
        runs = report.of(name)
        if runs:
            timeouts = sum(r.result.errors.get("timeout", 0) for r in runs)
            errors = sum(r.result.socket_errors - r.result.errors.get("timeout", 0)
                         for r in runs)
            unexpected = sum(sum(r.unexpected.values()) for r in runs)
            total = sum(r.result.requests for r in runs)
            bad = timeouts + errors + unexpected
            out.append(Target(
                f"zero errors and timeouts at {runs[0].connections} connections ({name})",
                f"{timeouts:,} timeouts, {errors:,} socket errors, {unexpected:,} unexpected "
                f"statuses in {total:,} answers",
                bad == 0, "met" if bad == 0 else f"{bad:,} bad"))
    buys = report.of("purchase")
    if buys:
        rt = median(buys, lambda r: r.per_request()[0])
        out.append(Target("Redis round trips ≤ 2 per purchase", f"{rt:.2f} "
                          f"({breakdown(buys, 6)} commands per request)", rt <= 2.0,
                          f"{rt - 2:+.2f}"))
    if flood:
        rt, _cmds, _n = per_rejection(flood)
        commands = sum(r.commands for r in flood)
        background = sum(r.background for r in flood)
        from_requests = max(0, commands - background)
        out.append(Target("0 Redis round trips for a rejection decided at the edge (sold out)",
                          f"{rt:.4f} round trips per 410 in all; {commands:,} commands, of "
                          f"which {background:,} from the gateway's background threads and "
                          f"{from_requests:,} from requests", from_requests == 0,
                          "met: none from requests" if from_requests == 0 else
                          f"{from_requests:,} commands from requests"))
    return out


def status_text(target: Target) -> str:
    if target.met is None:
        return "not measured"
    return "**met**" if target.met else "**not met**"


def render(report: Report, more: Sequence[str] = ()) -> str:
    """The Markdown report; ``more``: a scenario's own section, after the targets."""
    lines = [
        "# Benchmark: the gateway against its baselines and the alternative designs",
        "",
        f"Command: `{report.command}` (from the repository root; started {report.started}, "
        f"took {report.elapsed / 60:.1f} min)",
        "",
        *([f"Note: {report.note}", ""] if report.note else []),
        f"Code: {report.code}",
        "",
        f"Machine: {report.machine}; `wrk` {report.wrk}.",
        "",
        report.settings,
        "",
        "## Results (medians of the rounds)",
        "",
        "Ratios are taken within each round (this run's req/s over its baseline's in the "
        "same round), then the median. Round trips: Redis socket reads per request; commands: "
        "`INFO commandstats` calls per request, *including* the commands the Lua scripts run "
        "inside Redis. Others' CPU: cores' worth of CPU used by processes other than the "
        "benchmark's during the run (the machine is shared); load: the 1-minute load average. "
        "Socket errors are wrk's: connect, read, write, and timeouts (no answer within "
        "`--timeout`; wrk counts a request again at each of its 2-second checks while it is "
        "still waiting, so a timeout count is of events, not of distinct requests).",
        "",
        "| workload | conns | req/s | vs baseline | p50 ms | p99 ms | right answers / all | other "
        "statuses | socket errors | Redis round trips / req | Redis commands / req "
        "| others' CPU | load |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|",
        *summary_rows(report),
        "",
        "Workloads:",
        "",
    ]
    lines += [f"* `{name}`: {WORKLOADS[name].label}" for name in ORDER if report.of(name)]
    found = targets(report)
    if any(t.met is not None for t in found):
        lines += ["", "## The issue's targets", "",
                  "| target | measured | status | by how much |", "|---|---|---|---|"]
        lines += [f"| {t.text} | {t.measured} | {status_text(t)} | {t.margin} |" for t in found
                  if t.met is not None]
    lines += more
    sales = report.of("open-sale")
    if sales:
        lines += ["", "## Open sale: winners must equal the units", "",
                  "| round | buyers sent | units | 200s | winners (buyers hash) | sold | remaining "
                  "| orders in stream | stats sold / buyers | req/s | p99 ms | verdict |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
        for r in sales:
            c = r.checks
            lines.append(
                f"| {r.round} | {c.get('buyers_sent', 0):,} | {c.get('units')} | {c.get('ok')} "
                f"| {c.get('winners')} | {c.get('sold')} | {c.get('remaining')} | "
                f"{c.get('orders')} | {c.get('stats_sold')} / {c.get('stats_buyers')} | "
                f"{r.rate:,.0f} | {r.result.p99_ms:.1f} | {'FAIL' if r.failed else 'ok'} |")
    lines += alternatives_section(report)
    lines += commands_section(report)
    lines += memory_section(report)
    lines += [
        "", "## Every run", "",
        "| workload | round | conns | req/s | p50 ms | p90 ms | p99 ms | max ms | statuses "
        "| socket errors | round trips / req | others' CPU | load before → after | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|",
    ]
    for r in report.runs:
        res = r.result
        errors = {k: v for k, v in res.errors.items() if k != "status" and v}
        notes = list(r.notes)
        if res.wrapped and r.workload not in ("hello", "hello-c1000"):
            notes.append(f"ran out of distinct users {res.wrapped}x (raise --users)")
        if res.overrun:
            notes.append(f"{res.overrun} repeated requests")
        lines.append(
            f"| {r.workload} | {r.round} | {r.connections} | {r.rate:,.0f} | {res.p50_ms:.1f} | "
            f"{res.p90_ms:.1f} | {res.p99_ms:.1f} | {res.max_ms:.0f} | "
            f"{fmt_statuses(res.statuses)} | {fmt_statuses(errors)} | "
            f"{r.per_request()[0]:.2f} | {r.foreign:.2f} | {r.load[0]:.2f} → {r.load[1]:.2f} | "
            f"{'; '.join(notes)} |")
    lines += ["", "## Server logs", ""]
    for name, problems in report.problems.items():
        lines.append(f"* {name}: {len(problems)} error lines (tracebacks, worker timeouts)")
        lines += [f"      {line[:200]}" for line in problems[:5]]
    return "\n".join(lines) + "\n"


def alternatives_section(report: Report) -> list[str]:
    designs = [("read-then-decrement, not atomic", "unsafe", "oversell-unsafe"),
               ("`SET NX PX` lock around read + decrement", "lock", "oversell-lock"),
               ("our script, `lua/purchase.lua` (one EVALSHA)", "script", "oversell-script"),
               ("the seed's script (the baseline)", "seed", "")]
    if not any(report.of(a) or report.of(b) for _, a, b in designs):
        return []
    out = ["", "## Alternative designs (minimal endpoints, no edge, same server)", "",
           "In stock: distinct users, large stock, timed runs. Oversold: a counted sale of "
           "distinct buyers on few units; oversold = units sold beyond the total, per round.",
           "",
           "| design | req/s in stock | vs the seed's script | p99 ms | round trips / purchase "
           "| sale (buyers on units) | oversold per round | 503 busy per round | sale req/s |",
           "|---|---:|---:|---:|---:|---|---|---|---:|"]
    for label, timed, sale in designs:
        t, s = report.of(timed), report.of(sale)
        rate = f"{median(t, lambda r: r.rate):,.0f}" if t else "n/a"
        ratio = report.ratio(timed) if t else None
        p99 = f"{median(t, lambda r: r.result.p99_ms):.1f}" if t else "n/a"
        rt = f"{median(t, lambda r: r.per_request()[0]):.2f}" if t else "n/a"
        shape = (f"{s[0].checks.get('buyers_sent', 0):,} on {s[0].checks.get('units')}"
                 if s else "n/a")
        oversold = ", ".join(str(r.checks.get("oversold")) for r in s) or "n/a"
        busy = ", ".join(str(r.checks.get("busy", 0)) for r in s) or "n/a"
        sale_rate = f"{median(s, lambda r: r.rate):,.0f}" if s else "n/a"
        out.append(f"| {label} | {rate} | {'n/a' if ratio is None else f'{ratio:.2f}x'} | "
                   f"{p99} | {rt} | {shape} | {oversold} | {busy} | {sale_rate} |")
    return out


def commands_section(report: Report) -> list[str]:
    rows = [(name, report.of(name)) for name in ORDER if report.of(name)]
    if not rows:
        return []
    out = ["", "## Redis commands per request, by command (all rounds)", "",
           "Script-internal commands (HMGET, TIME, HGET, HINCRBY, HSET, XADD, ...) are counted "
           "by Redis too; what a client sends is EVALSHA, WAITAOF, GET, SET, HGETALL, ...", "",
           "| workload | commands per request |", "|---|---|"]
    out += [f"| {name} | {breakdown(runs, 10)} |" for name, runs in rows]
    return out


def memory_section(report: Report) -> list[str]:
    out: list[str] = []
    if report.rss:
        out += ["", "## Memory", "",
                "RSS of each gunicorn worker (psutil), after the warm-up and after the last "
                "round:", "", "| server | after warm-up (MiB) | at the end (MiB) |",
                "|---|---|---|"]
        for name, values in report.rss.items():
            idle = ", ".join(f"{v / MIB:.1f}" for v in report.rss_idle.get(name, []))
            out.append(f"| {name} | {idle or 'n/a'} | "
                       f"{', '.join(f'{v / MIB:.1f}' for v in values)} |")
    m = report.memory
    if m is not None:
        out += [
            "", f"Redis memory after a {m.buyers:,}-buyer sale (the purchase script called "
            f"directly, pipelined, {m.seconds:.1f} s; user ids like `{m.uid_example}`; "
            f"allocator {m.allocator}):", "",
            f"* `used_memory` {m.used_before / MIB:.1f} MiB → {m.used_after / MIB:.1f} MiB: "
            f"**{m.per_buyer:.0f} bytes per buyer**;",
            f"* of which the buyers hash {m.buyers_hash / m.buyers:.0f} B/buyer "
            f"({m.buyers_hash / MIB:.1f} MiB) and the orders stream "
            f"{m.orders_stream / m.buyers:.0f} B/buyer ({m.orders_stream / MIB:.1f} MiB; "
            "trimmed by the orders worker once stored, and no worker runs here) "
            "(`MEMORY USAGE ... SAMPLES 0`).",
        ]
    return out


# -- plot ---------------------------------------------------------------------------------

COLORS = {"baseline": "#9e9e9e", "gateway": "#1f77b4", "sale": "#17becf",
          "alternative": "#ff7f0e", "connections": "#9467bd", "oversell": "#d62728",
          "edge": "#2ca02c", "edge-off": "#8c564b"}


def plot(report: Report, path: Path) -> bool:
    """Two panels: median req/s (with the ratio to the baseline) and median p99 latency, for
    the timed and sale workloads. Returns False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [n for n in ORDER if report.of(n) and WORKLOADS[n].group != "oversell"]
    if not names:
        return False
    rates = [median(report.of(n), lambda r: r.rate) for n in names]
    p99s = [median(report.of(n), lambda r: r.result.p99_ms) for n in names]
    colors = [COLORS[WORKLOADS[n].group] for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.38 * len(names) + 1.6), dpi=80,
                                      sharey=True)
    ys = list(range(len(names)))[::-1]
    left.barh(ys, rates, color=colors)
    for y, n, rate in zip(ys, names, rates, strict=True):
        ratio = report.ratio(n)
        label = f" {rate:,.0f}" + (f"  ({ratio:.2f}x {WORKLOADS[n].baseline})"
                                   if ratio is not None and WORKLOADS[n].baseline != n else "")
        left.text(rate, y, label, va="center", fontsize=8)
    left.set_yticks(ys, names, fontsize=9)
    left.set_xlabel("requests/s (median of rounds)")
    left.set_xlim(0, max(rates) * 1.6)
    right.barh(ys, p99s, color=colors)
    for y, p99 in zip(ys, p99s, strict=True):
        right.text(p99, y, f" {p99:.0f}", va="center", fontsize=8)
    right.axvline(100, color="#d62728", linestyle="--", linewidth=1)
    right.set_xlabel("p99 latency, ms (median of rounds; dashed: 100 ms)")
    right.set_xlim(0, max(max(p99s), 100) * 1.3)
    fig.suptitle(f"seckill gateway vs baselines ({report.started}); "
                 f"{report.rounds} rounds, 2 gevent workers each", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def dump_json(report: Report, path: Path) -> None:
    def run_dict(run: Run) -> dict[str, Any]:
        data = asdict(run)
        data["result"].pop("raw", None)
        return data

    payload = {
        "command": report.command, "started": report.started, "machine": report.machine,
        "wrk": report.wrk, "settings": report.settings, "note": report.note,
        "code": report.code,
        "runs": [run_dict(r) for r in report.runs], "rss": report.rss,
        "rss_idle": report.rss_idle,
        "memory": None if report.memory is None else asdict(report.memory),
        **report.extra,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
