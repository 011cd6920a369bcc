"""The drill's report: the timeline (per fault, what buyers saw by status and how long the
stack took to come back), the invariants, as text on the terminal and as Markdown with an SVG
chart (answers per second by status, the faults marked) under ``--report``."""

from __future__ import annotations

import csv
import dataclasses
import html
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from seckill.ops.drill.checks import Invariant, went_through
from seckill.ops.drill.crowd import Record

CHART = "chart.svg"
MARKDOWN = "report.md"
REQUESTS = "requests.csv"


@dataclasses.dataclass
class Fault:
    """One step of the drill's timeline: a fault (or the calm before the first)."""

    name: str
    at: float  # seconds since the drill's start
    back_after: float | None = None  # the child (or the stack) answered again after
    healthy_after: float | None = None  # /healthz answered 200 again after
    note: str = ""


def outcome(record: Record) -> str:
    """A record's status as the report counts it: ``200``, ``410 sold_out``, ``0 timeout``."""
    return f"{record.status} {record.error}".strip()


def _is_error(record: Record) -> bool:
    return record.status == 0 or (record.status >= 500 and record.error != "paused")


def windows(faults: list[Fault], records: list[Record]) -> list[tuple[Fault, list[Record]]]:
    """Each step with the buyers' requests (URL and purchase) made during it."""
    ordered = sorted(faults, key=lambda f: f.at)
    found = []
    for n, fault in enumerate(ordered):
        end = ordered[n + 1].at if n + 1 < len(ordered) else float("inf")
        found.append((fault, [r for r in records
                              if r.endpoint in ("url", "buy") and fault.at <= r.at < end]))
    return found


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def saw(records: list[Record]) -> str:
    """``200 x12, 503 paused x40``: the outcomes, most frequent first."""
    counts = Counter(outcome(r) for r in records)
    return ", ".join(f"{k} x{n}" for k, n in counts.most_common()) or "(no request)"


def timeline_rows(faults: list[Fault], records: list[Record]) -> list[list[str]]:
    """The timeline table: step, at, buyers saw, back after, healthy after, last error."""
    rows = []
    for fault, inside in windows(faults, records):
        errors = [r.at for r in inside if _is_error(r)]
        last = f"+{max(errors) - fault.at:.1f} s" if errors else "-"
        rows.append([fault.name, f"{fault.at:.1f} s", saw(inside), _seconds(fault.back_after),
                     _seconds(fault.healthy_after), last])
    return rows


TIMELINE_HEAD = ["step", "at", "buyers saw (URL + purchase)", "child back after",
                 "healthy after", "last 5xx/timeout"]


def unknown_summary(records: list[Record], resolved: dict[tuple[str, str], dict[str, Any]]
                    ) -> str:
    """How many purchases had an unknown outcome, and how many of those had gone through."""
    unknown = {(r.aid, r.uid) for r in records if r.unknown_outcome()}
    through = sum(1 for key in unknown if went_through(resolved.get(key, {})))
    unanswered = sum(1 for key in unknown if resolved.get(key, {}).get("status") == "unanswered")
    return (f"{len(unknown)} purchases answered 502/503/504 or lost (unknown outcome); asked "
            f"afterwards: {through} had gone through, {len(unknown) - through - unanswered} "
            f"had not" + (f", {unanswered} unanswered" if unanswered else ""))


