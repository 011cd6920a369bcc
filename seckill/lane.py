"""The purchase lane: ``POST /seckill/<aid>/<token>/buy`` answered straight from WSGI.

In a flash sale this one route carries nearly all the traffic: the purchases, and the flood of
late buyers turned away by the sold-out flag. Flask's per-request machinery (request and app
contexts, URL matching, the request and response objects, hooks, error handlers) costs more
CPU per request than the edge's own checks (~50 µs in-process for a bare endpoint, measured
with ``python -m bench.profile``; see the README's Performance section). So this middleware,
in front of the Flask app, answers that route itself with the **same** parts the Flask path
uses:

* the edge filters the Flask view is marked with (``edge.filters`` on ``user.purchase``),
  run by :meth:`edge.Edge.run` on a :class:`edge.Passage` built from the WSGI environ;
* :func:`seckill.api.buy` (quantity, the script, the sold-out flag);
* the error mapping (:func:`edge.errors.as_domain_error`, each ``errors`` exception's body and
  headers), the outcome and instance headers and the metrics of ``create_app``'s
  ``after_request``.

Anything out of the ordinary goes to Flask untouched, before this lane has read or changed
anything: another method or path, a path Flask would not match the same way, a chunked body
or a Content-Length that is not a plain number. ``tests/test_lane.py`` sends the same requests
to both and compares status, headers and body.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask
from werkzeug.http import HTTP_STATUS_CODES

from edge import Edge, Passage
from edge.errors import MAX_BODY, as_domain_error
from seckill import errors, metrics
from seckill.api import buy

ENDPOINT = "user.purchase"
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# Werkzeug's status lines ("410 GONE"), so both paths write the same bytes.
_STATUS = {code: f"{code} {text.upper()}" for code, text in HTTP_STATUS_CODES.items()}


class PurchaseLane:
    def __init__(self, app: Flask, flask_app: WSGIApp) -> None:
        self.flask_app = flask_app
        self.services = app.extensions["seckill"]
        self.instance: str = self.services.settings.instance
        self.wanted, self.checks = Edge.of(app).plan(app, ENDPOINT)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return self.flask_app(environ, start_response)
        raw_path: str = environ.get("PATH_INFO") or ""
        parts = raw_path.split("/")
        # '', 'seckill', aid, token, 'buy': what the Flask route matches (no empty segment,
        # no slash inside one); anything else is Flask's to answer (404, redirects ...).
        if (len(parts) != 5 or parts[1] != "seckill" or parts[4] != "buy" or parts[0]
                or not parts[2] or not parts[3]):
            return self.flask_app(environ, start_response)
        length_header = environ.get("CONTENT_LENGTH") or "0"
        if "HTTP_TRANSFER_ENCODING" in environ or not length_header.isdigit():
            return self.flask_app(environ, start_response)
        return self._purchase(environ, start_response, parts, int(length_header))

    def _purchase(self, environ: dict[str, Any], start_response: StartResponse,
                  parts: list[str], length: int) -> Iterable[bytes]:
        started = time.perf_counter()
        # PATH_INFO is latin-1 by WSGI's rule; the URL's bytes are UTF-8 (werkzeug does this).
        aid = parts[2].encode("latin-1").decode(errors="replace")
        token = parts[3].encode("latin-1").decode(errors="replace")
        headers: dict[str, str] = {}
        try:
            if length > MAX_BODY:
                raise errors.TooLarge()
            passage = Passage(self.services, self.wanted, ENDPOINT,
                              environ.get("HTTP_AUTHORIZATION"), {"aid": aid, "token": token})
            Edge.run(passage, self.checks)
            body = buy(self.services, passage.activity, passage.require_uid(),
                       environ["wsgi.input"].read(length) if length else b"")
            status, outcome = 200, "ok"
        except Exception as exc:  # every failure becomes the contract's JSON, as in Flask
            failure = as_domain_error(exc, "POST", f"/seckill/{aid}/{token}/buy")
            status, outcome, body = failure.status, failure.code, failure.body()
            headers = failure.headers()
        payload = orjson.dumps(body)
        start_response(_STATUS[status], [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            *headers.items(),
            ("X-Seckill-Instance", self.instance),
            ("X-Seckill-Outcome", outcome),
        ])
        metrics.answered(ENDPOINT, outcome)
        metrics.purchase_took(outcome, time.perf_counter() - started)
        return [payload]
