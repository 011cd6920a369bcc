"""The shop's identity provider for the tests: signing keys made with ``cryptography``, and a
real HTTP server publishing their public halves as a JWKS on a free loopback port.

    with JwksServer() as idp:
        key = SigningKey.make("RS256")
        idp.publish(key)                       # what GET /jwks.json answers from now on
        token = key.token(idp_claims("alice"))
        idp.requests                           # how many times the set was fetched
        idp.cache_control = "max-age=1"        # the header of the next answers
        idp.stop(); idp.start()                # the provider down, and back on the same port

The gateway's settings for it: :func:`issuer_env`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm, get_default_algorithms

from seckill.ops.stack.ports import free_listen_port

ISSUER = "https://idp.example.test/"
AUDIENCE = "https://seckill.example.test/api"


@dataclasses.dataclass
class SigningKey:
    """A key pair of the provider's: its ``kid``, the algorithm it signs with, the private key."""

    kid: str | None
    alg: str
    private: Any

    @classmethod
    def make(cls, alg: str, kid: str | None = "", bits: int = 2048) -> SigningKey:
        """A fresh key for ``alg`` (RS256/PS256: RSA of ``bits``; ES256: P-256; EdDSA:
        Ed25519); ``kid`` "" makes one up, None leaves it out of the JWK and the tokens."""
        private: Any
        if alg in {"RS256", "PS256"}:
            private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        elif alg == "ES384":
            private = ec.generate_private_key(ec.SECP384R1())
        elif alg == "EdDSA":
            private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(alg)
        return cls(f"{alg.lower()}-{time.monotonic_ns()}" if kid == "" else kid, alg, private)

    def jwk(self, with_alg: bool = True, **extra: Any) -> dict[str, Any]:
        """The public key as the provider publishes it (``extra`` added or overriding)."""
        public = self.private.public_key()
        kind = (RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else
                ECAlgorithm if isinstance(public, ec.EllipticCurvePublicKey) else OKPAlgorithm)
        found: dict[str, Any] = kind.to_jwk(public, as_dict=True)
        found["use"] = "sig"
        if self.kid is not None:
            found["kid"] = self.kid
        if with_alg:
            found["alg"] = self.alg
        return {**found, **extra}

    def token(self, claims: dict[str, Any], alg: str | None = None, **header: Any) -> str:
        """``claims`` signed with this key (``alg``: another algorithm of the same key type);
        the header names this key's ``kid`` unless ``header`` says otherwise."""
        headers = {"kid": self.kid, **header} if self.kid is not None else dict(header)
        return jwt.encode(claims, self.private, algorithm=alg or self.alg,
                          headers={k: v for k, v in headers.items() if v is not None})


def idp_claims(sub: Any = "alice", ttl: int = 600, **extra: Any) -> dict[str, Any]:
    """The claims of a buyer's token from the provider: ``iss``, ``aud``, ``sub``, ``iat``,
    ``exp``; ``extra`` added (a value of ``...`` leaves that claim out)."""
    now = int(time.time())
    found: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now,
                             "exp": now + ttl, **extra}
    return {k: v for k, v in found.items() if v is not ...}


def issuer_env(url: str | None, **extra: str) -> dict[str, str]:
    """The gateway's settings for the provider at ``url`` (its JWKS), ``extra`` added."""
    found = {"SECKILL_JWT_ISSUER": ISSUER, "SECKILL_JWT_AUDIENCE": AUDIENCE,
             "SECKILL_JWT_ALGORITHMS": "RS256,PS256,ES256,EdDSA", **extra}
    if url is not None:
        found["SECKILL_JWT_JWKS_URL"] = url
    return found


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        idp = self.server.idp
        with idp.lock:
            idp.requests += 1
            body, status, cache_control = idp.body(), idp.status, idp.cache_control
        if idp.delay:
            time.sleep(idp.delay)  # a slow provider: the answer takes this long
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if cache_control is not None:
            self.send_header("Cache-Control", cache_control)
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    idp: JwksServer


class JwksServer:
    """The provider's JWKS endpoint (see the module's text)."""

    def __init__(self, cache_control: str | None = "public, max-age=600") -> None:
        self.port = free_listen_port()
        self.cache_control = cache_control
        self.status = 200
        self.lock = threading.Lock()
        self.requests = 0
        self.published: list[dict[str, Any]] = []
        self.raw: bytes | None = None  # answered as it is instead of the keys, when set
        self.delay = 0.0  # seconds each answer waits before it is sent
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/jwks.json"

    def publish(self, *keys: SigningKey | dict[str, Any]) -> None:
        """Answer with these keys from now on (a dict is a JWK as written)."""
        with self.lock:
            self.published = [k if isinstance(k, dict) else k.jwk() for k in keys]
            self.raw = None

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps({"keys": self.published}).encode()

    def start(self) -> None:
        """Serve (again, on the same port)."""
        self._server = _Server(("127.0.0.1", self.port), _Handler)
        self._server.idp = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Down: the port refuses connections."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> JwksServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], claims: dict[str, Any],
              sign: Callable[[bytes], bytes] | None) -> str:
    """A JWT built by hand (what no library would sign): ``sign`` makes the signature of the
    signing input; None leaves it empty."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode())) if sign else ''}"


def signer(key: SigningKey) -> Callable[[bytes], bytes]:
    """What signs a hand-made token with ``key``, by its own algorithm."""
    algorithm = get_default_algorithms()[key.alg]
    return lambda message: algorithm.sign(message, key.private)


def hmac_signer(secret: bytes) -> Callable[[bytes], bytes]:
    """What signs a hand-made token with HMAC-SHA256 under ``secret``."""
    return lambda message: hmac.new(secret, message, hashlib.sha256).digest()
