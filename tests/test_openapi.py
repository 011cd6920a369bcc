"""The OpenAPI document (``seckill/web/openapi.json``) and the app agree: every route of the app
is documented, every documented operation exists, and ``GET /openapi.json`` serves the file."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import schemathesis
from flask import Flask
from schemathesis.core.result import Ok
from werkzeug.exceptions import MethodNotAllowed, NotFound

from edge import Route
from seckill.web import hot
from seckill.web.service import OPENAPI_DOCUMENT
from tests.support.api import expect
from tests.support.openapi_check import (
    METHODS,
    ContractViolation,
    check_response,
    document,
    documented_path,
)

# Flask's default static route: create_app keeps it, with no folder behind it (see below).
FLASK_STATIC = "static"


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(path template, method, operation) of every documented operation."""
    return [(path, method, item[method])
            for path, item in document()["paths"].items()
            for method in METHODS if method in item]


def sample_path(template: str) -> str:
    """A concrete path of a template: each parameter a plain, well-formed value."""
    return re.sub(r"\{[^}]+\}", "x1", template)


def hot_routes() -> dict[str, Route]:
    """The routes answered in front of Flask (seckill.web.hot), by endpoint."""
    return {value.endpoint: value for value in vars(hot).values() if isinstance(value, Route)}


def test_the_document_is_an_openapi_3_1_document_schemathesis_loads():
    doc = document()
    assert doc["openapi"].startswith("3.1.")
    loaded = schemathesis.openapi.from_dict(doc)
    labels = {result.ok().label for result in loaded.get_all_operations()
              if isinstance(result, Ok)}
    assert labels == {f"{method.upper()} {path}" for path, method, _ in operations()}
    ids = [op["operationId"] for _, _, op in operations()]
    assert len(ids) == len(set(ids))
    for _, _, operation in operations():
        assert operation.get("x-endpoint"), operation["operationId"]


def test_every_flask_route_is_documented_with_its_methods(app: Flask):
    documented = {op["x-endpoint"]: (path, method) for path, method, op in operations()}
    seen = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == FLASK_STATIC:
            continue  # test_no_static_route_is_served, below
        assert rule.endpoint in documented, f"{rule.rule} ({rule.endpoint}) is not documented"
        path, method = documented[rule.endpoint]
        assert re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule) == path
        methods = {method.upper()} | ({"HEAD"} if method == "get" else set())
        assert set(rule.methods or ()) - {"OPTIONS"} == methods, rule.rule
        seen.add(rule.endpoint)
    assert set(documented) - seen == set(hot_routes()), "documented, but served by nothing"


def test_every_documented_flask_operation_is_routed_to_its_endpoint(app: Flask):
    adapter = app.url_map.bind("localhost")
    for path, method, operation in operations():
        if operation["x-endpoint"] in hot_routes():
            continue
        endpoint, _ = adapter.match(sample_path(path), method.upper())
        assert endpoint == operation["x-endpoint"], (method, path)


def test_the_hot_routes_are_documented_and_answer_their_methods_only(app: Flask):
    """The hot routes are outside Flask's url_map: ask the app itself."""
    documented = {op["x-endpoint"]: (path, method) for path, method, op in operations()}
    adapter = app.url_map.bind("localhost")
    client = app.test_client()
    assert hot_routes(), "seckill.web.hot has no Route"
    for endpoint in hot_routes():
        assert endpoint in documented, f"the hot route {endpoint} is not documented"
        path, method = documented[endpoint]
        concrete = sample_path(path)
        with pytest.raises(NotFound):  # Flask has no such route: the middleware answers it
            adapter.match(concrete, method.upper())
        # Without a token the route itself answers: 401, not 404 or 405.
        expect(client.open(concrete, method=method.upper()), 401, "unauthenticated")
        other = "DELETE"
        refused = client.open(concrete, method=other)
        expect(refused, 405, "method_not_allowed")
        allowed = {m.strip() for m in refused.headers["Allow"].split(",")}
        # Every method documented on the path (a path may have a hot operation per method).
        on_path = {m.upper() for m in METHODS if m in document()["paths"][path]}
        assert allowed == on_path | ({"HEAD"} if "GET" in on_path else set())


def test_undocumented_methods_answer_405_with_allow(app: Flask):
    client = app.test_client()
    for path, item in document()["paths"].items():
        concrete = sample_path(path)
        documented = {m for m in METHODS if m in item}
        for method in sorted({"put", "patch", "delete"} - documented):
            refused = client.open(concrete, method=method.upper())
            expect(refused, 405, "method_not_allowed")
            assert refused.headers["Allow"], path


