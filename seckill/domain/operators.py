"""Operators by name and role: who may do what on the operator side.

The roles are ordered, each with the rights of the ones before it: ``viewer`` reads
(activities, stats, orders, blocks, webhooks, the console, metrics); ``operator`` pulls the
levers (pause, resume, end, restock, cancel, blocks, a queue's factor, a webhook replay);
``admin`` changes the deployment (activities, webhook endpoints, payments by hand, operators).
Which route needs which role: ``seckill.web.routes``.

A named operator's token is ``sko_`` and 32 random bytes (url-safe base64), shown once when
made; the database keeps its SHA-256 only. A fast hash suffices: the token is 256 random
bits, not a password a person chose, so no dictionary makes the hash any easier to reverse.
``SECKILL_ADMIN_TOKEN`` stays, as the bootstrap admin named ``admin``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
from typing import Any

from seckill.domain import bodies, errors
from seckill.domain.clock import iso_from_ms

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)  # each has the rights of the ones before it
BOOTSTRAP_NAME = "admin"  # the name SECKILL_ADMIN_TOKEN acts under
TOKEN_PREFIX = "sko_"  # recognisable in a leaked paste, and by secret scanners
NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}", re.ASCII)
NAME_RULE = "[A-Za-z0-9_.@-]{1,64}"
# Who acted, as the audit and the events name them: an operator's name, or the command's
# "cli:<login>" (a colon no operator's name holds).
ACTOR = re.compile(r"(?:cli:)?[A-Za-z0-9_.@-]{1,64}", re.ASCII)
_FIELDS = frozenset({"name", "role"})


@dataclasses.dataclass(frozen=True, slots=True)
class Operator:
    """A verified operator: who, and what they may do."""

    name: str
    role: str

    def may(self, needed: str) -> bool:
        """Whether this operator's role has the rights of ``needed``."""
        return ROLES.index(self.role) >= ROLES.index(needed)


@dataclasses.dataclass(frozen=True, slots=True)
class OperatorRecord:
    """A named operator as the database keeps it (never its token)."""

    name: str
    role: str
    created_ms: int
    created_by: str
    revoked_ms: int | None = None
    revoked_by: str | None = None

    def body(self) -> dict[str, Any]:
        """The contract's view of the operator."""
        return {"name": self.name, "role": self.role, "created_at": iso_from_ms(self.created_ms),
                "created_by": self.created_by,
                "revoked_at": None if self.revoked_ms is None else iso_from_ms(self.revoked_ms),
                "revoked_by": self.revoked_by}


class Forbidden(errors.SeckillError):
    """403: the operator's role lacks the right this call needs (carries ``role_needed``)."""

    status = 403
    code = "forbidden"
    default_message = "your role may not do this"


class OperatorExists(errors.SeckillError):
    """409: the name is taken, by an operator in force or a revoked one (carries ``name``)."""

    status = 409
    code = "operator_exists"
    default_message = "an operator of this name exists, or existed"


class UnknownOperator(errors.SeckillError):
    """404: no operator in force of this name (carries ``name``)."""

    status = 404
    code = "unknown_operator"
    default_message = "no operator in force has this name"


def forbidden(who: Operator, needed: str) -> Forbidden:
    """The refusal of ``who``'s call that needs the role ``needed``."""
    return Forbidden(f"this needs the {needed} role; {who.name} is {_article(who.role)} "
                     f"{who.role}", role_needed=needed, role=who.role)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def new_token() -> str:
    """A fresh operator token: ``sko_`` and 32 random bytes."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the database keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_operator_token(token: str) -> bool:
    """Whether ``token`` has a named operator's form (worth looking up at all)."""
    return token.startswith(TOKEN_PREFIX) and len(token) <= 100


def checked_name(name: object) -> str:
    """An operator's name if well formed; BadRequest naming ``name`` otherwise."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise errors.BadRequest(f"name must match {NAME_RULE}", field="name")
    return name


def checked_role(role: object) -> str:
    """``role`` if it is one of the roles; BadRequest naming ``role`` otherwise."""
    if role not in ROLES:
        raise errors.BadRequest(f"role must be one of {', '.join(ROLES)}", field="role")
    assert isinstance(role, str)
    return role


def parse_new_operator(body: Any) -> tuple[str, str]:
    """The name and role a ``POST /admin/operators`` body asks for; BadRequest naming the
    field otherwise."""
    body = bodies.known_fields(bodies.json_object(
        body, '{"name": <name>, "role": "viewer" | "operator" | "admin"}'), _FIELDS)
    missing = sorted(_FIELDS - set(body))
    if missing:
        raise errors.BadRequest(f"{missing[0]} is required", field=missing[0])
    name = checked_name(body["name"])
    if name == BOOTSTRAP_NAME:  # taken for good: the audit must name one operator
        raise OperatorExists(f"{BOOTSTRAP_NAME!r} is the name of SECKILL_ADMIN_TOKEN",
                             name=name)
    return name, checked_role(body["role"])
