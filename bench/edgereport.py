"""The ``edge`` scenario's section of the ``bench run`` report: the edge cache's targets.

Ratios are taken within a round (a workload's req/s over its baseline's in the same round),
then the median over the rounds, as everywhere in ``bench run``; the per-round ratios are
printed beside it so a noisy round shows.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.edge import CACHED, FRONTS
from bench.report import Report, fmt_statuses, median, sum_counts
from bench.workloads import WORKLOADS

OVER_HELLO = 5.0  # a cached refusal against the bare hello app on gunicorn
# "No slower than before, within noise": the median of the per-round ratios at least 1 - NOISE.
# Back-to-back wrk runs of one workload on this shared 2-core machine differ by a few percent.
NOISE = 0.05
P99_MS = 50.0  # p99 of the refusals nginx repeats
PAIRS = {  # cached front: the same workload through the uncached front
    "url-sold-out-nginx": "url-sold-out-nginx-off",
    "buy-sold-out-nginx": "buy-sold-out-nginx-off",
    "purchase-nginx": "purchase-nginx-off",
}
NO_SLOWER = ("buy-sold-out-nginx", "purchase-nginx")


def ratios(report: Report, measured: str, baseline: str) -> list[float]:
    """``measured``'s req/s over ``baseline``'s, per round in which both ran."""
    base = {r.round: r.rate for r in report.of(baseline)}
    return [r.rate / base[r.round] for r in report.of(measured) if base.get(r.round)]


def ran(report: Report) -> bool:
    return any(report.of(name) for name in WORKLOADS if WORKLOADS[name].server in FRONTS)


def _ratio_target(report: Report, measured: str, baseline: str, goal: float,
                  text: str) -> dict[str, Any]:
    per_round = ratios(report, measured, baseline)
    if not per_round:
        return {"target": text, "measured": "not measured", "met": None}
    value = statistics.median(per_round)
    return {"target": text, "value": value, "per_round": per_round, "met": value >= goal,
            "measured": f"{value:.2f}x (rounds: {', '.join(f'{x:.2f}' for x in per_round)})"}


def targets(report: Report) -> list[dict[str, Any]]:
    """The edge cache's targets, each with what was measured and whether it was met (None: the
    workload did not run)."""
    out = [_ratio_target(report, name, "hello", OVER_HELLO,
                         f"`{name}` ≥ {OVER_HELLO:g}x `hello` (req/s)") for name in CACHED]
    out += [_ratio_target(report, name, PAIRS[name], 1 - NOISE,
                          f"`{name}` no slower than `{PAIRS[name]}` (median ratio ≥ "
                          f"{1 - NOISE:.2f}: within {NOISE:.0%} of noise)") for name in NO_SLOWER]
    sales = report.of("open-sale-nginx")
    if sales:
        units = sales[0].checks.get("units")
        winners = [r.checks.get("winners") for r in sales]
        out.append({"target": f"open sale through nginx: exactly {units} winners in Redis "
                    "(meta, buyers hash, orders stream) and in the stats, every round",
                    "measured": f"{sales[0].checks.get('buyers_sent', 0):,} buyers; winners "
                    f"per round: {', '.join(str(w) for w in winners)}",
                    "met": not any(r.failed for r in sales)})
    for name in CACHED:
        runs = report.of(name)
        if not runs:
            continue
        p99 = median(runs, lambda r: r.result.p99_ms)
        out.append({"target": f"p99 ≤ {P99_MS:g} ms at {runs[0].connections} connections "
                    f"(`{name}`)", "value": p99, "met": p99 <= P99_MS,
                    "measured": f"{p99:.1f} ms (rounds: "
                    f"{', '.join(f'{r.result.p99_ms:.1f}' for r in runs)})"})
    return out


def hit_share(report: Report, name: str) -> str:
    runs = report.of(name)
    total = sum(r.result.requests for r in runs)
    hits = sum(r.result.cache.get("HIT", 0) for r in runs)
    if WORKLOADS[name].server == "nginx-off":
        return "no cache"
    return f"{hits / total:.1%}" if total else "n/a"


def section(report: Report) -> list[str]:
    """The Markdown section (empty when no workload ran through a front)."""
    if not ran(report):
        return []
    lines = [
        "", "## The crowd's refusals at nginx's price", "",
        "The same gateway behind two nginx fronts: `nginx` (the edge cache on) and "
        "`nginx-off` (`edge_cache=False`: every request reaches the gateway, as before the "
        "issue). `from nginx's cache`: the share of answers that came with `X-Cache: HIT` "
        "(counted by the wrk script). The p50/p99 are wrk's over every answer of the run, "
        "those the gateway gave at the start of each second included (the copy lives until the "
        "end of the second in which the gateway answered): an upper bound of the p99 of the "
        "answers nginx repeated.", "",
        "| workload | front | req/s | vs `hello` | vs the uncached front | p50 ms | p99 ms | "
        "from nginx's cache | statuses (all rounds) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, w in WORKLOADS.items():
        runs = report.of(name)
        if w.server not in FRONTS or not runs:
            continue
        over_hello = ratios(report, name, "hello")
        over_off = ratios(report, name, PAIRS[name]) if name in PAIRS else []
        lines.append(
            f"| {name} | {w.server} | {median(runs, lambda r: r.rate):,.0f} | "
            + (f"{statistics.median(over_hello):.2f}x" if over_hello else "n/a") + " | "
            + (f"{statistics.median(over_off):.2f}x" if over_off else "") + " | "
            f"{median(runs, lambda r: r.result.p50_ms):.1f} | "
            f"{median(runs, lambda r: r.result.p99_ms):.1f} | {hit_share(report, name)} | "
            f"{fmt_statuses(sum_counts([r.result.statuses for r in runs]))} |")
    found = [t for t in targets(report) if t["met"] is not None]
    lines += ["", "### Targets", "", "| target | measured (median of the rounds) | status |",
              "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'met' if t['met'] else '**NOT met**'} |"
              for t in found]
    return lines


def summary(report: Report) -> dict[str, Any]:
    """The section's figures for the JSON: the targets and each workload's medians."""
    if not ran(report):
        return {}
    rows = {}
    for name, w in WORKLOADS.items():
        runs = report.of(name)
        if w.server in FRONTS and runs:
            rows[name] = {"front": w.server, "rate": median(runs, lambda r: r.rate),
                          "over_hello": ratios(report, name, "hello"),
                          "over_uncached": ratios(report, name, PAIRS[name])
                          if name in PAIRS else [],
                          "p50_ms": median(runs, lambda r: r.result.p50_ms),
                          "p99_ms": median(runs, lambda r: r.result.p99_ms),
                          "from_cache": hit_share(report, name)}
    return {"targets": targets(report), "workloads": rows}
