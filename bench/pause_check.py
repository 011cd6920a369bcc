"""What the operator's pause costs a purchase inside Redis: ``lua/purchase.lua`` as shipped
(its opening HMGET of the meta also reads ``paused``, checked after the window) against the
same script without that field and check, on one embedded Valkey, in alternating rounds.

Each round buys ``--purchases`` units for distinct users on a fresh activity, pipelined
(``--depth`` at a time) so that the server is never idle, and reads the server's own CPU per
call (``INFO commandstats``: ``usec_per_call`` of EVALSHA), which is what a master spends per
purchase whatever the network. The report gives each round and the medians' ratio.

    python -m bench.pause_check --rounds 7 --purchases 20000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

import redis

from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import lua_source
from seckill.store.sale.activity.meta import meta_fields

PAUSE_CHECK = "if meta[paused_at] == '1' then\n  return {'paused'}\nend\n"
PAUSE_FIELD = "meta_fields[paused_at] = 'paused'\n"


def scripts() -> dict[str, str]:
    """The shipped purchase script, and the same without the pause check."""
    shipped = lua_source("purchase")
    if PAUSE_CHECK not in shipped or PAUSE_FIELD not in shipped:
        raise SystemExit("lua/purchase.lua no longer has the pause check this bench removes")
    without = shipped.replace(PAUSE_CHECK, "", 1).replace(PAUSE_FIELD, "", 1)
    return {"with_check": shipped, "without_check": without}


def one_round(client: redis.Redis, sha: str, purchases: int, depth: int) -> float:
    """Buy ``purchases`` units for distinct users; the server's microseconds per EVALSHA."""
    keys = KeySpace(f"bench-{uuid.uuid4().hex[:8]}")
    aid = "pause"
    at = now_ms()
    activity = Activity(id=aid, name="bench", starts_ms=at - 1000, ends_ms=at + 3_600_000,
                        total=purchases, remaining=purchases)
    client.hset(keys.meta(aid), items=meta_fields(activity, at))
    client.config_resetstat()
    for start in range(0, purchases, depth):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(start + depth, purchases)):
            pipe.evalsha(sha, 3, *keys.activity_keys(aid), f"u{n}", 1, aid)
        for reply in pipe.execute():
            if reply[0] != "ok":
                raise SystemExit(f"unexpected reply {reply!r}")
    stats: Any = client.info("commandstats")["cmdstat_evalsha"]
    for key in client.scan_iter(match=f"{keys.prefix}*"):
        client.delete(key)
    return float(stats["usec_per_call"])


def alternate_rounds(variants: dict[str, str], rounds: int, purchases: int,
                     depth: int) -> dict[str, list[float]]:
    """Each script variant's server CPU per purchase (µs), ``rounds`` times, the variants
    alternating within each round, on one embedded Valkey (AOF on) of its own."""
    with tempfile.TemporaryDirectory(prefix="seckill-bench-") as tmp:
        server = EmbeddedValkey(Path(tmp) / "valkey")
        server.start()
        try:
            client = redis.Redis.from_url(server.url, decode_responses=True)
            shas = {name: client.script_load(text) for name, text in variants.items()}
            runs: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(rounds):
                for name, sha in shas.items():
                    runs[name].append(one_round(client, sha, purchases, depth))
            client.close()
        finally:
            server.stop()
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--purchases", type=int, default=20_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--output", default="bench/results/pause_check")
    args = parser.parse_args(argv)
    variants = scripts()
    runs = alternate_rounds(variants, args.rounds, args.purchases, args.depth)
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ratio = medians["with_check"] / medians["without_check"]
    lines = [
        "# The pause check's cost inside Redis",
        "",
        f"`python -m bench.pause_check --rounds {args.rounds} --purchases {args.purchases} "
        f"--depth {args.depth}`: server CPU per purchase (EVALSHA `usec_per_call`), "
        "alternating rounds on one embedded Valkey (AOF on).",
        "",
        "| script | rounds (µs per purchase) | median |",
        "|---|---|---|",
        *(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {medians[name]:.2f} |"
          for name, values in runs.items()),
        "",
        f"with / without: **{ratio:.3f}x**",
    ]
    Path(f"{args.output}.md").write_text("\n".join(lines) + "\n")
    Path(f"{args.output}.json").write_text(json.dumps({"runs": runs, "ratio": ratio}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
