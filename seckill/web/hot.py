"""The purchase lane: the sale's two hot routes answered straight from WSGI.

In a flash sale two routes carry nearly all the traffic: ``GET /seckill/url`` (every buyer's
signed URL) and ``POST /seckill/<aid>/<token>/buy`` (the purchases, and the flood of late
buyers turned away by the sold-out flag). Flask's per-request machinery (request and app
contexts, URL matching, the request and response objects, hooks, error handlers) costs more
CPU per request than the edge's own checks (~50 µs in-process for a bare endpoint, measured
with ``python -m bench.profile``; see the README's Performance section). So this middleware,
in front of the Flask app, answers those routes itself with the **same** parts the Flask path
uses:

* the edge filters the Flask views are marked with (``edge.filters`` on ``user.purchase`` and
  ``user.purchase_url``), run by :meth:`edge.Edge.run` on a :class:`edge.Passage` built from
  the WSGI environ;
* :func:`seckill.api.buy` and :func:`seckill.api.issue_url`, what the views call;
* the error mapping (:func:`edge.errors.as_domain_error`, each ``errors`` exception's body and
  headers), the outcome and instance headers and the metrics of ``create_app``'s
  ``after_request``.

Anything out of the ordinary goes to Flask untouched, before this lane has read or changed
anything: another method or path, a path Flask would not match the same way, a query string
that needs decoding, a chunked body or a Content-Length that is not a plain number.
``tests/test_lane.py`` sends the same requests to both and compares status, headers and body.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask
from werkzeug.http import HTTP_STATUS_CODES

from edge import Edge, Passage
from seckill import metrics
from seckill.domain import errors
from seckill.web.errors import MAX_BODY, as_domain_error
from seckill.web.routes import buy, issue_url

PURCHASE = "user.purchase"
PURCHASE_URL = "user.purchase_url"
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# Werkzeug's status lines ("410 GONE"), so both paths write the same bytes.
_STATUS = {code: f"{code} {text.upper()}" for code, text in HTTP_STATUS_CODES.items()}
# A query the lane reads as Flask would without decoding anything: activity=<plain id>.
_PLAIN_QUERY = re.compile(r"activity=[A-Za-z0-9_-]{1,64}")


class PurchaseLane:
    def __init__(self, app: Flask, flask_app: WSGIApp) -> None:
        self.flask_app = flask_app
        self.services = app.extensions["seckill"]
        self.instance: str = self.services.settings.instance
        chain = Edge.of(app)
        self.plans = {endpoint: chain.plan(app, endpoint) for endpoint in (PURCHASE, PURCHASE_URL)}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        raw_path: str = environ.get("PATH_INFO") or ""
        length_header = environ.get("CONTENT_LENGTH") or "0"
        if "HTTP_TRANSFER_ENCODING" in environ or not length_header.isdigit():
            return self.flask_app(environ, start_response)
        if method == "POST":
            parts = raw_path.split("/")
            # '', 'seckill', aid, token, 'buy': what the Flask route matches (no empty segment,
            # no slash inside one); anything else is Flask's to answer (404, redirects ...).
            if (len(parts) != 5 or parts[1] != "seckill" or parts[4] != "buy" or parts[0]
                    or not parts[2] or not parts[3]):
                return self.flask_app(environ, start_response)
            # PATH_INFO is latin-1 by WSGI's rule; the URL's bytes are UTF-8 (as werkzeug).
            view_args = {"aid": parts[2].encode("latin-1").decode(errors="replace"),
                         "token": parts[3].encode("latin-1").decode(errors="replace")}
            return self._answer(environ, start_response, PURCHASE, view_args, {},
                                int(length_header))
        if method == "GET" and raw_path == "/seckill/url":
            query: str = environ.get("QUERY_STRING") or ""
            if _PLAIN_QUERY.fullmatch(query) is None:
                return self.flask_app(environ, start_response)
            return self._answer(environ, start_response, PURCHASE_URL, {},
                                {"activity": query[len("activity="):]}, int(length_header))
        return self.flask_app(environ, start_response)

    def _answer(self, environ: dict[str, Any], start_response: StartResponse, endpoint: str,
                view_args: dict[str, str], args: dict[str, str], length: int
                ) -> Iterable[bytes]:
        started = time.perf_counter()
        headers: dict[str, str] = {}
        try:
            if length > MAX_BODY:
                raise errors.TooLarge()
            wanted, checks = self.plans[endpoint]
            passage = Passage(self.services, wanted, endpoint,
                              environ.get("HTTP_AUTHORIZATION"), view_args, args)
            Edge.run(passage, checks)
            if endpoint == PURCHASE:
                body = buy(self.services, passage.activity, passage.require_uid(),
                           environ["wsgi.input"].read(length) if length else b"")
            else:
                body = issue_url(self.services, passage.activity, passage.require_uid())
            status, outcome = 200, "ok"
        except Exception as exc:  # every failure becomes the contract's JSON, as in Flask
            path = environ.get("PATH_INFO") or ""
            failure = as_domain_error(exc, environ.get("REQUEST_METHOD") or "", path)
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
        metrics.answered(endpoint, outcome)
        if endpoint == PURCHASE:
            metrics.purchase_took(outcome, time.perf_counter() - started)
        return [payload]
