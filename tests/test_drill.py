"""``seckill drill``: the real command on a small crowd (its own seckill up, nginx in front,
every fault), and its invariant checker on crafted evidence that must fail."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

from seckill.ops.drill_checks import NAMES, Evidence, StoredRow, check, failed
from seckill.ops.drill_crowd import Record
from seckill.ops.drill_report import Fault, markdown, svg
from tests.servers import require_nginx
from tests.test_cli import clean_environ

SECKILL = Path(sys.executable).parent / "seckill"


def stats(total: int, remaining: int, sold: int, pending: int = 0) -> dict[str, object]:
    return {"total": total, "remaining": remaining, "sold": sold,
            "orders": {"pending": pending, "confirmed": sold, "cancelled": 0}}


def sound_evidence() -> Evidence:
    records = [
        Record(1.0, "calm", "url", 200, "", "u1", "a"),
        Record(1.1, "calm", "buy", 200, "", "u1", "a", "a-1-000001"),
        Record(2.0, "kill -9 nginx", "url", 200, "", "u2", "a"),
        Record(2.1, "kill -9 nginx", "buy", 502, "bad_gateway", "u2", "a"),
        Record(3.0, "calm", "url", 200, "", "u3", "a"),
        Record(3.1, "calm", "buy", 410, "sold_out", "u3", "a"),
    ]
    stored = {"a": [StoredRow("a-1-000001", "a", "u1", "confirmed"),
                    StoredRow("a-1-000002", "a", "u2", "confirmed")]}
    resolved = {("a", "u2"): {"status": "confirmed", "order_id": "a-1-000002"}}
    return Evidence(records, {"a": stats(2, 0, 2)}, stored, resolved,
                    {"a": (True, '{"differences": {}}')},
                    [("before the stop", {"a": stats(2, 1, 1)})])


def by_name(evidence: Evidence) -> dict[str, bool | None]:
    return {inv.name: inv.ok for inv in check(evidence)}


def test_sound_evidence_passes_every_invariant() -> None:
    assert by_name(sound_evidence()) == dict.fromkeys(NAMES, True)
    assert not failed(check(sound_evidence()))


def test_a_200_missing_from_the_database_fails() -> None:
    evidence = sound_evidence()
    assert evidence.stored is not None
    evidence.stored["a"] = evidence.stored["a"][1:]  # the order answered 200 is not stored
    found = check(evidence)
    assert {i.name: i.ok for i in found}["every 200 stored"] is False
    assert "a-1-000001" in next(i.detail for i in found if i.name == "every 200 stored")
    assert failed(found)
    assert "FAIL" in markdown("drill", [], [Fault("calm", 0.0)], evidence.records, found,
                              evidence.resolved)


def test_an_unknown_outcome_that_went_through_must_be_stored_too() -> None:
    evidence = sound_evidence()
    assert evidence.stored is not None
    evidence.stored["a"] = evidence.stored["a"][:1]
    assert by_name(evidence)["every 200 stored"] is False


def test_counters_that_disagree_fail_at_the_end_or_at_a_snapshot() -> None:
    evidence = sound_evidence()
    evidence.stats["a"] = stats(2, -1, 3)  # sold more than the stock
    assert by_name(evidence)["sold + remaining == total"] is False
    evidence = sound_evidence()
    evidence.snapshots.append(("after the start", {"a": stats(2, -1, 2)}))
    assert by_name(evidence)["sold + remaining == total"] is False
    evidence = sound_evidence()
    evidence.stats["a"] = {}  # the operator API never answered
    assert by_name(evidence)["sold + remaining == total"] is False


def test_a_buyer_twice_pending_left_and_a_dirty_reconcile_fail() -> None:
    evidence = sound_evidence()
    evidence.records.append(Record(4.0, "calm", "buy", 200, "", "u1", "a", "a-1-000009"))
    assert by_name(evidence)["no buyer twice"] is False
    evidence = sound_evidence()
    assert evidence.stored is not None
    evidence.stored["a"].append(StoredRow("a-1-000003", "a", "u1", "confirmed"))
    assert by_name(evidence)["no buyer twice"] is False
    evidence = sound_evidence()
    evidence.stats["a"] = stats(2, 0, 2, pending=1)
    assert by_name(evidence)["nothing left pending"] is False
    evidence = sound_evidence()
    evidence.reconcile = {"a": (False, '{"differences": {"sold": [2, 1]}}')}
    assert by_name(evidence)["reconcile clean"] is False


def test_the_chart_marks_each_fault() -> None:
    evidence = sound_evidence()
    faults = [Fault("calm", 0.0), Fault("kill -9 nginx", 2.0)]
    chart = svg(faults, evidence.records)
    assert chart.startswith("<svg") and "kill -9 nginx" in chart and "polyline" in chart


def test_the_drill_runs_through_the_real_command(tmp_path: Path) -> None:
    """2,000 buyers for 30 s on the single server (the short drill .ci/run relies on): every
    fault, every invariant, exit 0, the report."""
    require_nginx()
    report = tmp_path / "report"
    drill = subprocess.Popen(
        [str(SECKILL), "drill", "--users", "2000", "--duration", "30", "--report",
         str(report)],
        env=clean_environ(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    try:
        output, _ = drill.communicate(timeout=240)
    finally:
        if drill.poll() is None:  # its stack gets SIGTERM when it dies (PDEATHSIG)
            for child in psutil.Process(drill.pid).children(recursive=True):
                child.send_signal(signal.SIGKILL)
            drill.kill()
            drill.wait(30)
    assert drill.returncode == 0, output
    text = (report / "report.md").read_text()
    for name in NAMES:
        assert f"| {name} | PASS |" in text, text
    for step in ("pause", "resume", "kill -9 valkey", "kill -9 gunicorn-1",
                 "kill -9 orders-worker", "kill -9 nginx", "stop and start"):
        assert f"| {step} |" in text, text
    assert (report / "chart.svg").read_text().startswith("<svg")
    assert len((report / "requests.csv").read_text().splitlines()) > 300
    assert "every invariant held" in output
