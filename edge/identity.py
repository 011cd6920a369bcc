"""Who is calling: a user JWT or an operator's token (``edge.operators``); and, when the
deployment names a person claim (``SECKILL_PERSON_CLAIM``), the verified person behind the
account. A user JWT is HS256, signed with ``SECKILL_JWT_SECRET`` by the site's login service,
or signed by the shop's identity provider and checked against its published keys
(``edge.issuer``); both may be accepted at once, during a migration from one to the other."""

from __future__ import annotations

import hmac
import time

import jwt

from edge import ADMIN, SCRAPER, USER, Filter, Passage
from edge.claims import buyer, decode
from edge.issuer import Issuer, unverified_header
from edge.jwks import IssuerKey
from edge.operators import BootstrapAdmin, OperatorTokens
from seckill.domain import errors
from seckill.domain.people import EXACT

ALGORITHMS = ["HS256"]  # pinned: "none", RS256-with-a-public-key-as-secret etc. are rejected
# A verified token remembered: user, person, expiry, and the issuer's key that verified it
# (None: HS256, SECKILL_JWT_SECRET).
Remembered = tuple[str, str | None, int, IssuerKey | None]


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or Unauthenticated."""
    if not header:
        raise errors.Unauthenticated("missing Authorization: Bearer header")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise errors.Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return token


def verify_user_jwt(token: str, secret: str, leeway: int = 0, max_ttl: int = 0,
                    person_claim: str | None = None,
                    person_canon: str = EXACT) -> tuple[str, int, str | None]:
    """Verify an HS256 user token signed with ``secret``; return its ``sub``, ``exp`` and
    person, or raise Unauthenticated. ``max_ttl``, the person claim and its form: as
    :func:`edge.claims.buyer` checks them for every user token."""
    if len(token) > 4096:
        raise errors.Unauthenticated("token too long")
    found = decode(token, secret, ALGORITHMS, leeway, ("exp", "sub"))
    return buyer(found, "sub", leeway, max_ttl, person_claim, person_canon)


def user_from_jwt(token: str, secret: str, leeway: int = 0, max_ttl: int = 0) -> str:
    """Verify a user token and return its ``sub``; raise Unauthenticated otherwise."""
    return verify_user_jwt(token, secret, leeway, max_ttl)[0]


def mint_user_token(uid: str, secret: str, ttl: int = 3600, now: int | None = None,
                    claims: dict[str, object] | None = None) -> str:
    """What the site's login service does; used by ``seckill token``, tests and benchmarks.
    ``claims`` are added (a person claim, say)."""
    issued = int(time.time()) if now is None else now
    return jwt.encode({"sub": uid, "iat": issued, "exp": issued + ttl, **(claims or {})}, secret,
                      algorithm="HS256")


class Identity(Filter):
    """Who is calling: a user's JWT or an operator's token.

    A user's verified token is remembered (token -> user, expiry) so the same token is not
    verified twice: a buyer sends it for the URL and again for the purchase, and PyJWT's
    decode is the most expensive step of the edge. A token an issuer's key verified is
    believed only while that key is in the issuer's set (a key removed is a key revoked)."""

    names = frozenset({USER, ADMIN, SCRAPER})
    # ~7 MB of HS256 tokens. Two generations of half each: when the newer is full it becomes
    # the older and the oldest goes, so the last MAX_REMEMBERED / 2 tokens verified are always
    # there (a buyer sends the same token twice within seconds, whatever the crowd meanwhile).
    MAX_REMEMBERED = 20_000

    def __init__(self, jwt_secret: str, operators: OperatorTokens | str, leeway: int,
                 max_ttl: int = 0, person_claim: str | None = None, person_canon: str = EXACT,
                 metrics_token: str | None = None, issuer: Issuer | None = None) -> None:
        self.jwt_secret = jwt_secret  # SECKILL_JWT_SECRET ("": HS256 tokens are refused)
        self.issuer = issuer  # the shop's identity provider (SECKILL_JWT_JWKS_*), if any
        # A bare token is SECKILL_ADMIN_TOKEN alone: the bootstrap admin.
        self.operators = BootstrapAdmin(operators) if isinstance(operators, str) else operators
        # SECKILL_METRICS_TOKEN: the scraper's, good on the scraper's route only.
        self.metrics_token = metrics_token.encode() if metrics_token else None
        self.leeway = leeway
        self.max_ttl = max_ttl  # SECKILL_JWT_MAX_TTL (0: no bound)
        self.person_claim = person_claim  # SECKILL_PERSON_CLAIM (None: no person)
        self.person_canon = person_canon  # SECKILL_PERSON_CANON
        # token -> what it said: the newer generation, then the older
        self._verified: dict[str, Remembered] = {}
        self._older: dict[str, Remembered] = {}

    def check(self, passage: Passage) -> None:
        """Set the user (and the person) of a user route, and the operator of an operator
        route; refuse a token that is no operator's on an operator route, and one that is
        neither an operator's nor the metrics token on the scraper's."""
        token = bearer(passage.authorization)
        if USER in passage.wanted:
            passage.uid, passage.person = self.verified(token)
            return
        operator = self.operators.who(token)
        if operator is not None:
            passage.operator = operator
            return
        if SCRAPER in passage.wanted and self.metrics_token is not None \
                and hmac.compare_digest(token.encode(), self.metrics_token):
            return
        raise errors.Unauthenticated("wrong operator token")

    def user(self, token: str) -> str:
        """The user a token names (:meth:`verified`)."""
        return self.verified(token)[0]

    def verified(self, token: str) -> tuple[str, str | None]:
        """The user and the person a token names, verified once per token while it is
        remembered."""
        known = self._verified.get(token) or self._older.get(token)
        if known is not None and time.time() <= known[2] + self.leeway and (
                known[3] is None or (self.issuer is not None and self.issuer.holds(known[3]))):
            return known[0], known[1]
        uid, expires, person, key = self._verify(token)
        if len(self._verified) >= self.MAX_REMEMBERED // 2:
            self._older, self._verified = self._verified, {}
        self._verified[token] = (uid, person, expires, key)
        return uid, person

    def _verify(self, token: str) -> tuple[str, int, str | None, IssuerKey | None]:
        """Verify a token the first time: the issuer's when its algorithm is one the issuer
        signs with, else HS256 with SECKILL_JWT_SECRET (which refuses any other algorithm)."""
        if self.issuer is not None:
            header = unverified_header(token)
            if self.issuer.signs(header.get("alg")):
                return self.issuer.verify(token, header, self.leeway, self.max_ttl,
                                          self.person_claim, self.person_canon)
        if not self.jwt_secret:
            raise errors.Unauthenticated("the token's algorithm is not one this gateway accepts")
        return (*verify_user_jwt(token, self.jwt_secret, self.leeway, self.max_ttl,
                                 self.person_claim, self.person_canon), None)
