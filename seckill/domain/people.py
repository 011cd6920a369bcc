"""Limits per person: whose purchase it is, on an activity that counts people.

The shop's login service may say who the verified person behind an account is (a JWT claim
named by ``SECKILL_PERSON_CLAIM``, e.g. a hash of a verified phone number). An activity
created with ``"limit_by": "person"`` then counts people, not accounts: its *buyer* is the
person, and everything the sale keeps per buyer (the buyers hash, claims, holds, the expired
hash, the queue and the draw, the sold-out flag's winners, a sharded activity's home part, the
order's ``user_id`` in the database) is keyed by the person's key on that activity.

The key is ``p:`` and 22 base64url characters (132 bits) of HMAC-SHA256 under the activity's
own secret salt (drawn at creation, never shown) of the person id. Why keyed, and per
activity: a draw's entries are these keys (anyone may recompute the draw from them and the
seed), and a person id is often a hash of a phone number, which anyone can guess by trying
every number; without the salt nobody can tell whose key an entry is, nor follow a person from
one activity to the next. The key matches no user id (user ids have no ``:``), and it fits
where user ids go (the database's 64-character column, the scripts' ``|``-separated records).
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import re
import secrets
import unicodedata
from typing import Any, Protocol

from seckill.domain import errors

PERSON_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
PERSON_KEY = re.compile(r"p:[A-Za-z0-9_-]{22}")

# SECKILL_PERSON_CANON: how a person id is compared. ``exact``: byte for byte (a login service's
# opaque ids are often case-sensitive); ``nfkc_casefold``: for claims such as e-mail addresses.
EXACT = "exact"
NFKC_CASEFOLD = "nfkc_casefold"
CANONS = (EXACT, NFKC_CASEFOLD)

BY_USER = "user"
BY_PERSON = "person"
LIMITS = (BY_USER, BY_PERSON)


def is_person_id(value: object) -> bool:
    """Whether ``value`` is a well-formed person id (a string of ``[A-Za-z0-9_.:@-]{1,128}``)."""
    return isinstance(value, str) and PERSON_ID.fullmatch(value) is not None


def canonical_person(person: str, canon: str) -> str:
    """The person id as every consumer compares it (a limit, a queue's or a draw's entry, a
    block): the one form the claim of a token (``edge.identity``) and the person an operator
    blocks (``seckill.operator.blocks``) are both put in, before :func:`is_person_id` checks it.

    ``exact``: unchanged. ``nfkc_casefold``: NFKC, case-folded, NFKC again (case folding may
    undo NFKC), and trimmed of white space only: a login service or a form adds spaces, while
    a dot, a dash or an underscore is part of an id (``PB-x.`` and ``PB-x`` are two people; a
    trailing dot is as much a character of an opaque id as any other). The result may be no
    person id (empty, ``é``): the caller refuses it as it refuses a malformed claim."""
    if canon == EXACT:
        return person
    if canon != NFKC_CASEFOLD:
        raise ValueError(f"a person id's form is exact or nfkc_casefold, not {canon!r}")
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", person).casefold())
    return folded.strip()


def parse_limit_by(body: dict[str, Any]) -> str:
    """A new activity's ``limit_by`` (default ``user``); BadRequest naming it otherwise."""
    limit_by = body.get("limit_by", BY_USER)
    if limit_by not in LIMITS:
        raise errors.BadRequest("limit_by must be 'user' or 'person'", field="limit_by")
    return str(limit_by)


def new_salt() -> str:
    """A person-limited activity's secret salt: 32 random bytes, hex."""
    return secrets.token_hex(32)


# HMAC's key pads (RFC 2104), as the standard library's own Python HMAC makes them.
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64 -> base64url
_BLOCK = hashlib.sha256().block_size  # 64 bytes


@functools.lru_cache(maxsize=1024)
def _keyed(salt: str) -> tuple[Any, Any]:
    """An activity's HMAC-SHA256 with its key set up once: the SHA-256 states after the
    key's inner and outer pads, which each person's key copies. Two plain hash copies cost a
    key less than copying an ``hmac.HMAC``; the keys are the same (tests/test_person_keys.py)."""
    key = salt.encode("ascii")
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))


@functools.lru_cache(maxsize=65_536)
def person_key(salt: str, person: str) -> str:
    """The person's key on the activity whose salt is ``salt``. Remembered: a purchase needs
    it twice (the sold-out flag's check, the script's buyer), and a buyer's URL and purchase
    come within seconds of each other. A sale's crowd may pass the 65,536 remembered: then
    each purchase computes it once."""
    inner, outer = _keyed(salt)
    inner = inner.copy()
    inner.update(person.encode())
    outer = outer.copy()
    outer.update(inner.digest())
    # 17 bytes are 23 base64 characters and a pad; the first 22 are the key's 132 bits.
    return "p:" + binascii.b2a_base64(outer.digest()[:17], newline=False)[:22].translate(
        _URLSAFE).decode("ascii")


class Limited(Protocol):
    """What :func:`buyer` reads of an activity (``seckill.domain.activities.Activity``, which
    imports this module)."""

    @property
    def limit_by(self) -> str:
        """``user`` or ``person``."""

    @property
    def person_salt(self) -> str | None:
        """The secret salt of a person-limited activity's keys."""


def buyer(activity: Limited, uid: str, person: str | None) -> str:
    """Who buys on ``activity``: the user, or on a person-limited activity the person's key.
    A user whose token names no person may not take part there: 403
    ``verification_required``."""
    if activity.limit_by != BY_PERSON:
        return uid
    if person is None:
        raise errors.VerificationRequired()
    assert activity.person_salt, "a person-limited activity has a salt"
    return person_key(activity.person_salt, person)


def script_buyer(uid: str, buyer_key: str) -> str:
    """The buyer as a sale script reads it (``lua/purchase.lua``'s ARGV[1]): the user id, or
    ``<person key>|<account>``, so that the order also names the account that bought."""
    return uid if buyer_key == uid else f"{buyer_key}|{uid}"
