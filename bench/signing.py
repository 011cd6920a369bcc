"""Purchase-URL tokens: the project's direct HMAC vs itsdangerous, and a user JWT for scale.

    python -m bench.signing [--repeat 7] [--output bench/results/signing.md]

Every variant binds the same activity | user | expiry with HMAC-SHA256 and is first checked to
accept its own token and refuse a tampered one, so only working code is timed. Timing is
``timeit``: each row is run ``--repeat`` times, each time for as many calls as fill ~0.2 s
(``Timer.autorange``); the table shows the best run (the least disturbed, as the ``timeit``
docs advise) and the median. Prints a Markdown report.

Variants:

* ``hmac``: ``edge.purchase_url.PurchaseUrlSigner``, what the gateway uses.
* ``itsdangerous Signer``: ``itsdangerous.Signer(key, salt, digest_method=hashlib.sha256)``
  over the same canonical message; the token is ``<expiry>.<signature>`` as ours is.
* ``itsdangerous URLSafeTimedSerializer``: the library's idiomatic form,
  ``dumps([aid, uid])`` / ``loads(token, max_age=ttl)`` (SHA-256), the payload in the token.
* ``PyJWT HS256 decode``: what identity costs on every user request, for context.

And a buyer's token at its first sight in a process, by algorithm: HS256 with the secret, and
an identity provider's RS256, PS256, ES256 and EdDSA tokens through the gateway's issuer check
(keys from a JWKS file); then the same token once the gateway remembers it.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import itsdangerous
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from bench.machine import describe
from edge.identity import Identity, mint_user_token, user_from_jwt, verify_user_jwt
from edge.issuer import Issuer, unverified_header
from edge.jwks import IssuerKeys
from edge.purchase_url import PurchaseUrlSigner
from seckill.domain import errors

KEY = "bench-url-key-6f1c2a9e4b7d8035a1c4e6f8092b3d5e"
OLD_KEY = "bench-old-url-key-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
JWT_KEY = "bench-jwt-secret-93b1f0c2d4e6a8b0c1d3e5f7a9b2c4d6"
AID = "phone-2026-11"
UID = "user-000123@example.com"
TTL = 60
SALT = "seckill-url"


class HmacTokens:
    """The gateway's signer, as the edge calls it."""

    def __init__(self, keys: list[str]) -> None:
        self.signer = PurchaseUrlSigner(keys, TTL)

    def sign(self) -> str:
        return self.signer.sign(AID, UID)[0]

    def verify(self, token: str) -> bool:
        try:
            self.signer.verify(token, AID, UID)
        except errors.BadSignature:
            return False
        return True


class ItsdangerousSignerTokens:
    """itsdangerous.Signer over the same message; the token carries only expiry + signature.

    ``keys`` oldest first, as itsdangerous wants them: the last signs, all verify (newest
    tried first).
    """

    def __init__(self, keys: list[str]) -> None:
        self.signer = itsdangerous.Signer(keys, salt=SALT, digest_method=hashlib.sha256)

    @staticmethod
    def _message(expires_at: int) -> bytes:
        return f"seckill-url|v1|{AID}|{UID}|{expires_at}".encode()

    def sign(self) -> str:
        expires_at = int(time.time()) + TTL
        signature = self.signer.get_signature(self._message(expires_at)).decode("ascii")
        return f"{expires_at}.{signature}"

    def verify(self, token: str) -> bool:
        stamp, _, signature = token.partition(".")
        if not stamp.isdigit():
            return False
        expires_at = int(stamp)
        if not self.signer.verify_signature(self._message(expires_at), signature.encode()):
            return False
        return time.time() <= expires_at + 5


