"""What one purchase costs Valkey, in instructions: the same on every run, where req/s swing by
a fifth between rounds on a shared 2-core machine.

    python -m bench.script_cost [--purchases 2000] [--workloads purchase,purchase-variant]

Starts an embedded Valkey (``appendfsync always``, as ``seckill up`` runs it) under valgrind's
callgrind, and the gateway's app in this process on it (a SQLite database in a temp folder).
For each workload it creates an open activity, fetches a purchase URL for each of
``--purchases`` distinct users, zeroes the server's counters (``callgrind_control -z``), sends
the purchases through the app (the edge, the script, WAITAOF: every Redis command a purchase
makes), dumps the counters (``callgrind_control -d``) and divides the instructions by the
purchases. ``--warmup`` purchases go first, uncounted: a crowd's buyers hash is past 512
entries, a hash table, where a fresh one is a listpack scanned on every purchase.

Workloads: ``purchase`` (a single-item purchase), ``purchase-variant`` (one variant of a
5-variant activity, request i buys ``v<i mod 5>``), ``purchase-user`` and ``purchase-person``
(``limit_by`` user and person, the same tokens naming a person each); on demand,
``purchase-variant-100`` (one variant of a 100-variant activity, the contract's most).

Needs ``valgrind`` (``apt-get install valgrind``); Valkey runs about 50x slower under it, so the
purchases are few and the answers slow, but the count is exact.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from edge.identity import mint_user_token
from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.web.app import create_app

JWT_SECRET = "script-cost-jwt-secret-0123456789abcdef"
ADMIN_TOKEN = "script-cost-admin-token-0123456789"
CLAIM = "person"
# Workloads buying one variant -> the variants of their activity
VARIANTS = {"purchase-variant": 5, "purchase-variant-100": 100}
DEFAULT = ("purchase", "purchase-variant", "purchase-user", "purchase-person")
WORKLOADS = (*DEFAULT, "purchase-variant-100")  # the last on demand
_TOTALS = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


class CallgrindValkey(EmbeddedValkey):
    """An embedded Valkey run under callgrind, counting from the start (zeroed per workload)."""

    def __init__(self, data_dir: Path, out_file: Path, extra_args: list[str]) -> None:
        super().__init__(data_dir, extra_args=extra_args)
        self.out_file = out_file

    def server_command(self) -> list[str]:
        return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out_file}",
                *super().server_command()]

    def control(self, flag: str) -> None:
        """``callgrind_control <flag> <pid>``: -z zeroes the counters, -d dumps them."""
        assert self.process is not None
        subprocess.run(["callgrind_control", flag, str(self.process.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def instructions(self, keep: Path | None = None) -> int:
        """Dump the counters and return the instructions since the last zeroing (the newest
        dump file's total); ``keep``: copy the dump there."""
        before = set(self.out_file.parent.glob(self.out_file.name + "*"))
        self.control("-d")
        dumps = sorted(set(self.out_file.parent.glob(self.out_file.name + "*")) - before,
                       key=lambda p: p.stat().st_mtime)
        match = _TOTALS.search(dumps[-1].read_text())
        assert match, f"no totals in {dumps[-1]}"
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(dumps[-1], keep)
        return int(match.group(1))


def _iso(delta_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def _activity(client: FlaskClient, aid: str, **fields: Any) -> None:
    answer = client.post("/admin/activities", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                         json={"id": aid, "name": aid, "per_user_limit": 1,
                               "starts_at": _iso(-60), "ends_at": _iso(6 * 3600), **fields})
    assert answer.status_code == 201, answer.get_json()


def _prepare(client: FlaskClient, name: str, n: int) -> list[tuple[str, str, Any]]:
    """Create the workload's activity; (url, token, body) of each of its ``n`` purchases."""
    aid = f"a{WORKLOADS.index(name)}"  # ids of one length: keys and order ids alike
    body_of: Callable[[int], Any] = lambda i: None  # noqa: E731
    if name in VARIANTS:
        count = VARIANTS[name]
        _activity(client, aid, variants=[{"id": f"v{k}", "name": f"v{k}", "total": n}
                                         for k in range(count)])
        body_of = lambda i: {"variant": f"v{i % count}"}  # noqa: E731
    elif name == "purchase-person":
        _activity(client, aid, total=n, limit_by="person")
    else:
        _activity(client, aid, total=n)
    purchases = []
    for i in range(n):
        token = mint_user_token(f"{aid}-u{i}", JWT_SECRET, ttl=6 * 3600,
                                claims={CLAIM: f"{aid}-p{i}"})
        got = client.get(f"/seckill/url?activity={aid}",
                         headers={"Authorization": f"Bearer {token}"})
        assert got.status_code == 200, got.get_json()
        purchases.append((got.get_json()["url"], token, body_of(i)))
    return purchases


def _send(client: FlaskClient, purchases: list[tuple[str, str, Any]]) -> None:
    for url, token, body in purchases:
        answer = client.post(url, headers={"Authorization": f"Bearer {token}"}, json=body)
        assert answer.status_code == 200, answer.get_json()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.script_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--purchases", type=int, default=2000)
    parser.add_argument("--workloads", default=",".join(DEFAULT))
    parser.add_argument("--warmup", type=int, default=600,
                        help="purchases sent before counting (the buyers' and items' hashes "
                        "past 512 entries, as in a crowd: hash tables, not listpacks)")
    parser.add_argument("--valkey-arg", action="append", default=[],
                        help="one more valkey-server argument (repeat it: --valkey-arg=--hz "
                        "--valkey-arg=100)")
    parser.add_argument("--keep", type=Path, help="copy callgrind's dumps here (one per "
                        "workload, in order) for callgrind_annotate")
    args = parser.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    if unknown := set(names) - set(WORKLOADS):
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        parser.error("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="seckill-script-cost-") as tmp:
        folder = Path(tmp)
        server = CallgrindValkey(folder / "valkey", folder / "callgrind.out", args.valkey_arg)
        server.start(timeout=120)
        try:
            app = create_app(Settings.from_env({
                "DATABASE_URL": f"sqlite:///{folder / 'orders.db'}",
                "SECKILL_ENV": "production", "REDIS_URL": server.url,
                "SECKILL_SECRET_KEY": "script-cost-url-key-0123456789abcdef",
                "SECKILL_JWT_SECRET": JWT_SECRET, "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
                "SECKILL_KEY_PREFIX": "cost", "SECKILL_DATA_DIR": str(folder / "data"),
                "SECKILL_USER_RATE": "1000/second", "SECKILL_ADMIN_RATE": "1000/second",
                "SECKILL_STATUS_RATE": "1000/second", "SECKILL_PERSON_CLAIM": CLAIM}))
            client = app.test_client()
            print(f"{'workload':<18} {'Valkey instructions / purchase':>32}")
            for name in names:
                purchases = _prepare(client, name, args.warmup + args.purchases)
                _send(client, purchases[:args.warmup])
                server.control("-z")
                _send(client, purchases[args.warmup:])
                counted = server.instructions(args.keep and args.keep / f"{name}.callgrind")
                print(f"{name:<18} {counted / args.purchases:>32,.0f}", flush=True)
            app.extensions["seckill"].close()
        finally:
            server.stop(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
