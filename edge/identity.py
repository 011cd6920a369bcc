"""Who is calling: a user JWT (HS256 only) or an operator's token (``edge.operators``); and,
when the deployment names a person claim (``SECKILL_PERSON_CLAIM``), the verified person
behind the account."""

from __future__ import annotations

import hmac
import time

import jwt

from edge import ADMIN, SCRAPER, USER, Filter, Passage
from edge.operators import BootstrapAdmin, OperatorTokens
from seckill.domain import errors
from seckill.domain.activities import USER_ID
from seckill.domain.people import EXACT, canonical_person, is_person_id

ALGORITHMS = ["HS256"]  # pinned: "none", RS256-with-a-public-key-as-secret etc. are rejected
TIME_CLAIMS = ("exp", "nbf", "iat")
MAX_NUMERIC_DATE = 2**53  # JSON's safe integers; a larger "date" is not one a login service mints


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
    """Verify a user token; return its ``sub``, ``exp`` and person, or raise Unauthenticated.

    ``max_ttl`` (seconds, 0: no bound) is the longest a token may live: ``exp - iat`` when it
    says when it was issued, and in any case ``exp - now`` (plus ``leeway``). The person is
    the ``person_claim`` claim (``SECKILL_PERSON_CLAIM``): None when no claim is named or the
    token lacks it; present but not a person id (a number, null, 500 characters, a character
    outside ``[A-Za-z0-9_.:@-]``), the token is invalid: the login service that minted it is
    broken, and guessing what it meant could merge or split people. The claim is first put
    in the ``person_canon`` form (``SECKILL_PERSON_CANON``): the one place a token's person
    enters, so that limits, queue entries, draws and blocks all see that form."""
    if len(token) > 4096:
        raise errors.Unauthenticated("token too long")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=ALGORITHMS,
            options={"require": ["exp", "sub"]},
            leeway=leeway,
        )
    except jwt.ExpiredSignatureError:
        raise errors.Unauthenticated("the token has expired") from None
    except jwt.MissingRequiredClaimError as exc:
        raise errors.Unauthenticated(f"the token lacks the {exc.claim!r} claim") from None
    except jwt.InvalidTokenError:
        raise errors.Unauthenticated("the token is malformed or wrongly signed") from None
    for name in TIME_CLAIMS:
        if name in claims and not is_numeric_date(claims[name]):
            raise errors.Unauthenticated(f"the token's {name!r} claim is not a number of seconds")
    if max_ttl and _lives_too_long(claims, max_ttl, leeway):
        raise errors.Unauthenticated(f"the token lives longer than {max_ttl} seconds "
                                     "(SECKILL_JWT_MAX_TTL)")
    sub = claims.get("sub")
    if not isinstance(sub, str) or USER_ID.fullmatch(sub) is None:
        raise errors.Unauthenticated("the token's sub is not a valid user id")
    person: str | None = None
    if person_claim is not None and person_claim in claims:
        found = claims[person_claim]
        if isinstance(found, str):
            found = canonical_person(found, person_canon)
        if not is_person_id(found):
            raise errors.Unauthenticated(f"the token's {person_claim!r} claim is not a valid "
                                         "person id ([A-Za-z0-9_.:@-]{1,128})")
        person = found
    return sub, int(claims["exp"]), person


def _lives_too_long(claims: dict[str, object], max_ttl: int, leeway: int) -> bool:
    exp = claims["exp"]
    assert isinstance(exp, int | float)  # is_numeric_date checked it
    if exp - time.time() > max_ttl + leeway:
        return True
    iat = claims.get("iat")
    return isinstance(iat, int | float) and exp - iat > max_ttl


def is_numeric_date(value: object) -> bool:
    """A JWT NumericDate (RFC 7519): a JSON number, finite, in 0..2**53 (PyJWT alone would take
    ``"1795359999"`` through ``int()``, and ``true`` as 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 <= value <= MAX_NUMERIC_DATE  # NaN and infinities fail this too


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
    decode is the most expensive step of the edge."""

    names = frozenset({USER, ADMIN, SCRAPER})
    MAX_REMEMBERED = 20_000  # ~7 MB; a buyer sends the same token twice within seconds

    def __init__(self, jwt_secret: str, operators: OperatorTokens | str, leeway: int,
                 max_ttl: int = 0, person_claim: str | None = None, person_canon: str = EXACT,
                 metrics_token: str | None = None) -> None:
        self.jwt_secret = jwt_secret
        # A bare token is SECKILL_ADMIN_TOKEN alone: the bootstrap admin.
        self.operators = BootstrapAdmin(operators) if isinstance(operators, str) else operators
        # SECKILL_METRICS_TOKEN: the scraper's, good on the scraper's route only.
        self.metrics_token = metrics_token.encode() if metrics_token else None
        self.leeway = leeway
        self.max_ttl = max_ttl  # SECKILL_JWT_MAX_TTL (0: no bound)
        self.person_claim = person_claim  # SECKILL_PERSON_CLAIM (None: no person)
        self.person_canon = person_canon  # SECKILL_PERSON_CANON
        # token -> (user, person, expiry)
        self._verified: dict[str, tuple[str, str | None, int]] = {}

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
        known = self._verified.get(token)
        if known is not None and time.time() <= known[2] + self.leeway:
            return known[0], known[1]
        uid, expires, person = verify_user_jwt(token, self.jwt_secret, self.leeway,
                                               self.max_ttl, self.person_claim,
                                               self.person_canon)
        if len(self._verified) >= self.MAX_REMEMBERED:
            self._verified.clear()  # bounded; the next requests simply verify again
        self._verified[token] = (uid, person, expires)
        return uid, person
