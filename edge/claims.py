"""What a user token says, checked the same way whichever key signed it: PyJWT's decode with
its refusals as 401s, strictly typed time claims, the token's life, the user and the person.

The HS256 tokens of the site's login service (``edge.identity``) and the tokens of the shop's
identity provider (``edge.issuer``) differ in how their signature is checked and in which claim
names the user; past the signature, one set of rules, so that a buyer is the same buyer
whichever way they logged in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jwt

from seckill.domain import errors
from seckill.domain.activities import USER_ID
from seckill.domain.people import canonical_person, is_person_id

if TYPE_CHECKING:
    from edge.jwks import PublicKey

TIME_CLAIMS = ("exp", "nbf", "iat")
MAX_NUMERIC_DATE = 2**53  # JSON's safe integers; a larger "date" is not one a login service mints


def decode(token: str, key: str | PublicKey, algorithms: Sequence[str], leeway: int,
           require: Sequence[str], audience: Sequence[str] | None = None,
           issuer: str | None = None) -> dict[str, object]:
    """The claims of ``token`` once PyJWT has checked its signature with ``key`` (one of
    ``algorithms`` only), ``exp``, ``nbf``, ``iat``, and ``aud``/``iss`` when given; every
    refusal is Unauthenticated."""
    try:
        claims: dict[str, object] = jwt.decode(
            token, key, algorithms=algorithms, leeway=leeway, audience=audience, issuer=issuer,
            # A provider's key under 2048 bits is refused outright, never warned about.
            options={"require": list(require), "enforce_minimum_key_length": True})
    except jwt.ExpiredSignatureError:
        raise errors.Unauthenticated("the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise errors.Unauthenticated("the token is not valid yet") from None
    except jwt.MissingRequiredClaimError as exc:
        raise errors.Unauthenticated(f"the token lacks the {exc.claim!r} claim") from None
    except jwt.InvalidAudienceError:
        raise errors.Unauthenticated("the token is not meant for this gateway (aud)") from None
    except jwt.InvalidIssuerError:
        raise errors.Unauthenticated("the token is from another issuer (iss)") from None
    except jwt.PyJWTError:  # malformed, wrongly signed, a key that does not fit
        raise errors.Unauthenticated("the token is malformed or wrongly signed") from None
    return claims


def buyer(claims: dict[str, object], user_claim: str, leeway: int, max_ttl: int,
          person_claim: str | None, person_canon: str) -> tuple[str, int, str | None]:
    """The user (the ``user_claim`` claim), ``exp`` and person of verified ``claims``, or
    Unauthenticated.

    ``max_ttl`` (seconds, 0: no bound) is the longest a token may live: ``exp - iat`` when it
    says when it was issued, and in any case ``exp - now`` (plus ``leeway``). The person is
    the ``person_claim`` claim (``SECKILL_PERSON_CLAIM``): None when no claim is named or the
    token lacks it; present but not a person id (a number, null, 500 characters, a character
    outside ``[A-Za-z0-9_.:@-]``), the token is invalid: the login service that minted it is
    broken, and guessing what it meant could merge or split people. The claim is first put
    in the ``person_canon`` form (``SECKILL_PERSON_CANON``): the one place a token's person
    enters, so that limits, queue entries, draws and blocks all see that form."""
    for name in TIME_CLAIMS:
        if name in claims and not is_numeric_date(claims[name]):
            raise errors.Unauthenticated(f"the token's {name!r} claim is not a number of seconds")
    if max_ttl and _lives_too_long(claims, max_ttl, leeway):
        raise errors.Unauthenticated(f"the token lives longer than {max_ttl} seconds "
                                     "(SECKILL_JWT_MAX_TTL)")
    uid = claims.get(user_claim)
    if not isinstance(uid, str) or USER_ID.fullmatch(uid) is None:
        raise errors.Unauthenticated(f"the token's {user_claim!r} claim is not a valid user id "
                                     "([A-Za-z0-9_.@-]{1,64})")
    person: str | None = None
    if person_claim is not None and person_claim in claims:
        found = claims[person_claim]
        if isinstance(found, str):
            found = canonical_person(found, person_canon)
        if not isinstance(found, str) or not is_person_id(found):
            raise errors.Unauthenticated(f"the token's {person_claim!r} claim is not a valid "
                                         "person id ([A-Za-z0-9_.:@-]{1,128})")
        person = found
    exp = claims["exp"]
    assert isinstance(exp, int | float)  # required, and is_numeric_date checked it
    return uid, int(exp), person


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
