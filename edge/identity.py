"""Who is calling: a user JWT (HS256 only) or the operator token."""

from __future__ import annotations

import hmac

import jwt
from flask import Flask, current_app, g, request

from edge import ADMIN, USER, active_filters
from seckill import errors
from seckill.activities import USER_ID

ALGORITHMS = ["HS256"]  # pinned: "none", RS256-with-a-public-key-as-secret etc. are rejected


def bearer(header: str | None) -> str:
    if not header:
        raise errors.Unauthenticated("missing Authorization: Bearer header")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise errors.Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return token


def user_from_jwt(token: str, secret: str, leeway: int = 0) -> str:
    """Verify a user token and return its ``sub``; raise Unauthenticated otherwise."""
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
    sub = claims.get("sub")
    if not isinstance(sub, str) or USER_ID.fullmatch(sub) is None:
        raise errors.Unauthenticated("the token's sub is not a valid user id")
    return sub


def mint_user_token(uid: str, secret: str, ttl: int = 3600, now: int | None = None) -> str:
    """What the site's login service does; used by ``seckill token``, tests and benchmarks."""
    import time

    issued = int(time.time()) if now is None else now
    return jwt.encode({"sub": uid, "iat": issued, "exp": issued + ttl}, secret, algorithm="HS256")


class Identity:
    def init_app(self, app: Flask) -> None:
        app.extensions["edge.identity"] = self
        app.before_request(self._check)

    @staticmethod
    def _check() -> None:
        wanted = active_filters()
        if USER in wanted:
            settings = current_app.extensions["seckill"].settings
            token = bearer(request.headers.get("Authorization"))
            g.uid = user_from_jwt(token, settings.jwt_secret, settings.clock_skew)
        elif ADMIN in wanted:
            settings = current_app.extensions["seckill"].settings
            token = bearer(request.headers.get("Authorization"))
            if not hmac.compare_digest(token.encode(), settings.admin_token.encode()):
                raise errors.Unauthenticated("wrong operator token")
