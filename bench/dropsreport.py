"""The ``drops`` scenario's section of the ``bench run`` report: the drops' targets.

Each target is a pair run back to back in every round; the ratio is taken within the round
(the measured workload's 200s per second over its baseline's), then the median over the
rounds, with every round's two figures printed beside it so a noisy round shows. 200s per
second, not all answers: a purchase answered otherwise (a 503, a 429) is not a purchase.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.drops import BEFORE, NAMES, PAIRS
from bench.report import Report, median
from bench.workloads import Run

GOAL = 0.95  # every target of the issue is ≥ 0.95x ("no slower, within noise" included)
ROUNDS = 5  # the issue asks for medians of at least this many rounds


def ok_rate(run: Run) -> float:
    """200s per second of the run."""
    seconds = run.result.seconds
    return run.result.statuses.get("200", 0) / seconds if seconds > 0 else 0.0


def cpu_ms(run: Run, parts: tuple[str, ...] = ("server", "valkey")) -> float | None:
    """CPU milliseconds per 200 that the run cost ``parts``: its gunicorn ("server", workers
    included) and Valkey by default (None: not measured, a run recorded before the meter, or
    no 200)."""
    ok = run.result.statuses.get("200", 0)
    if not ok or "server" not in run.cpu:
        return None
    return 1000 * sum(run.cpu.get(part, 0.0) for part in parts) / ok


def ran(report: Report) -> bool:
    return any(report.of(name) for name in NAMES)


def rounds(report: Report, measured: str, baseline: str) -> list[dict[str, Any]]:
    """Per round in which both ran: each one's 200s/s, the ratio, which ran first."""
    base = {r.round: r for r in report.of(baseline)}
    out = []
    for run in report.of(measured):
        other = base.get(run.round)
        if other is None or not ok_rate(other):
            continue
        first = (measured if report.runs.index(run) < report.runs.index(other)
                 else baseline)
        spent, base_spent = cpu_ms(run), cpu_ms(other)
        out.append({"round": run.round, "measured": ok_rate(run), "baseline": ok_rate(other),
                    "ratio": ok_rate(run) / ok_rate(other), "first": first,
                    "others_cpu": (run.foreign + other.foreign) / 2,
                    # the baseline's CPU per purchase over the measured one's: as the ratio of
                    # 200s/s reads, 1.00 = as cheap, 0.95 = 5 % more CPU per purchase
                    "cpu_ratio": base_spent / spent if spent and base_spent else None})
    return out


def targets(report: Report) -> list[dict[str, Any]]:
    """The issue's three targets and the diagnostic pairs, each with its rounds and whether
    it reached 0.95x (None: the pair did not run)."""
    out = []
    for pair in PAIRS:
        measured, baseline = pair.measured, pair.baseline
        per = rounds(report, measured, baseline)
        row: dict[str, Any] = {"target": pair.text, "measured_workload": measured,
                               "baseline_workload": baseline, "goal": GOAL, "rounds": per,
                               "diagnostic": pair.diagnostic}
        if not per:
            row.update(value=None, met=None, failed_checks=False)
        else:
            value = statistics.median(r["ratio"] for r in per)
            costs = [r["cpu_ratio"] for r in per if r["cpu_ratio"] is not None]
            row.update(value=value, met=value >= GOAL,
                       cpu_value=statistics.median(costs) if costs else None, failed_checks=any(
                r.failed for r in report.of(measured) + report.of(baseline)))
        out.append(row)
    return out


def status(row: dict[str, Any], n_rounds: int) -> str:
    if row["met"] is None:
        return "not measured"
    text = "diagnostic" if row["diagnostic"] else "met" if row["met"] else "**NOT met**"
    if row["failed_checks"]:
        text += " (but a correctness check failed: see the runs)"
    if n_rounds < ROUNDS:
        text += f" (only {n_rounds} round{'s' if n_rounds != 1 else ''}: the issue asks ≥ {ROUNDS})"
    return text


