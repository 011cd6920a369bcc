"""Who an operator is, found from the bearer token of an operator route, and whether their role
may make the call.

The identity filter (``edge.identity``) asks an :class:`OperatorTokens` for the operator a
token belongs to: :class:`Operators`, the bootstrap admin (``SECKILL_ADMIN_TOKEN``) and then
the named operators (this process's copy of them, ``seckill.store.operators``); then
:class:`RoleCheck` refuses the call with 403 ``forbidden`` when the route needs a role the
operator's lacks. The roles and what they may do: ``seckill.domain.operators``; which route
needs which role: the table in ``seckill.web.routes``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Protocol

from edge.chain import ADMIN, Filter, Passage
from seckill.domain.operators import ADMIN as ADMIN_ROLE
from seckill.domain.operators import BOOTSTRAP_NAME, Operator, forbidden

__all__ = ["BootstrapAdmin", "Operator", "OperatorTokens", "Operators", "RoleCheck"]


class OperatorTokens(Protocol):
    """Finds the operator an operator route's bearer token belongs to."""

    def who(self, token: str) -> Operator | None:
        """The operator whose token this is; None when it is nobody's."""


class BootstrapAdmin:
    """``SECKILL_ADMIN_TOKEN``: one token, an admin named :data:`BOOTSTRAP_NAME`."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._operator = Operator(BOOTSTRAP_NAME, ADMIN_ROLE)

    def who(self, token: str) -> Operator | None:
        """The bootstrap admin when ``token`` is its token (compared in constant time)."""
        return self._operator if hmac.compare_digest(token.encode(), self._token) else None


class Operators:
    """The bootstrap admin first (no lookup at all), then the named operators."""

    def __init__(self, bootstrap: str, named: OperatorTokens) -> None:
        self.bootstrap = BootstrapAdmin(bootstrap)
        self.named = named

    def who(self, token: str) -> Operator | None:
        """The operator whose token this is: the bootstrap admin, or a named operator."""
        return self.bootstrap.who(token) or self.named.who(token)


class RoleCheck(Filter):
    """403 ``forbidden`` (with ``role_needed``) to an operator whose role lacks the route's.

    ``needed``: endpoint -> role, every operator route's (``seckill.web.routes``); a route
    missing from it needs ``admin``, so that a route added without its role is closed rather
    than open. ``refused`` hears each refusal (the audit trail)."""

    names = frozenset({ADMIN})

    def __init__(self, needed: Mapping[str, str],
                 refused: Callable[[Operator, str, str], None] | None = None) -> None:
        self.needed = needed
        self.refused = refused

    def check(self, passage: Passage) -> None:
        """Let the operator through if their role has the route's rights."""
        operator = passage.operator
        if operator is None:  # the identity filter runs first and sets it, or refuses
            raise RuntimeError("no operator on an operator route")
        needed = self.needed.get(passage.endpoint, ADMIN_ROLE)
        if not operator.may(needed):
            if self.refused is not None:
                self.refused(operator, passage.endpoint, needed)
            raise forbidden(operator, needed)
