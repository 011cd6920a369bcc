"""Check an answer of the gateway against its OpenAPI document (``seckill/web/openapi.json``).

:func:`check_response` finds the documented operation of a method and path, the documented
response of the status, and validates the body against that response's JSON Schema (Draft
2020-12, as OpenAPI 3.1 says) and the headers it requires. A path or method the document does
not list must answer the contract's error object (404 ``not_found``, 405 with ``Allow``, ...).
:class:`CheckedClient` is a Flask test client that checks every answer it gets.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from flask.testing import FlaskClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from werkzeug.datastructures import Headers

from seckill.web.service import OPENAPI_DOCUMENT

BASE = "urn:seckill:openapi"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# The answers any path or method may get that no operation lists (a path the document does not
# have, a method a path does not list, a body over its route's limit before routing, an unexpected
# failure).
UNDOCUMENTED = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 500: "internal"}


class ContractViolation(AssertionError):
    """An answer the OpenAPI document does not allow."""


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document, parsed once."""
    loaded: dict[str, Any] = json.loads(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))
    return loaded


@functools.cache
def _registry() -> Registry:
    resource: Resource[Any] = Resource.from_contents(document(),
                                                     default_specification=DRAFT202012)
    return Registry().with_resource(BASE, resource)


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _resolve(node: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An OpenAPI object that may be a ``$ref`` (to ``#/components/...``), and where it is."""
    where: tuple[str, ...] = ()
    while "$ref" in node:
        where = tuple(node["$ref"].removeprefix("#/").split("/"))
        node = document()
        for part in where:
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node, where


def _validate(instance: Any, location: tuple[str, ...], what: str) -> None:
    validator = Draft202012Validator({"$ref": BASE + "#" + _pointer(*location)},
                                     registry=_registry(),
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
    problems = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if problems:
        details = "; ".join(f"{list(p.absolute_path)}: {p.message}" for p in problems[:5])
        raise ContractViolation(f"{what}: {details}\nbody: {json.dumps(instance)[:500]}")


# A path parameter marked so in the document takes slashes as it stands (the console's
# ``vendor/uPlot.iife.min.js``, served by Flask's path converter); every other one is one segment.
SLASHES = "x-may-hold-slashes"


def _parameter_pattern(item: dict[str, Any], name: str) -> str:
    for operation in item.values():
        for parameter in operation.get("parameters", ()) if isinstance(operation, dict) else ():
            if parameter.get("in") == "path" and parameter["name"] == name:
                return ".+" if parameter.get(SLASHES) else "[^/]+"
    return "[^/]+"


@functools.cache
def _templates() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Each documented path's pattern, the concrete paths first: OpenAPI matches
    ``/admin/console/state`` before ``/admin/console/{name}``. A documented path ending in a
    slash (the console's ``/admin/``) is answered without it too, as its summary says."""
    patterns = []
    for path, item in document()["paths"].items():
        pattern = ""
        for part in re.split(r"(\{[^}]+\})", path):
            if part.startswith("{"):
                pattern += _parameter_pattern(item, part[1:-1])
            else:
                pattern += re.escape(part)
        if path.endswith("/") and path != "/":
            pattern += "?"
        patterns.append((re.compile("^" + pattern + "$"), path))
    return tuple(sorted(patterns, key=lambda entry: "{" in entry[1]))


def documented_path(path: str) -> str | None:
    """The document's path template that ``path`` matches (``/seckill/{aid}/order``), if any."""
    for pattern, template in _templates():
        if pattern.fullmatch(path):
            return template
    return None


def _check_error(raw: bytes, content_type: str, status: int, what: str,
                 expected: str | None) -> None:
    """An answer no operation lists: JSON, the contract's error object with ``expected``'s code
    (None: nothing allows this status here)."""
    if content_type != "application/json":
        raise ContractViolation(f"{what}: Content-Type {content_type!r}, not JSON")
    if expected is None:
        raise ContractViolation(f"{what}: status {status} is not documented")
    body = json.loads(raw)
    _validate(body, ("components", "schemas", "Error"), what)
    if body["error"] != expected:
        raise ContractViolation(f"{what}: expected error {expected!r}, got {body['error']!r}")


def check_response(method: str, path: str, status: int, headers: Mapping[str, str] | Headers,
                   raw: bytes, query: str = "") -> None:
    """Raise ContractViolation unless the document allows this answer to ``method path``
    (``path`` as the application got it, ``query`` its query string)."""
    what = f"{method} {path} -> {status}"
    method = method.lower()
    content_type = headers.get("Content-Type", "").split(";")[0].strip()
    if status == 400 and ("%00" in query or "\x00" in query):
        # Any path, documented or not: a query holding a NUL is 400 bad_request before
        # routing (the document's description).
        if method != "head":
            _check_error(raw, content_type, status, what, "bad_request")
        return
    head = method == "head"
    if head:
        method = "get"  # every GET also answers HEAD: the same status and headers, no body
    template = documented_path(path)
    operation = None if template is None else document()["paths"][template].get(method)
    if operation is None:
        if not head:
            _check_error(raw, content_type, status, what, UNDOCUMENTED.get(status))
        if status == 405 and not headers.get("Allow"):
            raise ContractViolation(f"{what}: a 405 without an Allow header")
        return
    assert template is not None
    documented = operation["responses"].get(str(status))
    if documented is None:
        raise ContractViolation(f"{what}: status {status} is not documented for "
                                f"{method.upper()} {template}")
    response, where = _resolve(documented)
    if not where:
        where = ("paths", template, method, "responses", str(status))
    for name, header in response.get("headers", {}).items():
        header, _ = _resolve(header)
        if header.get("required") and name not in headers:
            raise ContractViolation(f"{what}: the {name} header is missing")
    media = response.get("content", {})
    if content_type not in media:
        raise ContractViolation(f"{what}: Content-Type {content_type!r}, documented: "
                                f"{sorted(media)}")
    if head or content_type != "application/json":
        return
    _validate(json.loads(raw), (*where, "content", "application/json", "schema"), what)


class CheckedClient(FlaskClient):
    """A Flask test client that checks every answer against the OpenAPI document."""

    def open(self, *args: Any, **kwargs: Any) -> Any:
        """Send the request as FlaskClient does; raise ContractViolation on an undocumented
        answer."""
        response = super().open(*args, **kwargs)
        request = response.request
        # PATH_INFO as the app routed it: request.path folds a leading "//" into "/".
        path = request.environ["PATH_INFO"].encode("latin-1").decode("utf-8", "replace")
        check_response(request.method, path, response.status_code, response.headers,
                       response.get_data(), request.environ.get("QUERY_STRING", ""))
        return response