class ItsdangerousSerializerTokens:
    """The idiomatic itsdangerous form: a timed, URL-safe serializer carrying the payload."""

    def __init__(self, keys: list[str]) -> None:
        self.serializer = itsdangerous.URLSafeTimedSerializer(
            keys, salt=SALT, signer_kwargs={"digest_method": hashlib.sha256}
        )

    def sign(self) -> str:
        return str(self.serializer.dumps([AID, UID]))

    def verify(self, token: str) -> bool:
        try:
            payload = self.serializer.loads(token, max_age=TTL)
        except itsdangerous.BadData:
            return False
        return bool(payload == [AID, UID])


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # sign | verify | sign+verify | jwt
    best_us: float
    median_us: float
    note: str = ""

    @property
    def ops(self) -> float:
        return 1e6 / self.best_us


def measure(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best and median microseconds per call."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    runs = [total / number * 1e6 for total in timer.repeat(repeat=repeat, number=number)]
    return min(runs), statistics.median(runs)


def tamper(token: str) -> str:
    last = token[-2]
    return token[:-2] + ("A" if last != "A" else "B") + token[-1]


def check(name: str, sign: Callable[[], str], verify: Callable[[str], bool]) -> str:
    token = sign()
    if not verify(token):
        raise AssertionError(f"{name}: refuses its own token {token!r}")
    if verify(tamper(token)):
        raise AssertionError(f"{name}: accepts a tampered token")
    return token


def run(repeat: int) -> list[Row]:
    rows: list[Row] = []
    variants: list[tuple[str, HmacTokens | ItsdangerousSignerTokens | ItsdangerousSerializerTokens,
                         HmacTokens | ItsdangerousSignerTokens | ItsdangerousSerializerTokens]] = [
        # (name, one key, two keys with the token signed by the older one)
        ("hmac (PurchaseUrlSigner)", HmacTokens([KEY]), HmacTokens([KEY, OLD_KEY])),
        ("itsdangerous Signer, SHA-256", ItsdangerousSignerTokens([KEY]),
         ItsdangerousSignerTokens([OLD_KEY, KEY])),
        ("itsdangerous URLSafeTimedSerializer, SHA-256", ItsdangerousSerializerTokens([KEY]),
         ItsdangerousSerializerTokens([OLD_KEY, KEY])),
    ]
    for name, one_key, rotated in variants:
        token = check(name, one_key.sign, one_key.verify)
        best, median = measure(one_key.sign, repeat)
        rows.append(Row(name, "sign", best, median, f"token {len(token)} chars"))
        best, median = measure(lambda v=one_key, t=token: v.verify(t), repeat)  # type: ignore[misc]
        rows.append(Row(name, "verify", best, median))
        best, median = measure(lambda v=one_key: v.verify(v.sign()), repeat)  # type: ignore[misc]
        rows.append(Row(name, "sign+verify", best, median))

        # Key rotation: a token signed with the older key, checked by a gateway holding both.
        old_signer = type(one_key)([OLD_KEY])
        old_token = old_signer.sign()
        if not rotated.verify(old_token):
            raise AssertionError(f"{name}: the rotated signer refuses an old-key token")
        best, median = measure(lambda v=rotated, t=old_token: v.verify(t), repeat)  # type: ignore[misc]
        rows.append(Row(name, "verify, old key of 2", best, median))

    user_token = mint_user_token(UID, JWT_KEY, ttl=3600)
    best, median = measure(
        lambda: jwt.decode(user_token, JWT_KEY, algorithms=["HS256"],
                           options={"require": ["exp", "sub"]}),
        repeat,
    )
    rows.append(Row("PyJWT HS256 decode", "jwt", best, median, f"token {len(user_token)} chars"))
    best, median = measure(lambda: user_from_jwt(user_token, JWT_KEY), repeat)
    rows.append(Row("edge.identity.user_from_jwt (decode + sub check)", "jwt", best, median))
    rows += first_sight(repeat)
    best, median = measure(lambda: hmac.compare_digest(b"x" * 43, b"x" * 43), repeat)
    rows.append(Row("hmac.compare_digest, 43 bytes (floor)", "floor", best, median))
    return rows


def first_sight(repeat: int) -> list[Row]:
    """What a buyer's token costs the first time a process sees it, by algorithm (HS256 with
    the secret; an identity provider's RS256, PS256, ES256, EdDSA through the gateway's own
    issuer check, keys from a JWKS file), and once it is remembered."""
    private: dict[str, Any] = {"RS256": rsa.generate_private_key(65537, 2048),
               "PS256": rsa.generate_private_key(65537, 2048),
               "ES256": ec.generate_private_key(ec.SECP256R1()),
               "EdDSA": ed25519.Ed25519PrivateKey.generate()}
    kinds: dict[str, Any] = {"RS256": RSAAlgorithm, "PS256": RSAAlgorithm,
                             "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}
    jwks = {"keys": [{**kinds[alg].to_jwk(key.public_key(), as_dict=True), "kid": alg,
                      "alg": alg, "use": "sig"} for alg, key in private.items()]}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="seckill-bench-jwks-") as folder:
        path = Path(folder) / "jwks.json"
        path.write_text(json.dumps(jwks), encoding="utf-8")
        keys = IssuerKeys(None, path, private)
        issuer = Issuer(keys, "https://idp.bench.test/", ("https://seckill.bench.test/",),
                        frozenset(private))
        identity = Identity(JWT_KEY, "bench-admin-token-0123456789", 5, issuer=issuer)
        now = int(time.time())
        claims = {"iss": issuer.issuer, "aud": issuer.audience[0], "sub": UID, "iat": now,
                  "exp": now + 3600}
        hs256 = mint_user_token(UID, JWT_KEY, ttl=3600)
        best, median = measure(lambda: verify_user_jwt(hs256, JWT_KEY), repeat)
        rows.append(Row("first sight: HS256 (edge.identity.verify_user_jwt)", "jwt", best,
                        median, f"token {len(hs256)} chars"))
        for alg, key in private.items():
            token = jwt.encode(claims, key, algorithm=alg, headers={"kid": alg})
            if identity.user(token) != UID:
                raise AssertionError(f"{alg}: the gateway refuses its own provider's token")
            best, median = measure(
                lambda t=token: issuer.verify(t, unverified_header(t)), repeat)  # type: ignore[misc]
            rows.append(Row(f"first sight: {alg} (edge.issuer.Issuer.verify)", "jwt", best,
                            median, f"token {len(token)} chars"))
            best, median = measure(lambda t=token: identity.verified(t), repeat)  # type: ignore[misc]
            rows.append(Row(f"remembered: {alg} (edge.identity.Identity.verified)", "jwt", best,
                            median))
        keys.close()
    return rows


def report(rows: list[Row], repeat: int, command: str) -> str:
    baseline = {row.kind: row for row in rows if row.name.startswith("hmac (")}
    lines = [
        "# Purchase-URL token signing: hmac vs itsdangerous",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {describe('itsdangerous', 'pyjwt')}",
        "",
        f"Method: `timeit`, {repeat} repeats of ~0.2 s each (`Timer.autorange`); µs/op and ops/s",
        "from the best repeat, the median repeat alongside. One thread, one process.",
        "",
        "| variant | operation | µs/op (best) | µs/op (median) | ops/s (best) | vs hmac | note |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        base = baseline.get(row.kind)
        ratio = f"{row.best_us / base.best_us:.2f}" if base is not None else ""
        if row.kind == "jwt":
            ratio = f"{row.best_us / baseline['verify'].best_us:.2f} (vs verify)"
        lines.append(
            f"| {row.name} | {row.kind} | {row.best_us:.2f} | {row.median_us:.2f} | "
            f"{row.ops:,.0f} | {ratio} | {row.note} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.signing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats per row")
    parser.add_argument("--output", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    command = "python -m bench.signing" + (f" --repeat {args.repeat}" if args.repeat != 7 else "")
    text = report(run(args.repeat), args.repeat, command)
    sys.stdout.write(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
