"""The ``webhooks`` scenario's section of the ``bench run`` report: the webhooks' targets.

The first, measured here: ``purchase-shop`` (purchases while the dispatcher delivers every
event to one endpoint) against ``purchase`` (no endpoint), 200s per second, the ratio taken
within each round, then the median over the rounds, every round's figures beside it with the
events delivered by the end of the run and the backlog then. The two others have benchmarks of
their own, run separately: the section names their commands (their ``main()`` prints and
writes files, it returns no figures to put here) and, when the repository holds a result
file of the dispatcher's, quotes it as what it is: another run's figure.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

from bench.dropsreport import ok_rate, rounds
from bench.report import Report, median
from bench.webhooks import BASE, SHOP
from tests.support.servers import REPO_ROOT

GOAL = 0.95
ROUNDS = 3  # fewer rounds than this: the status says so
DISPATCH = "python -m bench.webhooks_dispatch --events 20000 --rounds 3"
DISPATCH_RESULT = REPO_ROOT / "bench" / "results" / "webhooks_dispatch.json"
OUTBOX = "python -m bench.worker_outbox --orders 20000 --rounds 5"


def ran(report: Report) -> bool:
    return bool(report.of(SHOP))


def per_round(report: Report) -> list[dict[str, Any]]:
    """Each round's pair (``dropsreport.rounds``) with the shop run's deliveries."""
    shop = {r.round: r for r in report.of(SHOP)}
    base = {r.round: r for r in report.of(BASE)}
    out = []
    for row in rounds(report, SHOP, BASE):
        c = shop[row["round"]].checks
        row.update({k: c.get(k) for k in (
            "delivered_at_end", "backlog_at_end", "not_stored_at_end", "not_fanned_at_end",
            "pending_at_end", "drained_s", "sold", "delivered")})
        row["base_not_stored_at_end"] = base[row["round"]].checks.get("not_stored_at_end")
        out.append(row)
    return out


def target(report: Report) -> dict[str, Any]:
    found = per_round(report)
    row: dict[str, Any] = {"goal": GOAL, "rounds": found, "value": None, "met": None}
    if found:
        value = statistics.median(r["ratio"] for r in found)
        row.update(value=value, met=value >= GOAL, failed_checks=any(
            r.failed for r in report.of(SHOP) + report.of(BASE)))
    return row


def status(row: dict[str, Any]) -> str:
    if row["met"] is None:
        return "not measured"
    text = "met" if row["met"] else "**NOT met**"
    if row.get("failed_checks"):
        text += " (but a correctness check failed: see the runs)"
    n = len(row["rounds"])
    if n < ROUNDS:
        text += f" (only {n} round{'s' if n != 1 else ''})"
    return text


def dispatch_figure() -> str:
    """The committed result of ``bench.webhooks_dispatch``, labelled as another run's."""
    try:
        data = json.loads(DISPATCH_RESULT.read_text(encoding="utf-8"))
        value = float(data["median_per_second"])
    except (OSError, ValueError, KeyError, TypeError):
        return "not run here"
    return (f"not run here; `{DISPATCH_RESULT.relative_to(REPO_ROOT)}` (another run) says "
            f"{value:,.0f} events/s")


def section(report: Report) -> list[str]:
    """The Markdown section (empty when the scenario did not run)."""
    if not ran(report):
        return []
    t = target(report)
    value = "not measured" if t["value"] is None else f"**{t['value']:.2f}x**"
    lines = [
        "", "## Purchases while the webhooks' dispatcher delivers", "",
        f"Command: `{report.command}`", "",
        "| target | figure | per round | status |", "|---|---:|---|---|",
        f"| purchases while the dispatcher delivers every event to one endpoint ≥ {GOAL}x "
        f"without any endpoint (`{SHOP}` / `{BASE}`, 200s/s) | {value} | "
        + ", ".join(f"{r['ratio']:.2f}" for r in t["rounds"]) + f" | {status(t)} |",
        f"| the dispatcher delivers ≥ 1,000 events/s to a local receiver | "
        f"{dispatch_figure()} | | run `{DISPATCH}` |",
        "| the worker's order throughput with the outbox ≥ 0.9x without | not run here | | "
        f"run `{OUTBOX}` |",
        "", "Every round (200s per second; deliveries and backlog of the `purchase-shop` run "
        "when wrk stopped: orders sold but not stored yet + events not fanned out + "
        "deliveries pending; then how long until every event was delivered; and, for "
        "comparison, the orders `purchase` had sold but the worker not stored yet when its "
        "wrk stopped):", "",
        f"| round | ran first | `{SHOP}` | `{BASE}` | ratio | delivered at the end | backlog "
        "at the end (not stored / not fanned / pending) | all delivered after (s) | units "
        "sold = delivered | `purchase`: not stored at the end | others' CPU (cores) |",
        "|---:|---|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for r in t["rounds"]:
        lines.append(
            f"| {r['round']} | `{r['first']}` | {r['measured']:,.0f} | {r['baseline']:,.0f} | "
            f"{r['ratio']:.2f} | {r['delivered_at_end']:,} | {r['backlog_at_end']:,} "
            f"({r['not_stored_at_end']:,} / {r['not_fanned_at_end']:,} / "
            f"{r['pending_at_end']:,}) | {r['drained_s']} | {r['sold']:,} = "
            f"{r['delivered']:,} | {r['base_not_stored_at_end']:,} | "
            f"{r['others_cpu']:.2f} |")
    lines += ["", "CPU during each run, cores' worth (from the end of its set-up to its check: "
              "the settle, wrk's run and about a second after it; each process with its "
              "children; the machine has "
              f"{os.cpu_count()} cores, wrk and Valkey use the rest):", "",
              "| workload | round | 200s/s | gateway | orders worker | dispatcher | receiver |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for run in sorted(report.of(BASE) + report.of(SHOP), key=lambda r: (r.round, r.workload)):
        c = run.checks.get("cores", {})
        lines.append(f"| {run.workload} | {run.round} | {ok_rate(run):,.0f} | "
                     + " | ".join(f"{c[k]:.2f}" if k in c else "-"
                                  for k in ("gateway", "worker", "dispatcher", "receiver"))
                     + " |")
    lines += ["", "| workload | 200s/s (median) | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for name in (BASE, SHOP):
        runs = report.of(name)
        if runs:
            lines.append(f"| {name} | {median(runs, ok_rate):,.0f} | "
                         f"{median(runs, lambda r: r.result.p50_ms):.1f} | "
                         f"{median(runs, lambda r: r.result.p99_ms):.1f} |")
    return lines


def summary(report: Report) -> dict[str, Any]:
    """The section's figures for the JSON."""
    if not ran(report):
        return {}
    t = target(report)
    return {"command": report.command, "goal": GOAL, "median_ratio": t["value"],
            "met": t["met"], "rounds": t["rounds"],
            "others": {"dispatch": {"command": DISPATCH, "figure": dispatch_figure()},
                       "worker_outbox": {"command": OUTBOX}}}
