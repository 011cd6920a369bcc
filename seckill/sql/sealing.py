"""The secrets the database holds, sealed: AES-256-GCM under a key from the environment.

A copy of the database (a backup, a stolen ``seckill.db``) must not give away what signs the
shop's webhooks, keys the person limits or orders a draw. A sealed value reads
``sealed:v1:<key id>:<base64url(nonce | ciphertext | tag)>``. The key is HKDF-SHA256 of the
configured material with a label of its own, so the URL signing key is never used as it is.
The key id (8 hex digits of a hash of the key, not the key) says which key sealed a value, so
older keys keep opening their rows during a rotation. The context, the row's column and id,
is authenticated with the value: a sealed value copied into another row or column does not
open. A value without the prefix was written before sealing (read as it is, sealed by
``seckill secrets rotate`` or ``seckill up``); one with the prefix that no key opens is an
error, never taken for the secret itself. Where the keys come from:
:func:`seckill.config.data_keys`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from seckill.config import DataKeys, Settings, data_keys

PREFIX = "sealed:"
VERSION = "v1"  # AES-256-GCM, 96-bit random nonce, the context as associated data
NONCE_BYTES = 12
_LABEL = b"seckill/data-key/v1"  # HKDF's info: this key's purpose, and no other's
_CACHE = 4096  # opened values kept per keyring; the secret columns hold a few thousand rows


class DataKeyError(RuntimeError):
    """A sealed value that no key of the environment opens, or one that is malformed."""


def derive_key(material: str) -> bytes:
    """The 256-bit sealing key of ``material`` (a configured key, any length >= 32 bytes)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_LABEL).derive(material.encode())


def key_id(key: bytes) -> str:
    """A key's public name: 8 hex digits of a hash of it (32 bits tell nothing of the key)."""
    return hashlib.sha256(b"seckill key id:" + key).hexdigest()[:8]


def is_sealed(stored: str) -> bool:
    """Whether ``stored`` is in the sealed form (of any version)."""
    return stored.startswith(PREFIX)


def sealed_by(stored: str) -> str | None:
    """The id of the key that sealed ``stored``, or None for a value written before sealing."""
    if not is_sealed(stored):
        return None
    parts = stored.split(":")
    return parts[2] if len(parts) == 4 else ""


def seal(key: bytes, plain: str, context: str, nonce: bytes | None = None) -> str:
    """``plain`` sealed under ``key``, bound to ``context`` (a fresh random nonce unless one is
    given: tests only)."""
    nonce = nonce or os.urandom(NONCE_BYTES)
    box = AESGCM(key).encrypt(nonce, plain.encode(), context.encode())
    data = base64.urlsafe_b64encode(nonce + box).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{VERSION}:{key_id(key)}:{data}"


def open_sealed(keys: Mapping[str, bytes], stored: str, context: str) -> str:
    """The secret sealed in ``stored`` with one of ``keys`` (key id -> key) for ``context``;
    DataKeyError if its key is not among them, or it does not open (altered, or moved from
    another row). The message names key ids only, never a key or a value."""
    parts = stored.split(":")
    if len(parts) != 4 or f"{parts[0]}:" != PREFIX or parts[1] != VERSION:
        raise DataKeyError(f"{context}: a sealed value of an unknown form")
    key = keys.get(parts[2])
    if key is None:
        raise DataKeyError(
            f"{context} was sealed with key {parts[2]}, which the environment does not hold "
            f"(it holds {', '.join(keys) or 'none'})")
    try:
        raw = base64.urlsafe_b64decode(parts[3] + "=" * (-len(parts[3]) % 4))
        return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:],
                                   context.encode()).decode()
    except (InvalidTag, ValueError, binascii.Error):
        raise DataKeyError(f"{context}: the sealed value does not open with key {parts[2]} "
                           "(altered, or copied from another row)") from None


class Keyring:
    """The environment's data keys: the first seals, each opens. Built from
    :class:`seckill.config.DataKeys` on first use (a development key file is made then);
    opened values are kept, so a secret read on every round costs a dictionary look-up."""

    def __init__(self, keys: DataKeys) -> None:
        self.source = keys.source
        self._keys = keys
        self._ring: dict[str, bytes] | None = None
        self._current = ""
        self._opened: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings) -> Keyring:
        """The keyring of ``settings`` (its environment's ``SECKILL_DATA_KEY``...)."""
        return cls(settings.data_keys or DataKeys(settings.secret_keys, "SECKILL_SECRET_KEY"))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Keyring:
        """The keyring of the process's environment (or ``environ``), read on first use."""
        return _Deferred(environ)

    @classmethod
    def from_material(cls, material: Sequence[str]) -> Keyring:
        """A keyring of these keys, newest first (tests, and the rotation's own checks)."""
        return cls(DataKeys(tuple(material), "given keys"))

    def _load(self) -> dict[str, bytes]:
        if self._ring is None:
            with self._lock:
                if self._ring is None:
                    material = list(self._keys.material)
                    if self._keys.dev_file is not None:
                        material.insert(0, development_key(self._keys.dev_file))
                    if not material:
                        raise DataKeyError(
                            "no key to seal or open the secrets the database holds: set "
                            "SECKILL_DATA_KEY (or SECKILL_SECRET_KEY) as the gateway has it")
                    ring: dict[str, bytes] = {}
                    for item in material:
                        key = derive_key(item)
                        ring.setdefault(key_id(key), key)
                    self._current = next(iter(ring))
                    self._ring = ring
        return self._ring

    @property
    def configured(self) -> bool:
        """Whether the environment names a key at all (a process without one, e.g. a tool that
        reads orders, opens no secret and is refused the moment it tries)."""
        return bool(self._keys.material or self._keys.dev_file)

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        self._load()
        return self._current

    @property
    def ids(self) -> tuple[str, ...]:
        """Every key id this keyring opens, the sealing one first."""
        return tuple(self._load())

    def seal(self, plain: str, context: str) -> str:
        """``plain`` sealed under the current key for ``context``."""
        ring = self._load()
        return seal(ring[self._current], plain, context)

    def open(self, stored: str, context: str) -> str:
        """The secret in ``stored`` (a value written before sealing: as it is). DataKeyError
        when sealed with a key this keyring lacks, or when it does not open."""
        if not is_sealed(stored):
            return stored
        found = self._opened.get((stored, context))
        if found is None:
            found = open_sealed(self._load(), stored, context)
            if len(self._opened) >= _CACHE:
                self._opened.clear()
            self._opened[(stored, context)] = found
        return found

    def stale(self, stored: str) -> bool:
        """Whether ``stored`` is to be sealed (again): plain, or sealed by an older key."""
        return sealed_by(stored) != self.current


class _Deferred(Keyring):
    """A keyring whose environment is read on first use (a book built without settings)."""

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self._environ = environ
        self._read_once = False
        super().__init__(DataKeys((), "the environment"))

    def _read(self) -> None:
        if self._ring is None and not self._read_once:
            self._keys = data_keys(self._environ)
            self.source = self._keys.source
            self._read_once = True

    @property
    def configured(self) -> bool:
        """As :attr:`Keyring.configured`, the environment read first."""
        self._read()
        return super().configured

    def _load(self) -> dict[str, bytes]:
        self._read()
        return super()._load()


def development_key(path: Path) -> str:
    """The throw-away data key of a development data folder: read, or made (0600, written
    whole before it appears, so a process racing this one reads all of it or makes none)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        with contextlib.suppress(FileExistsError):  # another process made it first: its key
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return path.read_text().strip()
