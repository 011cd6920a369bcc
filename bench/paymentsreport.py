"""The Markdown report of ``python -m bench.payments``: purchases with a payment window against
without, and 10,000 holds released under a purchase load, from the runs' JSON."""

from __future__ import annotations

from typing import Any

from bench.clusterreport import failures, fmt, header, med

RATIO_TARGET = 0.95  # purchases with a payment window >= 0.95x without, same run
RELEASE_TARGET_MS = 5000  # every hold released within 5 s of its pay_by

Run = dict[str, Any]

__all__ = ["RATIO_TARGET", "RELEASE_TARGET_MS", "fmt", "line", "moments", "render"]


def of(data: dict[str, Any], kind: str) -> list[Run]:
    return [r for r in data["runs"] if r["kind"] == kind]


def ratios(data: dict[str, Any], kind: str, base: str, key: str) -> list[float]:
    """``kind`` / ``base`` of ``key`` within each round."""
    found = {r["round"]: r[key] for r in of(data, base)}
    return [r[key] / found[r["round"]] for r in of(data, kind) if found.get(r["round"])]


def line(run: Run) -> str:
    """A run, on one line of the harness's output."""
    label = "warm-up" if run["round"] == 0 else f"round {run['round']}"
    gone = run.get("released_after_last_ms", "")
    return (f"  {run['kind']:7} {label:8}: {run['ok_rate']:7,.0f} purchases/s, p50 "
            f"{run['p50_ms']:5.1f} ms, p99 {run['p99_ms']:6.1f} ms, max {run['max_ms']:6.1f} "
            f"ms, sold {run['meta'].get('sold', 0):,}, holds {run['holds']:,}, others "
            f"{run['foreign_cores']:.2f} cores"
            + (f", the last hold gone {gone} ms after the latest pay_by" if "released" in run
               else "") + "".join(f"\n    NOTE {n}" for n in run["notes"]))


def moments(samples: list[list[int]], n: int) -> tuple[int | None, int | None]:
    """From polls of [Redis ms, holds left]: when the first poll after the fill saw fewer
    than ``n`` holds, and when the first saw none (None: never)."""
    full = next((i for i, (_, h) in enumerate(samples) if h == n), len(samples))
    began = next((t for t, h in samples[full:] if h < n), None)
    return began, next((t for t, h in samples[full:] if h == 0), None)


def per_sale(run: Run, value: float) -> float:
    """µs per unit sold in the run."""
    return value * 1e6 / max(1, run["meta"].get("sold", 0))


def summary(data: dict[str, Any], kinds: tuple[str, ...], worker: bool) -> list[str]:
    out = ["| activity | purchases/s (200s) | p50 ms | p99 ms | max ms | other statuses | "
           "socket errors | EVALSHA µs/call (commandstats) | Redis CPU µs per unit sold | "
           "gateway workers' CPU µs per unit sold | "
           + ("orders worker's CPU (cores) | worker caught up after (s) | " if worker else "")
           + "others' CPU (cores) | load |",
           "|---|---:|---:|---:|---:|---|---|---:|---:|---:|"
           + ("---:|---:|" if worker else "") + "---:|---:|"]
    for kind in kinds:
        runs = of(data, kind)
        others, errors = failures(runs)
        extra = (f"{med([r['worker_cpu_s'] / max(1e-9, r['seconds']) for r in runs]):.2f} | "
                 f"{med([r['drain_s'] or 0.0 for r in runs]):.1f} | " if worker else "")
        out.append(
            f"| {kind} | {med([r['ok_rate'] for r in runs]):,.0f} | "
            f"{med([r['p50_ms'] for r in runs]):.1f} | {med([r['p99_ms'] for r in runs]):.1f} | "
            f"{med([r['max_ms'] for r in runs]):.1f} | {fmt(others)} | {fmt(errors)} | "
            f"{med([r['redis']['evalsha_usec'] / max(1, r['redis']['evalsha_calls']) for r in runs]):.1f} | "  # noqa: E501
            f"{med([per_sale(r, r['redis']['cpu_s']) for r in runs]):.0f} | "
            f"{med([per_sale(r, r['gateway_cpu_s']) for r in runs]):.0f} | {extra}"
            f"{med([r['foreign_cores'] for r in runs]):.2f} | "
            f"{med([sum(r['load']) / 2 for r in runs]):.2f} |")
    return out


def ms(value: float | None) -> str:
    return "never" if value is None else f"{value:,.0f}"


