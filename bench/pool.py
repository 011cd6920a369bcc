"""Pool the drops pairs over several runs: ``python -m bench.pool bench/results/drops-*.json``.

One run's median of 9 rounds moves by about ±10 % from run to run of the same code on a shared
2-core VM (docs/performance.md), more than the 5 % a drops target allows. This takes every
round of every run named, computes each pair's ratio within its round (200s per second, as
``bench/dropsreport.py`` does), and prints each run's median beside the median of all the
rounds together. Only rounds in which both workloads of a pair ran count; warm-ups never do.

Beside the pooled median, a 95 % interval for it from a bootstrap over runs: the runs are drawn
with replacement (as many as were named, 2,000 times, seeded: the same figures every time), their
rounds pooled, the median taken. Runs, not rounds, are drawn because the rounds of one run share
that run's machine (a VM's speed moves between runs more than within one), so rounds drawn
one by one would give an interval too narrow. With few runs the interval is coarse; with one
run it is that run's median alone.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from bench.drops import PAIRS


def ok_rates(path: Path) -> dict[tuple[str, int], float]:
    """(workload, round) -> 200s per second, of one run's JSON."""
    rates = {}
    for run in json.loads(path.read_text())["runs"]:
        result = run["result"]
        if run["round"] > 0 and result["seconds"] > 0:
            rates[run["workload"], run["round"]] = (result["statuses"].get("200", 0)
                                                    / result["seconds"])
    return rates


def ratios(rates: dict[tuple[str, int], float], measured: str, baseline: str) -> list[float]:
    """The pair's ratio in each round where both ran."""
    rounds = sorted({n for _, n in rates})
    return [rates[measured, n] / rates[baseline, n] for n in rounds
            if rates.get((baseline, n)) and (measured, n) in rates]


BOOTSTRAP_DRAWS = 2000


def run_interval(each: list[list[float]], draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the pooled median, runs drawn with replacement
    (``each``: one list of per-round ratios per run; runs without a round are left out)."""
    runs = [found for found in each if found]
    chance = random.Random(0)
    medians = sorted(
        statistics.median([r for found in chance.choices(runs, k=len(runs)) for r in found])
        for _ in range(draws))
    return medians[int(0.025 * (draws - 1))], medians[int(0.975 * (draws - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="the JSON of drops runs")
    args = parser.parse_args(argv)
    runs = {path: ok_rates(path) for path in args.runs}
    print("| pair | " + " | ".join(p.stem for p in runs)
          + " | all rounds (n) | 95 % interval (runs drawn) |")
    print("|---|" + "---:|" * (len(runs) + 2))
    for pair in PAIRS:
        each = [ratios(rates, pair.measured, pair.baseline) for rates in runs.values()]
        pooled = [r for found in each for r in found]
        if not pooled:
            continue
        cells = [f"{statistics.median(found):.2f}" if found else "" for found in each]
        low, high = run_interval(each)
        print(f"| `{pair.measured}` / `{pair.baseline}` | " + " | ".join(cells)
              + f" | **{statistics.median(pooled):.2f}** ({len(pooled)}) | {low:.2f}-{high:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
