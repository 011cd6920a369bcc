"""The admin's actions on named operators: make one (its token shown this once), list them,
revoke one. Kept in the database; every gateway process takes a new token, and refuses a
revoked one, within a second (``seckill.store.operators``), this one at once."""

from __future__ import annotations

from typing import Any

from seckill.domain.operators import (
    BOOTSTRAP_NAME,
    Operator,
    OperatorRecord,
    UnknownOperator,
    checked_name,
    checked_role,
    parse_new_operator,
)
from seckill.operator import trail
from seckill.services import Services

__all__ = ["add", "checked_name", "checked_role", "listed", "new_operator", "revoke"]


def new_operator(body: Any) -> tuple[str, str]:
    """The name and role an admin's body asks for (the admin API's validation: a BadRequest
    naming the field otherwise; OperatorExists for the bootstrap admin's name). Writes
    nothing."""
    return parse_new_operator(body)


def add(services: Services, name: str, role: str, *, by: Operator) -> tuple[OperatorRecord, str]:
    """Make an operator; OperatorExists if the name was ever given. Returns them and their
    token, which nothing keeps: shown once, by the caller."""
    with trail.action(by, "operator.add", operator=name, new_role=role):
        return services.operators.enrol(name, role, by.name)


def revoke(services: Services, name: str, *, by: Operator) -> OperatorRecord:
    """Revoke an operator in force (their row stays, so the audit still names them);
    UnknownOperator if there is none of that name."""
    with trail.action(by, "operator.revoke", operator=name):
        if name == BOOTSTRAP_NAME:
            raise UnknownOperator(f"{BOOTSTRAP_NAME!r} is SECKILL_ADMIN_TOKEN, not a named "
                                  "operator: change that setting to revoke it", name=name)
        return services.operators.revoke(name, by.name)


def listed(services: Services) -> list[OperatorRecord]:
    """Every operator ever made, revoked ones too, by name (never a token or its hash)."""
    return services.operators.roster()
