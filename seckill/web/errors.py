"""Every error is JSON: the one place where outcomes become response bodies."""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from seckill.domain import errors
from seckill.web.jsonio import json_response

log = logging.getLogger("seckill")

MAX_BODY = 4096

_HTTP_CODES = {
    400: errors.BadRequest,
    401: errors.Unauthenticated,
    404: errors.NotFound,
    405: errors.MethodNotAllowed,
    413: errors.TooLarge,
}


def error_response(exc: errors.SeckillError) -> Response:
    g.outcome = exc.code
    response = json_response(exc.body(), exc.status)
    for name, value in exc.headers().items():
        response.headers[name] = value
    return response


def _domain(exc: errors.SeckillError) -> Response:
    return error_response(exc)


def _http(exc: HTTPException) -> Response:
    status = exc.code or 500
    kind = _HTTP_CODES.get(status)
    if kind is errors.BadRequest:
        response = error_response(errors.BadRequest(str(exc.description or "")))
    elif kind is not None:
        response = error_response(kind())
    else:
        code = exc.name.lower().replace(" ", "_")
        g.outcome = code
        response = json_response({"error": code, "message": exc.description}, status)
    valid_methods = getattr(exc, "valid_methods", None)
    if status == 405 and valid_methods:
        response.headers["Allow"] = ", ".join(valid_methods)
    return response


def as_domain_error(exc: Exception, method: str, path: str) -> errors.SeckillError:
    """What any failure means to the client, logged once here (also used by seckill.lane)."""
    if isinstance(exc, errors.SeckillError):
        return exc
    if isinstance(exc, redis.RedisError):
        # Fail closed: whatever needed Redis (the sale window, a purchase, an order lookup)
        # cannot be decided; the contract's answer is 503 unavailable, not 500.
        log.warning("redis unavailable on %s %s: %s", method, path, exc)
        return errors.Unavailable(detail=type(exc).__name__)
    log.error("unexpected failure on %s %s", method, path, exc_info=exc)
    return errors.SeckillError()


def _failure(exc: Exception) -> Response:
    """Redis unreachable (503) or anything unexpected (500): ``as_domain_error`` decides."""
    return error_response(as_domain_error(exc, request.method, request.path))


class JsonErrors:
    """Registers the error handlers and the body-size guard (the first check of all)."""

    def init_app(self, app: Flask) -> None:
        app.extensions["edge.json_errors"] = self
        app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
        # Flask's automatic OPTIONS answers 200 with an empty text/html body; the API has no
        # OPTIONS, so it gets the contract's JSON 405. Must be set before routes are added.
        app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
        app.before_request(self._guard_body)
        app.register_error_handler(errors.SeckillError, _domain)
        app.register_error_handler(HTTPException, _http)
        app.register_error_handler(Exception, _failure)

    @staticmethod
    def _guard_body() -> None:
        length = request.content_length
        if length is not None and length > MAX_BODY:
            raise errors.TooLarge()
