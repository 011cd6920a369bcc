"""Who an operator is: a name and a role, found from the bearer token of an operator route.

The roles are ordered: each has the rights of the ones before it. ``viewer`` reads (activities,
stats, orders, the console, metrics); ``operator`` pulls the levers (pause, resume, end, restock,
cancel, blocks); ``admin`` changes the deployment (activities, webhook endpoints, payments,
operators). ``SECKILL_ADMIN_TOKEN`` is the bootstrap admin, so that a deployment can make its
first named operators with it.
"""

from __future__ import annotations

import dataclasses
import hmac
from typing import Protocol

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)  # each has the rights of the ones before it
BOOTSTRAP_NAME = "admin"  # the name SECKILL_ADMIN_TOKEN acts under


@dataclasses.dataclass(frozen=True, slots=True)
class Operator:
    """A verified operator: who, and what they may do."""

    name: str
    role: str

    def may(self, needed: str) -> bool:
        """Whether this operator's role has the rights of ``needed``."""
        return ROLES.index(self.role) >= ROLES.index(needed)


class OperatorTokens(Protocol):
    """Finds the operator an operator route's bearer token belongs to."""

    def who(self, token: str) -> Operator | None:
        """The operator whose token this is; None when it is nobody's."""


class BootstrapAdmin:
    """``SECKILL_ADMIN_TOKEN``: one token, an admin named :data:`BOOTSTRAP_NAME`."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._operator = Operator(BOOTSTRAP_NAME, ADMIN)

    def who(self, token: str) -> Operator | None:
        """The bootstrap admin when ``token`` is its token (compared in constant time)."""
        return self._operator if hmac.compare_digest(token.encode(), self._token) else None
