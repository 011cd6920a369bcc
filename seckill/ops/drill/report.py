"""The drill's report: the timeline (per fault, what buyers saw by status and how long the
stack took to come back), the invariants, as text on the terminal and as Markdown with an SVG
chart (answers per second by status, the faults marked) under ``--report``."""

from __future__ import annotations

import csv
import dataclasses
import time
from collections import Counter
from pathlib import Path
from typing import Any

from seckill.ops.drill.chart import drawing, to_svg, write_png
from seckill.ops.drill.checks import Invariant, went_through
from seckill.ops.drill.crowd import Record

CHART = "chart.svg"
CHART_PNG = "chart.png"
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
    return record.status == 0 or (record.status >= 500 and not record.refused())


class Stopwatch:
    """Where a run's time went: laps, each named by what it was spent on."""

    def __init__(self) -> None:
        self.started = self._last = time.monotonic()
        self.laps: list[tuple[str, float]] = []

    def lap(self, what: str) -> None:
        """The time since the last lap was spent on ``what``."""
        now = time.monotonic()
        self.laps.append((what, now - self._last))
        self._last = now

    def lines(self) -> list[str]:
        """Each lap, and the whole."""
        total = time.monotonic() - self.started
        return [f"{what}: {took:.1f} s" for what, took in self.laps] + [
            f"in all {total:.1f} s so far (the final stop of the stack follows this report)"]


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
             chart: bool = True, clock: Stopwatch | None = None) -> str:
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
    if clock is not None:
        parts += ["## Where the time went", "",
                  "Longer than `--duration`: the stack starts first, the faults take their "
                  "time to recover, and the checks wait (bounded) for what is still settling.",
                  "", *(f"- {line}" for line in clock.lines()), ""]
    if chart:
        parts += ["## Answers per second", "",
                  f"![answers per second by status]({CHART}) ([PNG]({CHART_PNG}))", ""]
    return "\n".join(parts)


def text(faults: list[Fault], records: list[Record], invariants: list[Invariant],
         resolved: dict[tuple[str, str], dict[str, Any]], clock: Stopwatch | None = None
         ) -> str:
    """The timeline and the invariants for the terminal."""
    lines = ["Timeline:"]
    for row in timeline_rows(faults, records):
        lines.append(f"  {row[1]:>8}  {row[0]:<24} back {row[3]:>7}  healthy {row[4]:>7}  "
                     f"last error {row[5]:>8}  | {row[2]}")
    lines.append("  " + unknown_summary(records, resolved))
    lines.append("Invariants:")
    lines += [f"  {mark(i)}  {i.name}: {i.detail}" for i in invariants]
    if clock is not None:
        lines.append("Where the time went:")
        lines += [f"  {line}" for line in clock.lines()]
    return "\n".join(lines)


# -- the chart ---------------------------------------------------------------------------


def spans(faults: list[Fault]) -> list[tuple[str, float, float]]:
    """Each fault's name, start and recovery (healthy, else back, else its start)."""
    return [(f.name, f.at, f.at + (f.healthy_after or f.back_after or 0.0)) for f in faults]


def svg(faults: list[Fault], records: list[Record], width: int = 960) -> str:
    """Answers per second over the drill (see :mod:`seckill.ops.drill.chart`)."""
    shapes, height = drawing(spans(faults), records, width)
    return to_svg(shapes, width, height)


def write(folder: Path, report_md: str, faults: list[Fault], records: list[Record]) -> Path:
    """Write ``report.md``, ``chart.svg`` (and ``chart.png``) and every request as
    ``requests.csv``; the Markdown's path."""
    folder.mkdir(parents=True, exist_ok=True)
    width = 960
    shapes, height = drawing(spans(faults), records, width)
    (folder / CHART).write_text(to_svg(shapes, width, height), encoding="utf-8")
    write_png(shapes, width, height, folder / CHART_PNG)
    with (folder / REQUESTS).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([f.name for f in dataclasses.fields(Record)])
        writer.writerows(dataclasses.astuple(r) for r in sorted(records, key=lambda r: r.at))
    path = folder / MARKDOWN
    path.write_text(report_md, encoding="utf-8")
    return path
