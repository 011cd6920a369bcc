"""Signed purchase URLs: ``/seckill/<aid>/<token>/buy``, the token an HMAC-SHA256 tag.

The tag covers a canonical message, ``seckill-url|v1|<aid>|<uid>|<expires_at>``. The
delimiter ``|`` can occur in neither id (see the id patterns in the contract), so no two
different (activity, user, expiry) triples share a message. The token is
``<expires_at>.<key id>.<tag>``: the key id picks the verifying key without trial, which makes
key rotation cheap (``SECKILL_SECRET_KEY=new,old``: the first signs, all verify). Verifying
needs no Redis.

Why ``hmac`` and not itsdangerous: the key id makes rotation free and the token carries no
payload (``bench/results/signing.md`` has the comparison and its figures).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Sequence

from edge import PURCHASE_URL, Filter, Passage
from seckill.domain import errors

_MAX_TOKEN = 128
# ASCII digits only: str.isdigit() takes "²" (then int() raises), int() takes the
# Arabic-Indic digit one as 1.
_EXPIRY = re.compile(r"[0-9]{1,12}", re.ASCII)


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"seckill-url-key-id|" + key).hexdigest()[:8]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class PurchaseUrlSigner:
    """Signs and verifies purchase-URL tokens with rotating keys (the first key signs)."""

    def __init__(self, keys: Sequence[str], ttl: int, skew: int = 5) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        encoded = [k.encode() for k in keys]
        self._signing = encoded[0]
        self._signing_id = _key_id(encoded[0])
        self._by_id = {_key_id(k): k for k in reversed(encoded)}
        self.ttl = ttl
        self.skew = skew

    @staticmethod
    def _tag(key: bytes, aid: str, uid: str, expires_at: int) -> str:
        message = f"seckill-url|v1|{aid}|{uid}|{expires_at}".encode()
        return _b64(hmac.new(key, message, hashlib.sha256).digest())

    def sign(self, aid: str, uid: str, now: float | None = None, until: int | None = None
             ) -> tuple[str, int]:
        """A token for this user and activity, and its expiry (epoch seconds): ``until`` if
        given (a queue admission's end), else the URL's time to live from now."""
        if until is None:
            until = int(time.time() if now is None else now) + self.ttl
        expires_at = until
        tag = self._tag(self._signing, aid, uid, expires_at)
        return f"{expires_at}.{self._signing_id}.{tag}", expires_at

    def verify(self, token: str, aid: str, uid: str, now: float | None = None,
               exact: bool = False) -> int:
        """Return the token's expiry; raise BadSignature if it is not this user's, for this
        activity, or has expired (allowing ``skew`` seconds between gateway clocks, unless
        ``exact``: a queue admission's URL ends with the admission, see :class:`PurchaseUrls`)."""
        if len(token) > _MAX_TOKEN:
            raise errors.BadSignature()
        parts = token.split(".")
        if len(parts) != 3 or _EXPIRY.fullmatch(parts[0]) is None:
            raise errors.BadSignature()
        expires_at = int(parts[0])
        key = self._by_id.get(parts[1])
        if key is None:
            raise errors.BadSignature()
        expected = self._tag(key, aid, uid, expires_at)
        if not hmac.compare_digest(expected.encode(), parts[2].encode()):
            raise errors.BadSignature()
        if (time.time() if now is None else now) > expires_at + (0 if exact else self.skew):
            raise errors.BadSignature("this purchase URL has expired; fetch a new one")
        return expires_at


class PurchaseUrls(Filter):
    """The signed-URL filter: the token in the path must be this user's, for this activity.

    A queue or draw activity's URLs are issued only with an admission and expire with it
    (``expires_at`` is the admission's end, a whole second): they get no clock-skew grace, or a
    lapsed admission would still buy for that long, taking the unit of the user admitted in
    its place. The admission's end is on Redis's clock and this check on the gateway's: the
    deployment keeps them in step (NTP), as it does for the sale window."""

    names = frozenset({PURCHASE_URL})

    def __init__(self, signer: PurchaseUrlSigner) -> None:
        self.signer = signer

    def check(self, passage: Passage) -> None:
        """Refuse a forged, expired or someone else's token with 403 bad_signature."""
        token = passage.view_args.get("token", "")
        exact = passage.activity is not None and passage.activity.queued
        self.signer.verify(str(token), passage.activity_id(), passage.require_uid(), exact=exact)
