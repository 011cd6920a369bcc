"""Named operators as the tests make them: through the admin API with the bootstrap admin's
token (``SECKILL_ADMIN_TOKEN``), each with the ``Authorization`` headers of their token, and
the roles in the order of their rights."""

from __future__ import annotations

import uuid

from flask.testing import FlaskClient

from seckill.domain.operators import ROLES
from tests.support.api import expect
from tests.support.tokens import ADMIN

__all__ = ["ROLES", "bearer", "make_operator"]


def bearer(token: str) -> dict[str, str]:
    """The ``Authorization`` headers of ``token``."""
    return {"Authorization": f"Bearer {token}"}


def make_operator(client: FlaskClient, role: str, name: str | None = None) -> dict[str, str]:
    """A new operator of ``role`` (named ``name``, or ``<role>-<random>``): their headers."""
    name = name or f"{role}-{uuid.uuid4().hex[:8]}"
    made = expect(client.post("/admin/operators", json={"name": name, "role": role},
                              headers=ADMIN), 201)
    assert (made["name"], made["role"]) == (name, role), made
    return bearer(made["token"])
