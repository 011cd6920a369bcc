"""``seckill drill``: the real command on a small crowd (its own seckill up, nginx in front,
every fault), and its invariant checker on crafted evidence that must fail."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

from seckill.ops.drill.checks import NAMES, Evidence, StoredRow, check, failed
from seckill.ops.drill.crowd import Record
from seckill.ops.drill.plan import plan_activities, plan_buyers
from seckill.ops.drill.report import Fault, markdown, svg
from seckill.ops.drill.webhooks import NAME as EVENTS
from tests.support.cli import clean_environ
from tests.support.servers import require_nginx

SECKILL = Path(sys.executable).parent / "seckill"
VARIANT, PERSON = NAMES[5], NAMES[6]


def stats(total: int, remaining: int, sold: int, pending: int = 0) -> dict[str, object]:
    return {"total": total, "remaining": remaining, "sold": sold,
            "orders": {"pending": pending, "confirmed": sold, "cancelled": 0}}


def drop_stats(s_sold: int = 1, m_sold: int = 2) -> dict[str, object]:
    """The drop "d" (variants s and m, 2 units each) with s_sold / m_sold units sold."""
    sold = s_sold + m_sold
    return {**stats(4, 4 - sold, sold), "variants": {
        "s": {"total": 2, "remaining": 2 - s_sold, "sold": s_sold},
        "m": {"total": 2, "remaining": 2 - m_sold, "sold": m_sold}}}


DROP = {"id": "d", "name": "drop", "variants": [{"id": "s", "name": "S", "total": 2},
                                                 {"id": "m", "name": "M", "total": 2}],
        "per_user_limit": 2, "limit_by": "person"}


def sound_evidence() -> Evidence:
    """A plain activity "a", and the drop "d": variants, limited by person (two units), where
    person p1 bought with account u4 and was refused on their second account u5."""
    records = [
        Record(1.0, "calm", "url", 200, "", "u1", "a"),
        Record(1.1, "calm", "buy", 200, "", "u1", "a", "a-1-000001", 1),
        Record(2.0, "kill -9 nginx", "url", 200, "", "u2", "a"),
        Record(2.1, "kill -9 nginx", "buy", 502, "bad_gateway", "u2", "a"),
        Record(3.0, "calm", "url", 200, "", "u3", "a"),
        Record(3.1, "calm", "buy", 410, "sold_out", "u3", "a"),
        Record(1.2, "calm", "buy", 200, "", "u4", "d", "d-1-000001", 2, "p1", "s:1,m:1"),
        Record(1.2, "calm", "buy", 409, "already_purchased", "u5", "d", "d-1-000001", 0, "p1"),
        Record(1.3, "calm", "buy", 200, "", "u6", "d", "d-1-000002", 1, "p2", "m:1"),
        Record(1.4, "calm", "buy", 409, "variant_sold_out", "u7", "d", "", 0, "p3"),
    ]
    stored = {"a": [StoredRow("a-1-000001", "a", "u1", "confirmed"),
                    StoredRow("a-1-000002", "a", "u2", "confirmed")],
              "d": [StoredRow("d-1-000001", "d", "p:key1", "confirmed", 2, "u4",
                              (("s", 1), ("m", 1))),
                    StoredRow("d-1-000002", "d", "p:key2", "confirmed", 1, "u6", (("m", 1),))]}
    resolved = {("a", "u2"): {"status": "confirmed", "order_id": "a-1-000002"}}
    return Evidence(records, {"a": stats(2, 0, 2), "d": drop_stats()}, stored, resolved,
                    {"a": (True, '{"differences": {}}'), "d": (True, '{"differences": {}}')},
                    [("before the stop", {"a": stats(2, 1, 1), "d": drop_stats(1, 1)})],
                    activities={"a": {"id": "a", "total": 2}, "d": DROP},
                    variant_books={"d": (drop_stats(), {"s": 1, "m": 2})})


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


def test_a_variant_whose_counters_disagree_fails() -> None:
    """Per variant: sold + remaining == total at the end and at each snapshot, the variants
    adding up to the activity, each variant's sold == its live stored units, and no variant
    answered 200 for more units than it has (no payment window there)."""
    found = check(sound_evidence())
    assert "d: s 1/2, m 2/2" in next(i.detail for i in found if i.name == VARIANT)
    evidence = sound_evidence()
    variants = evidence.stats["d"]["variants"]
    variants["m"] = {"total": 2, "remaining": 1, "sold": 2}  # its activity's counters agree
    found = check(evidence)
    assert {i.name: i.ok for i in found}[VARIANT] is False
    assert "d/m: sold 2 + remaining 1 != total 2" in next(
        i.detail for i in found if i.name == VARIANT)
    assert by_name(evidence)["sold + remaining == total"] is True  # only per variant it shows
    evidence = sound_evidence()
    evidence.snapshots.append(("after the start", {"a": stats(2, 0, 2), "d": drop_stats()}))
    evidence.snapshots[-1][1]["d"]["variants"]["s"]["remaining"] = 0
    assert by_name(evidence)[VARIANT] is False
    evidence = sound_evidence()
    evidence.stats["d"] = stats(4, 1, 3)  # the stats forgot the variants
    assert by_name(evidence)[VARIANT] is False
    evidence = sound_evidence()
    # The variants add up to 3 sold, the activity says 2, in the reading taken once still (the
    # stats read the two in separate Redis calls: only that reading is held to it).
    evidence.variant_books = {"d": ({**drop_stats(), "sold": 2, "remaining": 2},
                                    {"s": 1, "m": 2})}
    assert by_name(evidence)[VARIANT] is False
    evidence = sound_evidence()
    evidence.stats["d"] = {**drop_stats(), "sold": 2, "remaining": 2}  # under traffic: moves
    assert by_name(evidence)[VARIANT] is True
    evidence.variant_books = None  # without the database, the end's reading is held to it
    assert by_name(evidence)[VARIANT] is False
    evidence = sound_evidence()
    evidence.variant_books = {"d": (drop_stats(), {"s": 1, "m": 1})}  # a unit not stored
    found = check(evidence)
    assert "d/m: sold 2 in Redis, 1 units" in next(i.detail for i in found if i.name == VARIANT)
    evidence = sound_evidence()
    evidence.records.append(Record(1.5, "calm", "buy", 200, "", "u8", "d", "d-1-000003", 2,
                                   "p4", "s:2"))  # s had 2 units: 3 answered
    assert by_name(evidence)[VARIANT] is False


def test_a_person_over_the_limit_fails() -> None:
    """Per person: one order and per_user_limit units across all of a person's accounts, as
    the crowd saw it and as the database holds it."""
    evidence = sound_evidence()
    evidence.records.append(Record(1.5, "calm", "buy", 200, "", "u5", "d", "d-1-000003", 1,
                                   "p1", "m:1"))  # p1's second account bought too
    found = check(evidence)
    assert {i.name: i.ok for i in found}[PERSON] is False
    assert "person p1" in next(i.detail for i in found if i.name == PERSON)
    assert by_name(evidence)["no buyer twice"] is True  # two accounts: each bought once
    evidence = sound_evidence()
    evidence.records[6] = Record(1.2, "calm", "buy", 200, "", "u4", "d", "d-1-000001", 3,
                                 "p1", "s:2,m:1")  # one order, three units (limit 2)
    assert by_name(evidence)[PERSON] is False
    evidence = sound_evidence()
    assert evidence.stored is not None
    # The database holds a second live order of p1, bought with u5 (the crowd saw a 409).
    evidence.stored["d"].append(StoredRow("d-1-000004", "d", "p:key1x", "confirmed", 1, "u5",
                                          (("s", 1),)))
    found = check(evidence)
    assert {i.name: i.ok for i in found}[PERSON] is False
    assert "p1 holds 2 stored orders" in next(i.detail for i in found if i.name == PERSON)
    evidence = sound_evidence()
    assert evidence.stored is not None
    evidence.stored["d"][1] = StoredRow("d-1-000002", "d", "p2", "confirmed", 1, "u6",
                                        (("m", 1),))  # the raw person id kept
    assert by_name(evidence)[PERSON] is False
    evidence = sound_evidence()
    evidence.activities = {"a": {"id": "a", "total": 2}}  # no drop: nothing to check there
    assert by_name(evidence)[PERSON] is None and by_name(evidence)[VARIANT] is None
    assert not failed(check(evidence))


def test_the_crowd_names_variants_in_bodies_and_in_queries() -> None:
    """The drill's variant buyers use both forms of the purchase's terms: the body and the
    query (``?variant=<vid>``, as the sale page sends it), never both at once."""
    activities = plan_activities("r", 400, 30.0, False)
    buyers = plan_buyers("r", 400, activities)
    for letter in "bd":
        mine = [b for b in buyers if b.aid == f"drill-r-{letter}"]
        in_query = [b for b in mine if b.query]
        assert in_query and len(in_query) < len(mine), letter
        assert all(b.body is None and b.query.startswith("?variant=") for b in in_query)
        assert all(b.body for b in mine if not b.query), letter


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
    for name in (*NAMES, EVENTS):
        assert f"| {name} | PASS |" in text, text
    for step in ("pause", "resume", "kill -9 valkey", "kill -9 gunicorn-1",
                 "kill -9 orders-worker", "kill -9 webhooks", "kill -9 nginx",
                 "stop and start"):
        assert f"| {step} |" in text, text
    assert (report / "chart.svg").read_text().startswith("<svg")
    assert len((report / "requests.csv").read_text().splitlines()) > 300
    assert "every invariant held" in output
