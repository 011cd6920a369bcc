"""A smoke run of the load-test harness (``python -m bench run``): seconds, tiny N.

Checks that the harness works end to end (Valkey, the gateway and the hello baseline under
real gunicorn, wrk with pre-minted tokens, the Redis counts, the report files) and that an
open sale hands out exactly its units. The figures themselves are not asserted: benchmarks
are not timed tests. Needs ``wrk`` (Debian/Ubuntu: ``apt-get install wrk``); CI installs it,
so there a missing wrk is a failure, not a skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import REPO_ROOT

# The harness starts real gunicorn processes (and, for shards, a cluster of its own).
pytestmark = pytest.mark.stack

BUYERS = 200
UNITS = 5


def _need_wrk() -> None:
    if shutil.which("wrk") is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("wrk is not installed, and CI must run this smoke test: apt-get install wrk")
    pytest.skip("wrk is not installed: apt-get install wrk (Debian/Ubuntu) to run the smoke")


def test_harness_smoke_open_sale_hands_out_exactly_the_units(tmp_path: Path) -> None:
    _need_wrk()
    command = [
        sys.executable, "-m", "bench", "run",
        "--scenario", "open-sale", "--scenario", "sold-out",
        "--buyers", str(BUYERS), "--units", str(UNITS), "--users", "2000",
        "--duration", "2", "--rounds", "1", "--warmup", "0", "--settle", "0.1",
        "--sale-timeout", "60", "--output-dir", str(tmp_path), "--name", "smoke",
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, f"harness failed:\n{done.stderr[-6000:]}"

    data = json.loads((tmp_path / "smoke.json").read_text(encoding="utf-8"))
    by_workload = {run["workload"]: run for run in data["runs"]}
    assert set(by_workload) == {"hello", "sold-out", "open-sale"}

    sale = by_workload["open-sale"]
    assert not sale["failed"], sale["notes"]
    checks = sale["checks"]
    assert checks["winners"] == UNITS
    assert checks["ok"] == UNITS
    assert checks["sold"] == UNITS
    assert checks["remaining"] == 0
    assert checks["orders"] == UNITS
    assert checks["stats_sold"] == checks["stats_buyers"] == UNITS
    # Every buyer sent exactly once, every one answered: 200 for the units, 410 for the rest.
    result = sale["result"]
    assert result["complete"] and result["answered"] == BUYERS and result["overrun"] == 0
    assert result["statuses"] == {"200": UNITS, "410": BUYERS - UNITS}

    flood = by_workload["sold-out"]
    assert not flood["failed"], flood["notes"]
    assert set(flood["result"]["statuses"]) == {"410"}
    assert flood["result"]["requests"] > 0

    report = (tmp_path / "smoke.md").read_text(encoding="utf-8")
    assert "## Open sale: winners must equal the units" in report
    assert f"| 1 | {BUYERS} | {UNITS} | {UNITS} | {UNITS} | {UNITS} | 0 | {UNITS} |" in report
    assert "sold-out flood ≥ 0.8x the bare hello" in report
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_shards_benchmark_smoke_splits_a_hot_item_over_the_masters(tmp_path: Path) -> None:
    """``python -m bench.shards`` end to end in seconds (its own 3-master cluster, gateway,
    wrk): both kinds run, every 200 is a sale, and the sharded item's calls split over the
    masters within the issue's ±20 % (the spread is the users' crc32, not a timing)."""
    _need_wrk()
    out = tmp_path / "shards"
    command = [sys.executable, "-m", "bench.shards", "--rounds", "1", "--duration", "1",
               "--warmup", "0", "--settle", "0.1", "--users", "20000", "--output", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, f"bench.shards failed:\n{done.stderr[-6000:]}"
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs = {run["kind"]: run for run in data["runs"]}
    assert set(runs) == {"unsharded", "sharded"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["ok"] > 0 and run["sold"] >= run["ok"]
        assert (run["lent"], run["borrowed"], run["claims"]) == (0, 0, 0)
    assert runs["sharded"]["max_deviation_pct"] <= 20
    assert runs["unsharded"]["max_deviation_pct"] > 100  # one master did all of it
    assert "## Where the hot item's calls land" in out.with_suffix(".md").read_text("utf-8")


def test_payments_benchmark_smoke_releases_every_hold_once(tmp_path: Path) -> None:
    """``python -m bench.payments`` end to end in seconds (Valkey, gateway, the real orders
    worker, wrk): 500 holds all expire once under a purchase load, every unit back in Redis
    and every expiry stored in the database; with a window every unit sold is held."""
    _need_wrk()
    out = tmp_path / "payments"
    command = [sys.executable, "-m", "bench.payments", "--rounds", "1", "--duration", "2",
               "--warmup", "0", "--settle", "0.1", "--holds", "500", "--window", "3",
               "--lead", "1", "--users", "20000", "--output", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"bench.payments failed:\n{done.stderr[-6000:]}"
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs = {run["kind"]: run for run in data["runs"]}
    assert set(runs) == {"steady", "release", "plain", "window"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["ok"] > 0 and run["meta"]["sold"] >= run["ok"]
    release = runs["release"]
    assert release["released"] == release["stream_expired_distinct"] == 500
    assert release["db_expired"] == 500 and release["holds_left"] == 0
    assert release["meta_after"] == {"total": 500, "remaining": 500, "sold": 0, "expired": 500}
    assert runs["window"]["holds"] == runs["window"]["meta"]["sold"]
    assert runs["plain"]["holds"] == 0


def test_admission_benchmark_smoke_runs_every_pair(tmp_path: Path) -> None:
    """``python -m bench.admission`` end to end in seconds (Valkey, gateway, hello, seed,
    nginx, wrk): every pair runs, purchases by admitted users are all sales, and each buyer's
    admission ended with their purchase."""
    _need_wrk()
    out = tmp_path / "admission"
    command = [sys.executable, "-m", "bench.admission", "--rounds", "1", "--duration", "1",
               "--warmup", "0", "--settle", "0.1", "--users", "15000", "--output", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"bench.admission failed:\n{done.stderr[-6000:]}"
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs = {run["kind"]: run for run in data["runs"]}
    assert set(runs) == {"state-nginx", "hello", "queue-status", "seed", "admitted", "purchase"}
    for run in runs.values():
        assert not run["failed"] and run["ok"] > 0, run
        assert set(run["statuses"]) == {"200"}, run
    admitted = runs["admitted"]
    assert admitted["admissions_left"] == 15000 - admitted["sold"]
    assert set(data["ratios"]) == {"state-nginx", "queue-status", "admitted"}


def _scenario(folder: Path, scenario: str, *options: str) -> Any:
    """``python -m bench run --scenario <scenario>`` for one short round, its report in
    ``folder`` as ``<scenario>.json`` / ``.md``: the JSON, once it exited 0."""
    command = [sys.executable, "-m", "bench", "run", "--scenario", scenario, "--rounds", "1",
               "--warmup", "0", "--settle", "0.1", "--users", "3000", *options,
               "--output-dir", str(folder), "--name", scenario]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"harness failed:\n{done.stderr[-6000:]}"
    return json.loads((folder / f"{scenario}.json").read_text(encoding="utf-8"))


def test_webhooks_scenario_smoke_delivers_every_order_event(tmp_path: Path) -> None:
    """``python -m bench run --scenario webhooks`` end to end in seconds (Valkey, gateway, the
    real orders worker, the dispatcher, a 204 receiver, wrk): both sides of the webhooks' pair
    run, every unit sold on the shop side is stored and its order.created delivered once,
    and the report has the section with the ratio."""
    _need_wrk()
    data = _scenario(tmp_path, "webhooks", "--duration", "2")
    runs = {run["workload"]: run for run in data["runs"]}
    assert set(runs) == {"purchase", "purchase-shop"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["checks"]["sold"] >= run["checks"]["ok"] > 0
    shop = runs["purchase-shop"]["checks"]
    assert shop["stored"] == shop["events"] == shop["sold"] == shop["delivered"]
    assert shop["failed_deliveries"] == 0
    assert runs["purchase"]["checks"]["delivered"] == 0
    (row,) = data["webhooks"]["rounds"]
    assert row["ratio"] > 0
    report = (tmp_path / "webhooks.md").read_text(encoding="utf-8")
    assert "## Purchases while the webhooks' dispatcher delivers" in report
    assert "python -m bench.webhooks_dispatch" in report


def test_drops_scenario_smoke_runs_every_workload_and_pair(tmp_path: Path) -> None:
    """``python -m bench run --scenario drops`` end to end in seconds: the three gateways
    (today's, "alone" from this checkout, "before" from a worktree: HEAD here, which a clone
    of any depth has), every workload sells what it answered, each pair has its round, and the
    worktree is removed afterwards."""
    _need_wrk()
    data = _scenario(tmp_path, "drops", "--duration", "1", "--before-commit", "HEAD")
    runs = {run["workload"]: run for run in data["runs"]}
    assert set(runs) == {"purchase", "purchase-before", "purchase-alone", "purchase-variant",
                         "purchase-variant-body", "purchase-body", "purchase-user",
                         "purchase-person"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["checks"]["sold"] >= run["checks"]["ok"] > 0
        assert run["checks"]["buyers"] == run["checks"]["sold"]  # one unit per buyer
    pairs = {(t["measured_workload"], t["baseline_workload"]): t
             for t in data["drops"]["targets"]}
    target = pairs["purchase-alone", "purchase-before"]
    assert not target["diagnostic"] and len(target["rounds"]) == 1
    assert pairs["purchase", "purchase-alone"]["diagnostic"]
    assert pairs["purchase-variant-body", "purchase"]["diagnostic"]
    for name in ("purchase-variant", "purchase-variant-body"):  # the query form and the body's
        per_variant = [int(n) for n in runs[name]["checks"]["variant_sold"]]
        assert sum(per_variant) == runs[name]["checks"]["sold"], (name, per_variant)
        assert all(n > 0 for n in per_variant), (name, per_variant)
    report = (tmp_path / "drops.md").read_text(encoding="utf-8")
    for server in ("gateway", "gateway-before", "gateway-alone"):
        assert f"* {server}: 0 error lines" in report
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "list"],
                            capture_output=True, text=True, check=True).stdout
    assert "seckill-bench-before-" not in listed


def test_scrape_benchmark_smoke_scrapes_with_the_token_during_a_flood(tmp_path: Path) -> None:
    """``python -m bench.scrape`` end to end in seconds (Valkey, the gateway, wrk, a scraper
    every 100 ms with the scraper's token): both kinds run, every 200 is a sale, every scrape
    answered 200 (the figures are not asserted)."""
    _need_wrk()
    out = tmp_path / "scrape"
    command = [sys.executable, "-m", "bench.scrape", "--rounds", "1", "--duration", "2",
               "--warmup", "0", "--settle", "0.1", "--activities", "3", "--users", "5000",
               "--output", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, f"bench.scrape failed:\n{done.stderr[-6000:]}"
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs = {run["kind"]: run for run in data["runs"]}
    assert set(runs) == {"scraped", "quiet"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["ok"] > 0 and run["sold"] >= run["ok"]
    scrape = runs["scraped"]["scrape"]
    assert scrape["scrapes"] >= 1 and set(scrape["statuses"]) == {"200"}
    assert "| scraped | quiet |" in out.with_suffix(".md").read_text("utf-8")


def test_tokens_benchmark_smoke_runs_every_workload(tmp_path: Path) -> None:
    """``python -m bench.tokens`` end to end in seconds: the gateway verifying HS256 and an
    identity provider's RS256 and ES256 tokens from a JWKS file, every workload warmed (or
    not) and sold, each pair with its round (the figures are not asserted)."""
    _need_wrk()
    out = tmp_path / "tokens"
    command = [sys.executable, "-m", "bench.tokens", "--rounds", "1", "--duration", "1",
               "--warmup", "0", "--settle", "0.1", "--users", "3000", "--output", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, f"bench.tokens failed:\n{done.stderr[-6000:]}"
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs = {run["workload"]: run for run in data["runs"]}
    assert set(runs) == {"hs256", "rs256", "es256", "hs256-first", "rs256-first", "es256-first"}
    for run in runs.values():
        assert not run["failed"], run["notes"]
        assert run["ok"] > 0 and run["sold"] >= run["ok"] and run["gateway_cpu_ms"] > 0
    assert {(r["measured"], r["baseline"]) for r in data["ratios"]} >= {
        ("rs256", "hs256"), ("es256", "hs256"), ("rs256-first", "hs256-first")}
    assert all(len(r["per_round"]) == 1 for r in data["ratios"])
    assert "| rs256 | hs256 |" in out.with_suffix(".md").read_text("utf-8")