def _table(head: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def mark(inv: Invariant) -> str:
    """PASS, FAIL or SKIP."""
    return "SKIP" if inv.ok is None else "PASS" if inv.ok else "FAIL"


def markdown(title: str, facts: list[str], faults: list[Fault], records: list[Record],
             invariants: list[Invariant], resolved: dict[tuple[str, str], dict[str, Any]],
             chart: bool = True) -> str:
    """The whole report in Markdown."""
    verdict = "FAILED" if any(i.ok is False for i in invariants) else "passed"
    parts = [f"# {title}: {verdict}", "", *(f"- {fact}" for fact in facts), "",
             "## Timeline", "", _table(TIMELINE_HEAD, timeline_rows(faults, records)), "",
             unknown_summary(records, resolved) + ".", ""]
    notes = [f"- {f.name}: {f.note}" for f in faults if f.note]
    if notes:
        parts += [*notes, ""]
    parts += ["## Invariants", "",
              _table(["invariant", "result", "detail"],
                     [[i.name, mark(i), i.detail] for i in invariants]), ""]
    if chart:
        parts += ["## Answers per second", "", f"![answers per second by status]({CHART})", ""]
    return "\n".join(parts)


def text(faults: list[Fault], records: list[Record], invariants: list[Invariant],
         resolved: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The timeline and the invariants for the terminal."""
    lines = ["Timeline:"]
    for row in timeline_rows(faults, records):
        lines.append(f"  {row[1]:>8}  {row[0]:<24} back {row[3]:>7}  healthy {row[4]:>7}  "
                     f"last error {row[5]:>8}  | {row[2]}")
    lines.append("  " + unknown_summary(records, resolved))
    lines.append("Invariants:")
    lines += [f"  {mark(i)}  {i.name}: {i.detail}" for i in invariants]
    return "\n".join(lines)


# -- the chart ---------------------------------------------------------------------------

COLOURS = {"200": "#2e7d32", "4xx": "#1565c0", "429": "#6a1b9a", "503 paused": "#ef6c00",
           "5xx": "#c62828", "no answer": "#424242"}


def _series(record: Record) -> str:
    if record.status == 200:
        return "200"
    if record.status == 0:
        return "no answer"
    if record.status == 429:
        return "429"
    if record.status == 503 and record.error == "paused":
        return "503 paused"
    return "5xx" if record.status >= 500 else "4xx"


def svg(faults: list[Fault], records: list[Record], width: int = 900, height: int = 320) -> str:
    """Answers per second by status over the drill, one line each, the faults marked."""
    counted = [r for r in records if r.endpoint in ("url", "buy")]
    end = max([r.at for r in counted] + [f.at for f in faults] + [1.0])
    seconds = int(end) + 1
    bins: dict[str, list[int]] = defaultdict(lambda: [0] * seconds)
    for r in counted:
        bins[_series(r)][int(r.at)] += 1
    top = max([max(v) for v in bins.values()] + [1])
    left, right, up, down = 50, 150, 20, 30
    plot_w, plot_h = width - left - right, height - up - down

    def x(t: float) -> float:
        return left + plot_w * t / seconds

    def y(v: float) -> float:
        return up + plot_h * (1 - v / top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<line x1="{left}" y1="{y(0)}" x2="{left + plot_w}" y2="{y(0)}" stroke="#999"/>',
           f'<line x1="{left}" y1="{up}" x2="{left}" y2="{y(0)}" stroke="#999"/>',
           f'<text x="{left - 5}" y="{up + 4}" text-anchor="end">{top}/s</text>',
           f'<text x="{left - 5}" y="{y(0)}" text-anchor="end">0</text>']
    for t in range(0, seconds, max(1, seconds // 10)):
        out.append(f'<text x="{x(t):.1f}" y="{height - 10}" text-anchor="middle">{t}s</text>')
    for n, fault in enumerate(sorted(faults, key=lambda f: f.at)):
        if fault.at <= 0:
            continue
        out.append(f'<line x1="{x(fault.at):.1f}" y1="{up}" x2="{x(fault.at):.1f}" '
                   f'y2="{y(0)}" stroke="#888" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x(fault.at) + 3:.1f}" y="{up + 12 + 12 * (n % 4)}" '
                   f'fill="#555">{html.escape(fault.name)}</text>')
    for row, (name, colour) in enumerate(COLOURS.items()):
        if name not in bins:
            continue
        points = " ".join(f"{x(t + 0.5):.1f},{y(v):.1f}" for t, v in enumerate(bins[name]))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                   f'points="{points}"/>')
        out.append(f'<rect x="{width - right + 15}" y="{up + 16 * row}" width="12" height="3" '
                   f'fill="{colour}"/><text x="{width - right + 32}" y="{up + 16 * row + 5}">'
                   f'{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(folder: Path, report_md: str, faults: list[Fault], records: list[Record]) -> Path:
    """Write ``report.md``, ``chart.svg`` and every request as ``requests.csv``; the
    Markdown's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CHART).write_text(svg(faults, records), encoding="utf-8")
    with (folder / REQUESTS).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([f.name for f in dataclasses.fields(Record)])
        writer.writerows(dataclasses.astuple(r) for r in sorted(records, key=lambda r: r.at))
    path = folder / MARKDOWN
    path.write_text(report_md, encoding="utf-8")
    return path
