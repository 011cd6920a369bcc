"""Which role may call which operator route: the one table (``seckill.web.routes.ROLES``), the
OpenAPI document's ``x-role`` of each operation and docs/API.md's table say the same, and every
documented operator operation answers 403 ``forbidden`` (with ``role_needed``) to exactly the
roles below its own, on one server and on the cluster; a refused call changes nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from seckill.domain.operators import ADMIN as ADMIN_ROLE
from seckill.domain.operators import OPERATOR, ROLES, VIEWER
from seckill.web.routes import ROLES as TABLE
from tests.support.api import create_activity, expect
from tests.support.backends import redis_backend  # noqa: F401  (the tests with Redis: both)
from tests.support.openapi_check import METHODS, document
from tests.support.operators import make_operator
from tests.support.tokens import ADMIN, user_headers

API_MD = Path(__file__).resolve().parents[1] / "docs" / "API.md"


def operator_operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) of every operation that takes the operator token alone."""
    return [(path, method, item[method]) for path, item in document()["paths"].items()
            for method in METHODS if method in item
            and item[method].get("security") == [{"operatorToken": []}]]


def sample_path(template: str) -> str:
    """A concrete path of a template: each parameter a plain value no resource has."""
    return re.sub(r"\{[^}]+\}", "x1", template)


def as_written(template: str) -> str:
    """A path template as docs/API.md writes it: ``/admin/activities/<aid>``."""
    return re.sub(r"\{([^}]+)\}", r"<\1>", template)


def test_the_table_the_document_and_the_docs_say_the_same_roles() -> None:
    documented = {op["x-endpoint"]: op.get("x-role") for _, _, op in operator_operations()}
    assert documented == dict(TABLE)
    for _, _, op in operator_operations():
        forbidden = op["responses"].get("403")
        if op["x-role"] == VIEWER:  # every operator is at least a viewer
            assert forbidden is None, op["operationId"]
        else:
            assert forbidden == {"$ref": "#/components/responses/Forbidden"}, op["operationId"]
    # docs/API.md: "| `METHOD /path/<param>` | role | why |" rows under "### Roles".
    text = API_MD.read_text(encoding="utf-8")
    section = text[text.index("### Roles"):]
    section = section[:section.index("\n## ")]
    rows = dict(re.findall(r"^\| `([A-Z]+ /[^`]+)` \| (viewer|operator|admin) \|", section,
                           re.M))
    assert rows == {f"{method.upper()} {as_written(path)}": op["x-role"]
                    for path, method, op in operator_operations()}


def test_each_role_is_refused_exactly_the_routes_above_it(client) -> None:
    headers = {role: make_operator(client, role) for role in ROLES}
    operations = operator_operations()
    assert len(operations) == len(TABLE)
    for path, method, op in operations:
        needed = op["x-role"]
        for role in ROLES:
            body: dict[str, Any] | None = {} if method in ("post", "patch") else None
            answer = client.open(sample_path(path), method=method.upper(),
                                 headers=headers[role], json=body)
            what = (method, path, role)
            if ROLES.index(role) < ROLES.index(needed):
                refused = expect(answer, 403, "forbidden")
                assert (refused["role_needed"], refused["role"]) == (needed, role), what
                assert f"the {needed} role" in refused["message"], refused
            else:
                assert answer.status_code not in (401, 403), (what, answer.get_json())


def test_a_refused_call_changes_nothing_and_a_user_token_is_no_operator(client) -> None:
    viewer = make_operator(client, VIEWER)
    operator = make_operator(client, OPERATOR)
    aid = create_activity(client)["id"]
    expect(client.post(f"/admin/activities/{aid}/pause", headers=viewer), 403, "forbidden")
    expect(client.post(f"/admin/activities/{aid}/end", headers=viewer), 403, "forbidden")
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": -5}, headers=viewer),
           403, "forbidden")
    refused = expect(client.patch(f"/admin/activities/{aid}", json={"name": "Mine"},
                                  headers=operator), 403, "forbidden")
    assert refused["role_needed"] == ADMIN_ROLE
    expect(client.post("/admin/operators", json={"name": "sneaky", "role": ADMIN_ROLE},
                       headers=operator), 403, "forbidden")
    shown = expect(client.get(f"/admin/activities/{aid}", headers=viewer), 200)
    assert (shown["paused"], shown["state"], shown["total"], shown["name"]) == (
        False, "open", 10, "Test phone")
    listed = expect(client.get("/admin/operators", headers=ADMIN), 200)["operators"]
    assert "sneaky" not in {o["name"] for o in listed}
    # A buyer's token is nobody's on the operator side: 401, as before.
    expect(client.get("/admin/whoami", headers=user_headers("u1")), 401, "unauthenticated")
