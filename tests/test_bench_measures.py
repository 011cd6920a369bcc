"""The benchmark's own measures: the CPU a run charges each server (``CpuMeter.spent``) and the
drops pairs pooled over runs (``bench.pool``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.drops import CLAIM, fresh_crowd
from bench.machine import CpuMeter
from bench.pool import main as pool_main
from bench.pool import run_interval
from bench.stack import JWT_SECRET
from bench.workloads import Setup
from edge.identity import verify_user_jwt

# A parent that sleeps while its child burns CPU until told to stop (its stdin closes).
_PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", '''
import sys, threading
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
print("busy", flush=True)
while not done.is_set():
    sum(range(1000))
'''], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "busy\\n"
print("ready", flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


def test_spent_charges_a_root_with_its_descendants_and_nothing_else() -> None:
    """A busy grandchild's CPU is charged to the root that started it (a gunicorn master's
    workers are its children), and an idle root is charged nearly nothing."""
    meter = CpuMeter()
    busy = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); "
                             "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        # Both past their start (a Python's start is CPU too) before the meter starts.
        for proc in (busy, idle):
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        started = meter.start()
        # Wait on the meter itself, never on a sleep: until the child has used 0.5 s of CPU.
        spent = meter.spent(started, {"busy": busy.pid, "idle": idle.pid})
        for _ in range(200):
            if spent["busy"] >= 0.5:
                break
            time.sleep(0.05)  # polling the condition above, at most 10 s in all
            spent = meter.spent(started, {"busy": busy.pid, "idle": idle.pid})
        assert spent["busy"] >= 0.5, spent
        assert spent["idle"] <= 0.05, spent
    finally:
        for proc in (busy, idle):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)
            assert proc.stdout is not None
            proc.stdout.close()


def _run(path: Path, rates: dict[str, list[float]]) -> Path:
    """A drops run's JSON: each workload's 200s per second, round by round (round 0 a
    warm-up, which the pool must leave out)."""
    runs = [{"workload": name, "round": n,
             "result": {"seconds": 1.0, "statuses": {"200": rate}}}
            for name, per_round in rates.items() for n, rate in enumerate(per_round)]
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_pool_takes_each_ratio_within_its_round_then_the_median_of_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _run(tmp_path / "one.json", {"purchase": [1, 100, 100, 100],
                                       "purchase-variant": [9, 90, 95, 100]})
    # Round 3 has no baseline: it counts for neither the run nor the pool.
    two = _run(tmp_path / "two.json", {"purchase": [1, 200, 200],
                                       "purchase-variant": [9, 180, 240, 50]})
    assert pool_main([str(one), str(two)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| `purchase-variant` / `purchase` |"))
    # one: 0.90, 0.95, 1.00 -> 0.95; two: 0.90, 1.20 -> 1.05; all five: 0.95. Drawn twice
    # with replacement, the runs pool to 0.95 (one twice, or one and two) or 1.05 (two twice,
    # a quarter of the draws): the interval's ends.
    assert row == ("| `purchase-variant` / `purchase` | 0.95 | 1.05 | **0.95** (5) "
                   "| 0.95-1.05 |")


def test_the_interval_draws_runs_not_rounds() -> None:
    steady = [[0.9] * 9 for _ in range(5)]
    assert run_interval(steady) == (0.9, 0.9)
    # Two runs that disagree: rounds drawn one by one would pin the median near 0.9, between
    # them; whole runs drawn give either run's level as often as not (a quarter each way).
    low, high = run_interval([[0.8] * 9, [1.0] * 9])
    assert (low, high) == (0.8, 1.0)
    # Runs without a round (the pair never ran in them) are left out, not drawn as empty.
    assert run_interval([[0.9] * 9, []]) == (0.9, 0.9)
    assert run_interval([[0.8, 1.2], [0.9, 1.1, 1.0]]) == run_interval([[0.8, 1.2],
                                                                       [0.9, 1.1, 1.0]])


def test_each_drops_run_gets_a_crowd_no_gateway_has_seen() -> None:
    """Two runs' crowds share no user (nor the users 0..n-1 other scenarios reuse), and each
    token names its user, and its own person when asked."""
    one, two = fresh_crowd(50), fresh_crowd(50, persons=True)
    users = [uid for uid, _ in one + two]
    assert len(set(users)) == 100
    assert not set(users) & {Setup.uid(i) for i in range(100_000)}
    for uid, token in one:
        assert verify_user_jwt(token, JWT_SECRET, person_claim=CLAIM)[::2] == (uid, None)
    persons = {verify_user_jwt(token, JWT_SECRET, person_claim=CLAIM)[2] for _, token in two}
    assert len(persons) == 50 and None not in persons