def release_table(data: dict[str, Any]) -> list[str]:
    out = ["| round | fill (s) | pay_by spread (ms) | first hold gone after the earliest pay_by "
           "(ms) | **last hold gone after the latest pay_by (ms)** | ... after the earliest "
           "(ms) | polls | release during wrk (s after its start) | expired entries "
           "(distinct) | database rows expired (stored after, s) | meta remaining / sold / "
           "expired |",
           "|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in of(data, "release"):
        m, start, first = r["meta_after"], r["wrk_ms"][0], r["pay_by"][0]
        began, zero = r["began_after_first_ms"], r["released_after_first_ms"]
        during = ("NOT within the run" if not r["within_load"] or began is None or zero is None
                  else f"{(first + began - start) / 1000:.2f} to "
                  f"{(first + zero - start) / 1000:.2f} of {r['seconds']:.1f}")
        out.append(
            f"| {r['round']} | {r['fill_s']:.2f} | {r['spread_ms']:,} | "
            f"{ms(r['began_after_first_ms'])} | **{ms(r['released_after_last_ms'])}** | "
            f"{ms(r['released_after_first_ms'])} | {r['polls']} | "
            f"{during} | {r['stream_expired']:,} "
            f"({r['stream_expired_distinct']:,}) | {r['db_expired']:,} "
            f"({r['db_stored_s'] if r['db_stored_s'] is None else round(r['db_stored_s'], 1)}) | "
            f"{m.get('remaining', 0):,} / {m.get('sold', 0):,} / {m.get('expired', 0):,} |")
    return out


def curve_text(data: dict[str, Any]) -> list[str]:
    """The holds left as they went, in the median round (by release time)."""
    runs = sorted((r for r in of(data, "release") if r["released_after_last_ms"] is not None),
                  key=lambda r: r["released_after_last_ms"])
    if not runs:
        return []
    r = runs[len(runs) // 2]
    first, n = r["pay_by"][0], r["released"]
    samples = r["samples"]
    start = max(0, next((i for i, (_, h) in enumerate(samples) if h < n), 1) - 1)
    points = ", ".join(f"{t - first:+,} ms: {h:,}" for t, h in samples[start:])
    return [f"Holds left in round {r['round']} (the median release), by poll, ms after the "
            f"earliest pay_by (the latest was at +{r['spread_ms']:,} ms): {points}.", ""]


def every_run(data: dict[str, Any], part: str) -> list[str]:
    out = ["| activity | round | purchases/s | p50 ms | p99 ms | max ms | statuses | sold | "
           "holds | others' CPU | load before → after | notes |",
           "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|"]
    for r in data["runs"]:
        if r["part"] == part:
            out.append(
                f"| {r['kind']} | {r['round']} | {r['ok_rate']:,.0f} | {r['p50_ms']:.1f} | "
                f"{r['p99_ms']:.1f} | {r['max_ms']:.1f} | {fmt(r['statuses'])} | "
                f"{r['meta'].get('sold', 0):,} | {r['holds']:,} | {r['foreign_cores']:.2f} | "
                f"{r['load'][0]:.2f} → {r['load'][1]:.2f} | {'; '.join(r['notes'])} |")
    return out


def render(data: dict[str, Any]) -> str:
    s = data["settings"]
    found = ratios(data, "window", "plain", "ok_rate")
    ratio = med(found)
    p99s = ratios(data, "release", "steady", "p99_ms")
    releases = [r["released_after_last_ms"] for r in of(data, "release")]
    done = [v for v in releases if v is not None]
    worst = max(done, default=0)
    met = bool(done) and len(done) == len(releases) and worst <= RELEASE_TARGET_MS
    failed = [r for r in data["runs"] if r["failed"]]
    lines = [
        *header("The payment window: the purchase path, and 10,000 holds released under load",
                data, f"; `wrk` {data['wrk']}; Valkey {data['valkey']}"),
        "Setup: one embedded Valkey, AOF on, `appendfsync "
        f"{s['appendfsync']}`; a gateway on it: `wsgi:app` under gunicorn `-c gunicorn.conf.py`,"
        f" {s['workers']} gevent workers, worker_connections {s['worker_connections']}, "
        "production mode, durability `local` (WAITAOF 1 0 in the purchase's one send), the "
        "default per-user rate limit, SQLite orders database (`bench.stack.started`, as `bench "
        "run`); no nginx. Everything on 127.0.0.1, wrk on the same 2 cores. Each wrk run: `wrk "
        f"-t {s['threads']} -c {s['connections']} -d {s['duration']}s --timeout "
        f"{s['timeout']:g}s`, purchases on ONE new activity of {s['total']:,} units, each "
        f"request a distinct user (up to {s['users']:,}) with a signed purchase URL. "
        f"{s['rounds']} rounds of each measurement after a {s['warmup']:g} s warm-up of each "
        "kind; the order swaps every round, ratios are taken within a round, then the median.",
        "",
        "## Purchases with a payment window against without",
        "",
        "Per round: **plain**, a stock activity; **window**, one created with "
        "`\"payment_window\": 3600` (every order held: `lua/purchase.lua` gets the holds, "
        "payments and expired keys and adds a ZADD and an HSET; nothing expires during the "
        "run). No orders worker runs in this part (as `bench run`).",
        "",
        *summary(data, ("plain", "window"), False),
        "",
        f"**window / plain: {ratio:.3f}x** purchases per second (per round: "
        f"{', '.join(f'{v:.3f}' for v in found)}); the target ≥ {RATIO_TARGET}x is "
        f"**{'met' if ratio >= RATIO_TARGET else 'not met'}**. p50 "
        f"{med(ratios(data, 'window', 'plain', 'p50_ms')):.2f}x, p99 "
        f"{med(ratios(data, 'window', 'plain', 'p99_ms')):.2f}x.",
        "",
        f"## {s['holds']:,} holds expiring in the same second, under a purchase load",
        "",
        f"Per round: **release**, an activity of {s['holds']:,} units with a {s['window']} s "
        f"payment window, filled with one hold per unit by the real purchase script "
        "(EVALSHA of `lua/purchase.lua` with its payment keys, pipelined 250 at a time, "
        "distinct users), so every pay_by falls within the fill; wrk starts "
        f"{s['lead']:g} s before the earliest pay_by, on ANOTHER new plain activity (by then "
        "the worker has stored the fill's orders: checked). The "
        "real orders worker (`python -m seckill.worker`, the gateway's environment, "
        f"`SECKILL_EXPIRY_BATCH={s['expiry_batch']}`) runs throughout: its expiry thread "
        "calls `lua/expire.lua` every 250 ms, and it stores every order (the load's too) "
        f"in the database. A thread polls `ZCARD holds` every {data['poll_ms']:g} ms "
        "(with Redis's clock, TIME in the same pipeline, the clock of every pay_by) and "
        "tails the activity's order stream (XREAD) before the worker trims it. **steady**: "
        "the same load, no holds. After each run the harness waits until the worker has "
        "stored every entry of the run's stream. In the release rows, EVALSHA and Redis CPU "
        "include the `expire.lua` calls (the release's Redis cost), and the orders worker's "
        "CPU its storing of the expiries.",
        "",
        *summary(data, ("steady", "release"), True),
        "",
        f"**Release: the last of {s['holds']:,} holds went {ms(med(done) if done else None)} "
        f"ms after the latest pay_by** (median; per round: "
        f"{', '.join(ms(v) for v in releases)}; worst {worst:,} ms); the target (all "
        f"within {RELEASE_TARGET_MS / 1000:g} s of their pay_by) is "
        f"**{'met' if met else 'not met'}**. Purchase p99 during the release / without: "
        f"**{med(p99s):.2f}x** (per round: {', '.join(f'{v:.2f}' for v in p99s)}); "
        f"purchases/s {med(ratios(data, 'release', 'steady', 'ok_rate')):.3f}x, max latency "
        f"{med(ratios(data, 'release', 'steady', 'max_ms')):.2f}x.",
        "",
        *release_table(data),
        "",
        *curve_text(data),
        "## Correctness",
        "",
        (f"**{len(failed)} run(s) failed a check** (see their notes below)." if failed else
         "Every run: units sold (Redis) ≥ its 200s; window runs: `ZCARD holds` = payment "
         "records = units sold, plain runs none, and the stats endpoint agrees. Every "
         f"release: all {s['holds']:,} holds gone, every unit back (remaining = "
         f"{s['holds']:,}, sold 0, expired {s['holds']:,}), no buyer left, every payment "
         "record `expired`, the stream carried one order entry and one `cancel`/`expired` "
         "entry per order (each order once), and the database holds each order once as "
         "`cancelled`/`expired`."),
        "",
        "## Every run",
        "",
        "With a payment window against without:",
        "",
        *every_run(data, "window"),
        "",
        "Release against steady:",
        "",
        *every_run(data, "release"),
    ]
    expiries = data.get("worker_expiry_lines", [])
    lines += ["", "## Logs", "",
              f"Gateway: {len(data['problems'])} error lines (tracebacks, worker timeouts)"
              + (":" if data["problems"] else "."),
              *[f"    {line[:200]}" for line in data["problems"][:5]], "",
              f"Orders worker: {len(data['worker_problems'])} warning or error lines"
              + (":" if data["worker_problems"] else "."),
              *[f"    {line[:200]}" for line in data["worker_problems"][:5]], "",
              f"Its expiry rounds that expired holds ({len(expiries)}, the last 5):", "",
              *[f"    {line[:200]}" for line in expiries[-5:]]]
    return "\n".join(lines) + "\n"
