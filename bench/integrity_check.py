"""What the counters' check costs a purchase inside Redis: ``lua/purchase.lua`` as
shipped (its opening HMGET also reads unlimited, total, sold and held, and the counters are
compared) against the script of before the check (git ``--before``, its includes expanded
from the same commit), on one embedded Valkey, in alternating rounds, each on a fresh
activity written as today's code writes it.

Server CPU per purchase is ``INFO commandstats`` ``usec_per_call`` of EVALSHA, as in
``bench.pause_check``.

    python -m bench.integrity_check --rounds 7 --purchases 20000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from bench.pause_check import alternate_rounds
from seckill.store.plumbing.scripts import lua_source

BEFORE = "e335bfa"  # main before the unlimited flag and the counters' check


def _at(commit: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def source_at(commit: str, name: str, path: str = "lua/{}.lua", depth: int = 0) -> str:
    """``lua/<name>.lua`` at ``commit``, each ``-- @include`` expanded (nested ones too)
    from that commit, as ``seckill.store.plumbing.scripts.lua_source`` expands today's."""
    if depth > 4:
        raise ValueError(f"{name}: includes nested too deep")
    lines = []
    for line in _at(commit, path.format(name)).splitlines():
        if line.startswith("-- @include "):
            part = line.removeprefix("-- @include ").strip()
            line = source_at(commit, part, "lua/include/{}.lua", depth + 1).rstrip()
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--purchases", type=int, default=20_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--output", default="bench/results/integrity_check")
    args = parser.parse_args(argv)
    variants = {"with_check": lua_source("purchase"),
                "before": source_at(args.before, "purchase")}
    runs = alternate_rounds(variants, args.rounds, args.purchases, args.depth)
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ratio = medians["with_check"] / medians["before"]
    lines = [
        "# The counters' check's cost inside Redis",
        "",
        f"`python -m bench.integrity_check --rounds {args.rounds} --purchases "
        f"{args.purchases} --depth {args.depth}`: server CPU per purchase (EVALSHA "
        f"`usec_per_call`), `lua/purchase.lua` now against {args.before}'s, alternating "
        "rounds on one embedded Valkey (AOF on).",
        "",
        "| script | rounds (µs per purchase) | median |",
        "|---|---|---|",
        *(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {medians[name]:.2f} |"
          for name, values in runs.items()),
        "",
        f"with / before: **{ratio:.3f}x**",
    ]
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.output}.md").write_text("\n".join(lines) + "\n")
    Path(f"{args.output}.json").write_text(json.dumps({"runs": runs, "ratio": ratio}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
