"""What one purchase costs the gateway's Python, in instructions: the app's own thread under
valgrind's callgrind, the same on every run.

    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/gw.%p \\
        .venv/bin/python -m bench.gateway_cost [--purchases 500] [--variants 5 | --body]
    grep -m1 '^summary:' /tmp/gw.*.1-01     # the main thread's instructions, over --purchases

(``bench.script_cost`` counts the Valkey side.) Starts an embedded Valkey and the gateway's
app in this process (a SQLite database in a temp folder), creates one open activity, fetches a
purchase URL for each buyer, sends ``--warmup`` purchases uncounted, then zeroes its own
counters (``callgrind_control -z``), sends ``--purchases`` through the app's WSGI callable
(environments built beforehand) and dumps them (``callgrind_control -d``): dump ``.1``, one
file per thread with ``--separate-threads=yes``; ``-01`` is the thread that served them. The
other threads are the background work (the blocks' follower, the sold-out board), counted
against the run's length: under valgrind a second holds fifty times fewer purchases, so their
share there is fifty times what it is in a real sale.

The buyers' tokens are HS256 by default; ``--token rs256|es256`` makes them an identity
provider's (its keys in a JWKS file). Each buyer fetches its purchase URL first, so the
gateway verifies the token there and the purchase finds it remembered; ``--first-sight``
signs the URLs here instead, and the purchase verifies its token.

A single-item purchase without a body by default; ``--body`` sends it ``{"quantity": 1}``;
``--variants N`` buys one variant of an activity with N (request i buys ``v<i mod N>``, body
``{"variant": ...}``), as ``bench run --scenario drops`` does; ``--limit-by user|person``
makes it a ``limit_by`` activity whose buyers' tokens each name a person of their own.

Run it from another checkout (``git worktree add``, with this file copied in: it imports
nothing of ``bench``) to count the code of another commit: the current directory comes first on
``sys.path``, ahead of the venv's editable install.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from werkzeug.test import EnvironBuilder

from edge.identity import mint_user_token
from edge.purchase_url import PurchaseUrlSigner
from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.web.app import create_app

JWT_SECRET = "gateway-cost-jwt-secret-0123456789abcdef"
ADMIN_TOKEN = "gateway-cost-admin-token-0123456789"


CLAIM = "person"  # as bench.drops (this file imports nothing of bench: see above)
URL_KEY = "gateway-cost-url-key-0123456789abcdef"
ISSUER, AUDIENCE = "https://idp.cost.test/", "https://seckill.cost.test/"


class Provider:
    """An identity provider: an RSA 2048 and an EC P-256 key, their JWKS in ``path``."""

    def __init__(self, path: Path) -> None:
        self.keys: dict[str, Any] = {"rs256": rsa.generate_private_key(65537, 2048),
                                     "es256": ec.generate_private_key(ec.SECP256R1())}
        kinds: dict[str, Any] = {"rs256": RSAAlgorithm, "es256": ECAlgorithm}
        path.write_text(json.dumps({"keys": [
            {**kinds[alg].to_jwk(key.public_key(), as_dict=True), "kid": alg,
             "alg": alg.upper(), "use": "sig"} for alg, key in self.keys.items()]}))
        self.path = path

    def settings(self) -> dict[str, str]:
        return {"SECKILL_JWT_JWKS_FILE": str(self.path), "SECKILL_JWT_ISSUER": ISSUER,
                "SECKILL_JWT_AUDIENCE": AUDIENCE, "SECKILL_JWT_ALGORITHMS": "RS256,ES256"}

    def token(self, alg: str, uid: str, claims: dict[str, object]) -> str:
        if alg == "hs256":
            return mint_user_token(uid, JWT_SECRET, claims=claims)
        now = int(time.time())
        return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": uid, "iat": now,
                           "exp": now + 3600, **claims}, self.keys[alg],
                          algorithm=alg.upper(), headers={"kid": alg})


def _iso(delta_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--purchases", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--variants", type=int, default=0, help="0: a single item")
    parser.add_argument("--body", action="store_true", help='a single item, {"quantity": 1}')
    parser.add_argument("--token", choices=["hs256", "rs256", "es256"], default="hs256",
                        help="the buyers' tokens: HS256 (SECKILL_JWT_SECRET), or an identity "
                             "provider's RS256 or ES256 (its keys in a JWKS file)")
    parser.add_argument("--first-sight", action="store_true",
                        help="purchase URLs signed here, not fetched: the purchase is the "
                             "first request with its token, and verifies it")
    parser.add_argument("--limit-by", choices=["user", "person"], default=None,
                        help="a limit_by activity; tokens name a person each in the claim "
                             f"{CLAIM!r} (SECKILL_PERSON_CLAIM)")
    args = parser.parse_args(argv)
    total = args.warmup + args.purchases
    with tempfile.TemporaryDirectory(prefix="seckill-gateway-cost-") as tmp:
        folder = Path(tmp)
        server = EmbeddedValkey(folder / "valkey").start()
        provider = Provider(folder / "jwks.json")
        try:
            app = create_app(Settings.from_env({
                "DATABASE_URL": f"sqlite:///{folder / 'orders.db'}",
                "SECKILL_ENV": "production", "REDIS_URL": server.url,
                "SECKILL_SECRET_KEY": URL_KEY,
                "SECKILL_JWT_SECRET": JWT_SECRET, "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
                "SECKILL_KEY_PREFIX": "cost", "SECKILL_DATA_DIR": str(folder / "data"),
                "SECKILL_USER_RATE": "1000/second", "SECKILL_ADMIN_RATE": "1000/second",
                "SECKILL_STATUS_RATE": "1000/second",
                **provider.settings(),
                **({"SECKILL_PERSON_CLAIM": CLAIM} if args.limit_by else {})}))
            signer = PurchaseUrlSigner([URL_KEY], 3600)
            client = app.test_client()
            stock: dict[str, Any] = {"total": total}
            if args.variants:
                stock = {"variants": [{"id": f"v{j}", "name": f"v{j}", "total": total}
                                      for j in range(args.variants)]}
            if args.limit_by:  # after the variants: with --variants too
                stock["limit_by"] = args.limit_by
            created = client.post("/admin/activities",
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                                  json={"id": "a0", "name": "a0", "per_user_limit": 1,
                                        "starts_at": _iso(-60), "ends_at": _iso(3600),
                                        **stock})
            assert created.status_code == 201, created.get_json()
            environs = []
            for i in range(total):
                claims: dict[str, object] = {CLAIM: f"person-{i}"} if args.limit_by else {}
                token = provider.token(args.token, f"u{i}", claims)
                headers = {"Authorization": f"Bearer {token}"}
                if args.first_sight:
                    url = f"/seckill/a0/{signer.sign('a0', f'u{i}')[0]}/buy"
                else:  # the buyer's URL request: the gateway verifies the token, remembers it
                    got = client.get("/seckill/url?activity=a0", headers=headers)
                    assert got.status_code == 200, got.get_json()
                    url = got.get_json()["url"]
                body: Any = None
                if args.variants:
                    body = {"variant": f"v{i % args.variants}"}
                elif args.body:
                    body = {"quantity": 1}
                environs.append(EnvironBuilder(path=url, method="POST",
                                               headers=list(headers.items()),
                                               json=body).get_environ())

            def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
                assert status.startswith("200"), status
                return None

            for environ in environs[:args.warmup]:
                b"".join(app(environ, start_response))
            pid = str(os.getpid())
            subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
            for environ in environs[args.warmup:]:
                b"".join(app(environ, start_response))
            subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
            app.extensions["seckill"].close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