def test_openapi_json_is_served_as_is_without_auth(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_data() == OPENAPI_DOCUMENT.read_bytes()
    assert json.loads(response.get_data()) == document()
    assert response.headers["X-Seckill-Outcome"] == "ok"
    assert client.head("/openapi.json").status_code == 200


def test_no_static_route_is_served(app: Flask):
    assert FLASK_STATIC not in {rule.endpoint for rule in app.url_map.iter_rules()}
    with pytest.raises((NotFound, MethodNotAllowed)):
        app.url_map.bind("localhost").match("/static/x", "OPTIONS")


def test_every_operation_documents_413_too_large():
    # Every route answers 413 to a body over 4 KiB, before anything else (body.py); an operation
    # that left it out had a fuzzed 5 KiB webhook registration counted as an undocumented 413.
    missing = [f"{method.upper()} {path}" for path, method, operation in operations()
               if operation["responses"].get("413") != {"$ref": "#/components/responses/TooLarge"}]
    assert missing == []


def test_every_operation_documents_414_too_large():
    # A request line over gunicorn's 4,094 bytes (nginx's 8 KiB) is 414 on every path, before
    # any route: a very long /admin/activities query was an undocumented 414.
    missing = [f"{method.upper()} {path}" for path, method, operation in operations()
               if operation["responses"].get("414")
               != {"$ref": "#/components/responses/UriTooLong"}]
    assert missing == []


def test_the_answer_checker_matches_paths_as_openapi_and_the_app_do():
    # A concrete path before a template (OpenAPI's rule); it matched the template first and
    # held the console's JSON state to the console files' text types.
    assert documented_path("/admin/console/state") == "/admin/console/state"
    assert documented_path("/admin/console/console.js") == "/admin/console/{name}"
    # The console's vendored files hold a slash (the parameter says so); no other one may.
    assert documented_path("/admin/console/vendor/uPlot.iife.min.js") == "/admin/console/{name}"
    assert documented_path("/seckill/a1/x/y/buy") is None
    # /admin/ is answered as /admin too; a doubled slash is no documented path (a 404).
    assert documented_path("/admin") == "/admin/"
    assert documented_path("//healthz") is None and documented_path("/admin//") is None


def test_the_answer_checker_takes_a_nul_query_400_anywhere_and_nothing_else_undocumented():
    bad = json.dumps({"error": "bad_request", "message": "a NUL"}).encode()
    json_type = {"Content-Type": "application/json"}
    check_response("GET", "/seckill/time", 400, json_type, bad, query="x=%00")
    with pytest.raises(ContractViolation, match="not documented"):
        check_response("GET", "/seckill/time", 400, json_type, bad, query="x=1")
    other = json.dumps({"error": "forbidden", "message": "no"}).encode()
    with pytest.raises(ContractViolation, match="expected error 'bad_request', got 'forbidden'"):
        check_response("GET", "/seckill/time", 400, json_type, other, query="x=%00")


def _new_activity_errors(body: dict[str, Any]) -> list[str]:
    """The document's complaints about ``body`` as a new activity (any kind)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    base = "urn:seckill:openapi"
    whole: Resource[Any] = Resource.from_contents(document(), default_specification=DRAFT202012)
    name = "NewPacketsActivity" if body.get("kind") == "packets" else "NewStockActivity"
    validator = Draft202012Validator({"$ref": f"{base}#/components/schemas/{name}"},
                                     registry=Registry().with_resource(base, whole))
    return [error.message for error in validator.iter_errors(body)]


@pytest.mark.parametrize("kind", ["stock", "packets"])
def test_the_document_refuses_what_only_a_queue_or_draw_may_have(kind: str) -> None:
    """``queue_opens_at`` and ``challenge: true`` need a queue or draw admission: the gateway
    answers 400 without one, so the document says the body is invalid too (schemathesis
    would otherwise call the 400 a schema-valid request rejected)."""
    body: dict[str, Any] = {"id": "a1", "name": "A", "starts_at": "2030-01-01T10:00:00Z",
                            "ends_at": "2030-01-01T11:00:00Z"}
    body |= ({"kind": "packets", "amount": 100, "count": 10} if kind == "packets"
             else {"total": 10})
    assert _new_activity_errors(body) == []
    assert _new_activity_errors(body | {"challenge": False}) == []
    assert _new_activity_errors(body | {"challenge": True}) != []
    assert _new_activity_errors(body | {"admission": "first_come", "challenge": True}) != []
    queued = body | {"admission": "queue", "queue_opens_at": "2030-01-01T09:00:00Z"}
    assert _new_activity_errors(queued | {"challenge": True}) == []
    assert _new_activity_errors(body | {"queue_opens_at": "2030-01-01T09:00:00Z"}) != []
