"""The shop's identity provider's public keys (its JWKS), kept fresh in this process.

An identity provider (Auth0, Okta, Keycloak, Cognito, ...) signs a buyer's token with its private
key and publishes the public keys as a JSON Web Key Set; the gateway fetches that set
(``SECKILL_JWT_JWKS_URL``) and/or reads it from a file (``SECKILL_JWT_JWKS_FILE``; both: the
union) and keeps its keys by ``kid``:

* fetched again when the answer's ``Cache-Control: max-age`` runs out, within
  ``refresh_min``..``REFRESH_MAX`` seconds (``DEFAULT_FRESH`` when it says nothing); the file
  read again when it changes (``FILE_POLL``);
* a token naming a ``kid`` this process does not know makes it fetch at once, at most once every
  ``cooldown`` seconds and one fetch at a time (the others wait for that one): a flood of
  made-up kids costs one fetch, not one each;
* a fetch that fails keeps the last good set and is tried again after a growing pause; the last
  good set is also saved where a restarted gateway finds it (:class:`KeyCopy`: Redis), so that
  a restart while the provider is down still verifies;
* a key that leaves the set stops verifying at once, for tokens already remembered too
  (:meth:`IssuerKeys.holds`).

A key verifies only the algorithms its type fits (:data:`FITS`), narrowed by its own ``alg``
and by ``SECKILL_JWT_ALGORITHMS``: never an HS* algorithm, never ``none``. A JWK for
encryption (``use`` other than ``sig``), with private parts, an RSA key under 2048 bits or a
curve other than P-256 / Ed25519 is left out of the set.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Iterable
from email.message import Message
from pathlib import Path
from typing import IO, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

log = logging.getLogger(__name__)

# The algorithms a JWKS key may verify, by the key's type and curve; nothing else ever.
FITS: dict[tuple[str, str | None], frozenset[str]] = {
    ("RSA", None): frozenset({"RS256", "PS256"}),
    ("EC", "P-256"): frozenset({"ES256"}),
    ("OKP", "Ed25519"): frozenset({"EdDSA"}),
}
ALGORITHMS = frozenset().union(*FITS.values())
MIN_RSA_BITS = 2048  # RFC 7518 section 3.3
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
PublicKey = RSAPublicKey | EllipticCurvePublicKey | Ed25519PublicKey

DEFAULT_FRESH = 300.0  # seconds a set is fresh when its answer names no max-age
REFRESH_MIN = 60.0  # the default floor of a set's freshness (SECKILL_JWT_JWKS_REFRESH_MIN)
REFRESH_MAX = 86_400.0  # the ceiling: a set is fetched at least daily, whatever it says
COOLDOWN = 5.0  # the shortest pause between two fetches a kid caused
FILE_POLL = 1.0  # how often the file's modification time is looked at
FETCH_TIMEOUT = 3.0  # seconds a fetch may wait to connect, and for each read
FIRST_WAIT = FETCH_TIMEOUT + 1.0  # seconds the first token waits for the first reading
MAX_DOCUMENT = 256 * 1024  # a JWKS is a few KiB; a provider answering megabytes is broken
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.IGNORECASE)


class KeySetError(ValueError):
    """A document that is no usable JWKS (not JSON, no ``keys`` list, not one usable key)."""


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class IssuerKey:
    """One public key of the set: its ``kid``, the algorithms it may verify and the key.

    Compared by identity: a key that stays in the set across refreshes stays this object
    (:class:`IssuerKeys` reuses it), so a remembered token knows its key is still there."""

    kid: str | None
    algorithms: frozenset[str]
    public: PublicKey
    jwk: str  # the JWK as published, canonical JSON: what says two readings are the same key


def key_of(jwk: object, allowed: frozenset[str]) -> IssuerKey | None:
    """The verifying key a JWK describes for the ``allowed`` algorithms, or None when it is
    not one (see the module's text)."""
    if not isinstance(jwk, dict) or PRIVATE_MEMBERS & jwk.keys():
        return None
    kid, use, declared = jwk.get("kid"), jwk.get("use", "sig"), jwk.get("alg")
    ops = jwk.get("key_ops")
    if use != "sig" or (ops is not None and (not isinstance(ops, list) or "verify" not in ops)):
        return None
    if kid is not None and not isinstance(kid, str):
        return None
    curve = jwk.get("crv") if jwk.get("kty") != "RSA" else None
    fits = FITS.get((str(jwk.get("kty")), curve if isinstance(curve, str) else None))
    if fits is None or (declared is not None and declared not in fits):
        return None
    algorithms = (fits if declared is None else frozenset({declared})) & allowed
    if not algorithms:
        return None
    try:
        public = jwt.PyJWK(jwk, algorithm=min(algorithms)).key
    except (jwt.PyJWTError, ValueError, TypeError):
        return None
    if not _fits_its_type(public):
        return None
    return IssuerKey(kid, algorithms, public, json.dumps(jwk, sort_keys=True))


def _fits_its_type(public: object) -> bool:
    if isinstance(public, RSAPublicKey):
        return public.key_size >= MIN_RSA_BITS
    if isinstance(public, EllipticCurvePublicKey):
        return isinstance(public.curve, SECP256R1)
    return isinstance(public, Ed25519PublicKey)


def parse_key_set(document: str | bytes, allowed: frozenset[str]) -> list[IssuerKey]:
    """The usable keys of a JWKS document; KeySetError when it is not a JWKS or has none."""
    try:
        found = json.loads(document)
    except (ValueError, RecursionError):
        raise KeySetError("not JSON") from None
    if not isinstance(found, dict) or not isinstance(found.get("keys"), list):
        raise KeySetError("not a JWKS: no \"keys\" list")
    keys = [key for key in (key_of(jwk, allowed) for jwk in found["keys"]) if key is not None]
    if not keys:
        # Taken for a broken answer, not for "revoke everything": the last good set stays.
        raise KeySetError(f"no usable key among {len(found['keys'])} (algorithms "
                          f"{', '.join(sorted(allowed))}; use sig; RSA >= {MIN_RSA_BITS} bits, "
                          "EC P-256, OKP Ed25519; no private parts)")
    return keys


def freshness(cache_control: str | None, age: str | None, low: float,
              high: float = REFRESH_MAX) -> float:
    """Seconds a fetched set stays fresh: its ``Cache-Control`` max-age less its ``Age`` (a
    cache in front of the provider), ``DEFAULT_FRESH`` when it names none, always within
    ``low``..``high`` (``no-cache`` and ``no-store`` mean ``low``: a provider saying "ask every
    time" gets asked once per ``low``)."""
    seconds = DEFAULT_FRESH
    text = cache_control or ""
    found = _MAX_AGE.search(text)
    if re.search(r"no-cache|no-store", text, re.IGNORECASE):
        seconds = 0.0
    elif found is not None:
        seconds = float(found.group(1)) - (float(age) if age and age.isdigit() else 0.0)
    return min(max(seconds, low), high)


class KeyCopy(Protocol):
    """Where the last good set of a URL is kept for every instance and a restarted one."""

    def load(self, source: str) -> str | None:
        """The document last saved for ``source``; None when there is none."""

    def save(self, source: str, document: str) -> None:
        """Keep ``document`` as the last good set of ``source``."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Snapshot:
    """The set in force: replaced whole, so a request reads one set or the one before."""

    by_kid: dict[str | None, tuple[IssuerKey, ...]]
    keys: frozenset[IssuerKey]

    @classmethod
    def of(cls, keys: Iterable[IssuerKey]) -> _Snapshot:
        by_kid: dict[str | None, tuple[IssuerKey, ...]] = {}
        for key in keys:
            by_kid[key.kid] = (*by_kid.get(key.kid, ()), key)
        return cls(by_kid, frozenset(k for found in by_kid.values() for k in found))

    def pick(self, kid: str | None, alg: str) -> IssuerKey | None:
        if kid is None:  # accepted only when exactly one key of the set fits the algorithm
            fitting = [key for key in self.keys if alg in key.algorithms]
            return fitting[0] if len(fitting) == 1 else None
        for key in self.by_kid.get(kid, ()):
            if alg in key.algorithms:
                return key
        return None


class IssuerKeys:
    """The issuer's keys as this process holds them, and the thread that keeps them fresh."""

    def __init__(self, url: str | None, file: Path | None, algorithms: Iterable[str],
                 copy: KeyCopy | None = None, refresh_min: float = REFRESH_MIN,
                 timeout: float = FETCH_TIMEOUT) -> None:
        self.url, self.file, self.copy = url, file, copy
        self.allowed = frozenset(algorithms) & ALGORITHMS
        self.refresh_min, self.timeout = refresh_min, timeout
        self.cooldown = min(COOLDOWN, refresh_min)
        self.fetches = 0  # fetches tried by this process (its numbers, for tests and logs)
        self._snapshot = _Snapshot.of(())
        self._from_url: list[IssuerKey] = []
        self._from_file: list[IssuerKey] = []
        self._known: dict[str, IssuerKey] = {}  # canonical JWK -> its key object, kept
        self._saved: str | None = None  # the document this process last saved or loaded
        self._file_seen: tuple[int, int] | None = None  # (mtime_ns, size) last read
        self._url_due = 0.0  # monotonic time the set is fetched again
        self._failures = 0  # fetches failed in a row (the pause grows with them)
        self._last_fetch = -COOLDOWN  # monotonic time the last fetch started
        self._fetching = threading.Lock()  # one fetch at a time
        self._start_lock = threading.Lock()
        self._first_round = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what a token's check asks ------------------------------------------------------------

    def find(self, kid: str | None, alg: str) -> IssuerKey | None:
        """The key of the set named ``kid`` that verifies ``alg`` (``kid`` None: the one key
        that fits ``alg``, if there is exactly one); a ``kid`` this process does not know makes
        it fetch the set again first (:meth:`refetch_for_unknown`)."""
        if not self._first_round.is_set():  # a token at start waits for the first reading
            self.follow()
        snapshot = self._snapshot
        key = snapshot.pick(kid, alg)
        if key is None and kid is not None and kid not in snapshot.by_kid:
            self.refetch_for_unknown()
            key = self._snapshot.pick(kid, alg)
        return key

    def holds(self, key: IssuerKey) -> bool:
        """Whether ``key`` is still in the set (a token it verified may still be believed)."""
        return key in self._snapshot.keys

    def cooling_down(self) -> bool:
        """Whether a fetch started less than ``cooldown`` seconds ago: an unknown ``kid`` now
        is refused without fetching again."""
        return time.monotonic() - self._last_fetch < self.cooldown

    @property
    def kids(self) -> list[str | None]:
        """The ``kid`` of every key in force (for logs and tests)."""
        return sorted(self._snapshot.by_kid, key=str)

    # -- keeping the set fresh ------------------------------------------------------------------

    def follow(self, wait: float = FIRST_WAIT) -> None:
        """Start the thread that keeps the set fresh (once; not after close) and wait, at most
        ``wait`` seconds, for its first reading."""
        if self._stop.is_set():
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="seckill-jwks",
                                                daemon=True)
                self._thread.start()
        self._first_round.wait(wait)

    def refetch_for_unknown(self) -> None:
        """Fetch the set again for a ``kid`` not in it: at once, unless a fetch started less
        than ``cooldown`` seconds ago; when one is under way, wait for its answer instead."""
        if not self._fetching.acquire(blocking=False):
            if self._fetching.acquire(timeout=self.timeout + 1.0):
                self._fetching.release()
            return
        try:
            if not self.cooling_down():
                self._refresh_url()
                self._read_file()
        finally:
            self._fetching.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pause = self.refresh()
            except Exception:  # a bug here must not end the thread: the set would go stale
                log.exception("the issuer's keys were not refreshed")
                pause = self.cooldown
            self._first_round.set()
            self._stop.wait(pause)

    def refresh(self) -> float:
        """One round: fetch the set if it is due, read the file if it changed; the seconds
        until the next round is due."""
        if self.url is not None and time.monotonic() >= self._url_due:
            with self._fetching:
                if time.monotonic() >= self._url_due:  # not done meanwhile by a request
                    self._refresh_url()
        self._read_file()
        pauses = [FILE_POLL] if self.file is not None else []
        if self.url is not None:
            pauses.append(self._url_due - time.monotonic())
        return max(min(pauses, default=REFRESH_MAX), 0.05)

    def _refresh_url(self) -> None:
        """Fetch the URL's set (holding ``_fetching``); keep the last good one if it fails."""
        if self.url is None:
            return
        self._last_fetch = time.monotonic()
        self.fetches += 1
        try:
            document, fresh = self._fetch(self.url)
            keys = self._parse(document)
        except Exception as exc:  # OSError, HTTPException, KeySetError, or any surprise: a
            self._failed(exc)      # fetch, also one a buyer's request makes, never raises
            return
        self._failures = 0
        self._url_due = self._last_fetch + fresh
        self._from_url = keys
        self._publish()
        if document != self._saved and self.copy is not None:
            self._keep(document)

    def _fetch(self, url: str) -> tuple[str, float]:
        request = urllib.request.Request(url, headers={"Accept": "application/json",
                                                       "User-Agent": "seckill-gateway"})
        with _NO_REDIRECTS.open(request, timeout=self.timeout) as answer:
            body = answer.read(MAX_DOCUMENT + 1)
            if len(body) > MAX_DOCUMENT:
                raise KeySetError(f"the answer is over {MAX_DOCUMENT} bytes")
            fresh = freshness(answer.headers.get("Cache-Control"), answer.headers.get("Age"),
                              self.refresh_min)
        return body.decode("utf-8", errors="replace"), fresh

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        pause = min(self.cooldown * 2 ** (self._failures - 1), REFRESH_MIN)
        self._url_due = time.monotonic() + pause
        if not self._from_url and self.copy is not None:
            self._load_copy()
        log.warning("the issuer's keys were not fetched from %s (%s: %s); %s, tried again in "
                    "%.0f s", self.url, type(exc).__name__, exc,
                    f"{len(self._snapshot.keys)} keys in force (the last good set)"
                    if self._snapshot.keys else "no key in force: its tokens are refused",
                    pause)

    def _load_copy(self) -> None:
        assert self.copy is not None and self.url is not None
        try:
            document = self.copy.load(self.url)
            if document is None:
                return
            self._from_url = self._parse(document)
        except Exception as exc:  # the store away too: nothing more to fall back on
            log.warning("no saved copy of the issuer's keys read (%s: %s)", type(exc).__name__,
                        exc)
            return
        self._saved = document
        self._publish()
        log.warning("the issuer's keys are the last good set saved (%d keys): %s is not "
                    "answering", len(self._from_url), self.url)

    def _keep(self, document: str) -> None:
        assert self.copy is not None and self.url is not None
        try:
            self.copy.save(self.url, document)
            self._saved = document
        except Exception as exc:  # kept in this process; saved on the next good fetch
            log.warning("the issuer's keys were not saved (%s: %s)", type(exc).__name__, exc)

    def _read_file(self) -> None:
        if self.file is None:
            return
        try:
            stat = self.file.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen == self._file_seen:
                return
            self._file_seen = seen
            self._from_file = self._parse(self.file.read_text(encoding="utf-8"))
        except (OSError, KeySetError) as exc:
            log.warning("the issuer's keys were not read from %s (%s: %s); the last good set "
                        "stays", self.file, type(exc).__name__, exc)
            return
        self._publish()

    def _parse(self, document: str) -> list[IssuerKey]:
        keys = parse_key_set(document, self.allowed)
        # A key published before is the same object: tokens it verified stay believed.
        return [self._known.get(key.jwk, key) for key in keys]

    def _publish(self) -> None:
        keys = [*self._from_url, *self._from_file]
        before = self._snapshot
        self._known = {key.jwk: key for key in keys}
        self._snapshot = _Snapshot.of(keys)
        if self._snapshot.keys != before.keys:
            log.info("the issuer's keys in force: %s", ", ".join(map(str, self.kids)))

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=3)


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """The set is read from the URL the operator named, not from wherever it points (a
    redirect could lead to plain HTTP): a 3xx is a failed fetch."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: Message, newurl: str) -> None:
        return None


_NO_REDIRECTS = urllib.request.build_opener(_RefuseRedirects)
