"""Every error is JSON: the one place where outcomes and failures become response bodies."""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response, g, request
from redis.exceptions import RedisClusterException
from werkzeug.exceptions import HTTPException

from seckill.domain import errors
from seckill.domain.sizes import OPERATOR_MAX_BODY
from seckill.sql.engine import database_unavailable
from seckill.store.plumbing.connection import unavailable
from seckill.web.body import body_limit, declared_length, refuse_nul_query
from seckill.web.jsonio import json_response

log = logging.getLogger(__name__)

_HTTP_CODES: dict[int, type[errors.SeckillError]] = {
    401: errors.Unauthenticated,
    404: errors.NotFound,
    413: errors.TooLarge,
}


def as_domain_error(exc: BaseException, method: str, path: str) -> errors.SeckillError:
    """What any failure means to the client, logged once here (Flask's views and the hot
    routes alike)."""
    if isinstance(exc, errors.SeckillError):
        return exc
    if isinstance(exc, HTTPException):
        status = exc.code or 500
        if status == 400:
            return errors.BadRequest(str(exc.description or ""))
        if status == 405:
            return errors.MethodNotAllowed(tuple(getattr(exc, "valid_methods", None) or ()))
        if status in _HTTP_CODES:
            return _HTTP_CODES[status]()
        return _OtherHttp(exc)
    if isinstance(exc, redis.RedisError | RedisClusterException):
        # Fail closed: whatever needed Redis (the sale window, a purchase, an order lookup)
        # cannot be decided; the contract's answer is 503 unavailable, not 500.
        # NOREPLICAS (no replica online) keeps its own detail on every route: refused before
        # anything was decided. The one place: the store's methods let a RedisError through
        # to here rather than convert it each (tests/test_redis_failure_mapping.py). A cluster
        # client that reaches no node raises RedisClusterException, outside RedisError.
        log.warning("redis unavailable on %s %s: %s", method, path, exc)
        return unavailable(exc)
    if (away := database_unavailable(exc)) is not None:
        # Every wait on the database is bounded (seckill.sql.engine): when it is away or hung,
        # what needed it answers 503 at once, never 500 and never a hang.
        log.warning("database unavailable on %s %s: %s", method, path, exc)
        return away
    log.error("unexpected failure on %s %s", method, path, exc_info=exc)
    return errors.SeckillError()


class _OtherHttp(errors.SeckillError):
    """An HTTP error werkzeug raised that the contract has no code of its own for."""

    def __init__(self, exc: HTTPException) -> None:
        super().__init__(str(exc.description or ""))
        self.status = exc.code or 500  # type: ignore[misc]
        self.code = exc.name.lower().replace(" ", "_")  # type: ignore[misc]


def error_response(exc: errors.SeckillError) -> Response:
    """The JSON response of an outcome, with its headers; sets the request's outcome."""
    g.outcome = exc.code
    response = json_response(exc.body(), exc.status)
    for name, value in exc.headers().items():
        response.headers[name] = value
    return response


def _guard_request() -> None:
    environ = request.environ
    declared_length(environ)
    # werkzeug's own parsers, if ever used, hold the route to the same limit as the guard.
    request.max_content_length = body_limit(environ)
    if "//" in (environ.get("PATH_INFO") or ""):
        # werkzeug strips leading slashes before matching (//healthz would be /healthz);
        # the url_map merges no other doubled slash (seckill.web.app): one path, one answer.
        raise errors.NotFound()
    refuse_nul_query(environ.get("QUERY_STRING") or "")


def _handle(exc: Exception) -> Response:
    return error_response(as_domain_error(exc, request.method, request.path))


class JsonErrors:
    """Registers the error handlers and the request guard (the first check of all: the body's
    size, a doubled slash, a NUL in the query)."""

    def init_app(self, app: Flask) -> None:
        """Every exception a view raises answers JSON; a body over its route's limit, a path
        with "//" or a query with a NUL is refused first."""
        app.extensions["seckill.json_errors"] = self
        # Flask's automatic OPTIONS answers 200 with an empty text/html body; the API has no
        # OPTIONS, so it gets the contract's JSON 405. Must be set before routes are added.
        app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
        # werkzeug's own parsers, if ever used: the largest route's, each request its own
        # (_guard_request).
        app.config["MAX_CONTENT_LENGTH"] = OPERATOR_MAX_BODY
        app.before_request(_guard_request)
        app.register_error_handler(Exception, _handle)