def section(report: Report) -> list[str]:
    """The Markdown section (empty when no drops workload ran)."""
    if not ran(report):
        return []
    found = targets(report)
    lines = [
        "", "## Drops: variants, limits per person, and the purchase before them", "",
        f"Command: `{report.command}`", "",
        "Ratios of 200s per second, taken within each round (the pair runs back to back, its "
        "order swapped every round), then the median of the rounds. The status is the "
        "ratio's. Beside it, the same pair in CPU: the baseline's CPU per purchase (its "
        "gunicorn, workers included, and Valkey, from /proc) over the measured one's, per "
        "round, then the median; it reads like the ratio (0.95 = 5 % more CPU per purchase). "
        "It swings with the machine's speed between rounds as the req/s do: it says where a "
        "difference goes (the last table splits it into gunicorn and Valkey), not whether it "
        "is real.", "",
        "| target | median ratio | per round | status | CPU ratio (median) |",
        "|---|---:|---|---|---:|"]
    for t in found:
        if t["met"] is None:
            lines.append(f"| {t['target']} | not measured | | not measured | |")
            continue
        lines.append(f"| {t['target']} (`{t['measured_workload']}` / "
                     f"`{t['baseline_workload']}`) | **{t['value']:.2f}x** | "
                     + ", ".join(f"{r['ratio']:.2f}" for r in t["rounds"])
                     + f" | {status(t, len(t['rounds']))} | {_x(t['cpu_value'])} |")
    lines += ["", "Every round of every pair (200s per second):", "",
              "| pair | round | ran first | measured | baseline | ratio | CPU ratio | "
              "others' CPU (cores) |",
              "|---|---:|---|---:|---:|---:|---:|---:|"]
    for t in found:
        for r in t["rounds"]:
            lines.append(f"| `{t['measured_workload']}` / `{t['baseline_workload']}` | "
                         f"{r['round']} | `{r['first']}` | {r['measured']:,.0f} | "
                         f"{r['baseline']:,.0f} | {r['ratio']:.2f} | {_x(r['cpu_ratio'])} | "
                         f"{r['others_cpu']:.2f} |")
    lines += ["", "| workload | 200s/s (median) | p50 ms | p99 ms | Redis commands / purchase "
              "| CPU ms / purchase: gunicorn + Valkey (median) |",
              "|---|---:|---:|---:|---:|---:|"]
    for name in ("purchase", *NAMES):
        runs = report.of(name)
        if runs:
            lines.append(f"| {name} | {median(runs, ok_rate):,.0f} | "
                         f"{median(runs, lambda r: r.result.p50_ms):.1f} | "
                         f"{median(runs, lambda r: r.result.p99_ms):.1f} | "
                         f"{median(runs, lambda r: r.per_request()[1]):.2f} | "
                         f"{_cpu_split(runs)} |")
    if report.of(BEFORE):
        lines += ["", "`purchase-before`'s code is named in the settings above (the commit "
                  "of the worktree)."]
    return lines


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _cpu_split(runs: list[Run]) -> str:
    """The median CPU ms per purchase, gunicorn + Valkey (each part's median beside it)."""
    metered = [r for r in runs if cpu_ms(r) is not None]
    if not metered:
        return "n/a"
    whole, server, valkey = (statistics.median(cpu_ms(r, parts) or 0.0 for r in metered)
                             for parts in (("server", "valkey"), ("server",), ("valkey",)))
    return f"{whole:.3f} ({server:.3f} + {valkey:.3f})"


def summary(report: Report) -> dict[str, Any]:
    """The section's figures for the JSON."""
    if not ran(report):
        return {}
    rows = {name: {"ok_per_s": median(report.of(name), ok_rate),
                   "ok_per_s_rounds": [ok_rate(r) for r in report.of(name)],
                   "p50_ms": median(report.of(name), lambda r: r.result.p50_ms),
                   "p99_ms": median(report.of(name), lambda r: r.result.p99_ms),
                   "cpu_ms_rounds": [cpu_ms(r) for r in report.of(name)]}
            for name in ("purchase", *NAMES) if report.of(name)}
    return {"command": report.command, "targets": targets(report), "workloads": rows}
