"""A buyer's token signed by the shop's identity provider, verified against its keys.

The algorithm is pinned: the token's ``alg`` must be one the deployment accepts
(``SECKILL_JWT_ALGORITHMS``: RS256, PS256, ES256, EdDSA) and the key its ``kid`` names must be of
that algorithm's type (``edge.jwks``), so the header never chooses how the signature is checked:
no HS256 with the public key as its secret, no ``none``. ``iss`` and ``aud`` must be the
deployment's (``SECKILL_JWT_ISSUER``, ``SECKILL_JWT_AUDIENCE``): a provider signs the tokens of
the shop's other applications with the same keys, and those must not buy here. Past the
signature, the rules of every user token (``edge.claims``), with the user in
``SECKILL_JWT_USER_CLAIM``.
"""

from __future__ import annotations

import base64
import dataclasses
import json

from edge import claims
from edge.jwks import IssuerKey, IssuerKeys
from seckill.domain import errors
from seckill.domain.people import EXACT

MAX_TOKEN = 8192  # a provider's token with roles runs to a few KiB; the header's own bound


def unverified_header(token: str) -> dict[str, object]:
    """The JOSE header of ``token``, read without checking anything: what says which key and
    algorithm to check it with (PyJWT reads it again, and checks it, when it decodes)."""
    if len(token) > MAX_TOKEN:
        raise errors.Unauthenticated("token too long")
    segment = token.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, RecursionError):  # binascii.Error is a ValueError; "[[[[..." recurses
        raise errors.Unauthenticated("the token is malformed") from None
    if not isinstance(header, dict):
        raise errors.Unauthenticated("the token is malformed")
    return header


@dataclasses.dataclass(frozen=True)
class Issuer:
    """The shop's identity provider as the gateway trusts it: its keys, who it is, who its
    tokens must be for, the algorithms and the claim naming the user."""

    keys: IssuerKeys
    issuer: str
    audience: tuple[str, ...]
    algorithms: frozenset[str]
    user_claim: str = "sub"

    def signs(self, alg: object) -> bool:
        """Whether a token whose header says ``alg`` is this issuer's to check."""
        return alg in self.algorithms

    def verify(self, token: str, header: dict[str, object], leeway: int = 0, max_ttl: int = 0,
               person_claim: str | None = None, person_canon: str = EXACT,
               ) -> tuple[str, int, str | None, IssuerKey]:
        """The user, ``exp``, person and verifying key of ``token`` (whose unverified
        ``header`` names an algorithm this issuer :meth:`signs`), or Unauthenticated."""
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or not self.signs(alg):
            raise errors.Unauthenticated("the token's algorithm is not accepted")
        if kid is not None and not isinstance(kid, str):
            raise errors.Unauthenticated("the token's kid is not a string")
        key = self.keys.find(kid, alg)
        if key is None:
            raise errors.Unauthenticated("no key of the issuer verifies the token"
                                         + (f" (kid {kid[:64]!r})" if kid else " (no kid)"))
        found = claims.decode(token, key.public, [alg], leeway,
                              ("exp", "iss", "aud", self.user_claim),
                              audience=self.audience, issuer=self.issuer)
        uid, expires, person = claims.buyer(found, self.user_claim, leeway, max_ttl,
                                            person_claim, person_canon)
        return uid, expires, person, key

    def holds(self, key: IssuerKey) -> bool:
        """Whether ``key`` still verifies (:meth:`IssuerKeys.holds`)."""
        return self.keys.holds(key)
