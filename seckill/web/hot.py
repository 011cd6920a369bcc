"""The sale's hot routes, answered straight from WSGI: the only code that answers them.

``GET /seckill/url`` (every buyer's signed URL), ``POST /seckill/<aid>/<token>/buy`` (the
purchases, and the flood turned away by the sold-out flag) and, on a queue or draw activity,
``GET``/``POST /seckill/<aid>/queue`` (every waiter's polls, and the joins) carry nearly all
of a sale's traffic. Flask's per-request machinery (contexts, URL matching, request and
response objects, hooks) costs more CPU than the edge's own checks, so this middleware in
front of Flask answers every request to these paths itself: the usual ones on a short path,
the unusual ones (chunked bodies, queries that need decoding, other methods) through
werkzeug's own helpers, so they get Flask's answers. Any other path goes to Flask untouched.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import orjson
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Request

from edge.chain import (
    IN_STOCK,
    NOT_BLOCKED,
    PURCHASE_URL,
    RATE,
    SOLD_OUT,
    USER,
    WINDOW,
    Chain,
    Passage,
    Route,
)
from edge.purchase_url import PurchaseUrlSigner
from seckill.domain import errors
from seckill.domain.admission import DRAW
from seckill.domain.clock import now_ms
from seckill.domain.people import buyer
from seckill.domain.variants import parse_purchase as parse_variant_purchase
from seckill.store.sale.admission.queue import AdmissionQueue
from seckill.store.sale.state import SaleState
from seckill.web.body import (
    WSGIEnviron,
    declared_length,
    json_body,
    parse_quantity,
    purchase_terms,
    read_body,
    refuse_nul_query,
    request_arrival_ms,
)
from seckill.web.edge_cache import PURCHASE_REFUSALS, URL_REFUSALS, cache_headers
from seckill.web.errors import as_domain_error
from seckill.web.finish import PURCHASE, Finish

StartResponse = Callable[..., Any]
WSGIApp = Callable[[WSGIEnviron, StartResponse], Iterable[bytes]]

# NOT_BLOCKED on every route: a blocked buyer is refused whatever they hold (a signed URL, a
# queue admission, a drawn place).
BUY = Route(PURCHASE, USER, NOT_BLOCKED, WINDOW, SOLD_OUT, PURCHASE_URL)
URL = Route("user.purchase_url", USER, NOT_BLOCKED, WINDOW, IN_STOCK, RATE)
# No window filter: the queue is joined and polled before the sale starts. No rate filter:
# a poll is one round trip, and polling more often changes nobody's place.
QUEUE_STATUS = Route("user.queue_status", USER, NOT_BLOCKED)
QUEUE_JOIN = Route("user.queue_join", USER, NOT_BLOCKED)
# What nginx may repeat of each route's refusals (seckill.web.edge_cache).
_SHARED = {BUY.endpoint: PURCHASE_REFUSALS, URL.endpoint: URL_REFUSALS}
_ALLOWED = {BUY.endpoint: ("POST",), URL.endpoint: ("GET", "HEAD"),
            QUEUE_STATUS.endpoint: ("GET", "HEAD", "POST"), QUEUE_JOIN.endpoint: ("POST",)}

# Werkzeug's status lines ("410 GONE"): the same bytes Flask writes.
_STATUS = {code: f"{code} {text.upper()}" for code, text in HTTP_STATUS_CODES.items()}
# A proof-of-work solution as the contract allows it: base64, at most 1024 characters.
_ALTCHA = re.compile(r"[A-Za-z0-9+/]{0,1022}={0,2}")
# A purchase refused before anything was decided (no connection; a cluster with uncovered
# slots; a server still loading; no replica to confirm it): on a full data disk that is the
# disk's doing (the embedded Valkey, a cluster node that cannot save its config, or a
# replica that cannot write, is down because of it), so the buyer hears "storage", as when
# Redis itself refuses the write. A lost reply is not one of these: its outcome is unknown.
UNDECIDED = frozenset({"NotSent", "ClusterDownError", "BusyLoadingError", "no_replica"})
STORAGE = "the store's disk takes no writes now; nothing was decided, try again shortly"
# A query read without decoding anything: activity=<plain id>.
_PLAIN_QUERY = re.compile(r"activity=[A-Za-z0-9_-]{1,64}")


def _decoded(segment: str) -> str:
    # PATH_INFO is latin-1 by WSGI's rule; the URL's bytes are UTF-8 (as werkzeug reads them).
    return segment.encode("latin-1").decode(errors="replace")


def purchase_deadline(stamp: str | None, received_ms: int, budget_ms: int) -> int:
    """The moment (epoch ms) after which a purchase may no longer be decided: ``budget_ms``
    after its arrival (:func:`request_arrival_ms`): a request that waited in a stalled
    instance is measured from when its buyer's clock started."""
    return request_arrival_ms(stamp, received_ms) + budget_ms


def _query(environ: WSGIEnviron) -> dict[str, str]:
    query: str = environ.get("QUERY_STRING") or ""
    if _PLAIN_QUERY.fullmatch(query) is not None:
        return {"activity": query[len("activity="):]}
    activity = Request(environ).args.get("activity")  # decoded exactly as Flask would
    return {} if activity is None else {"activity": activity}


class ChallengeCheck(Protocol):
    """The proof-of-work check of a join (``seckill.store.sale.admission.challenge``)."""

    def verify(self, aid: str, uid: str, payload: object) -> None:
        """Return if ``payload`` is a good, unused solution of this user's challenge; raise
        ``errors.ChallengeFailed`` if not."""


class HotRoutes:
    """WSGI middleware: the hot routes here, every other path to ``flask_app``."""

    def __init__(self, flask_app: WSGIApp, edge: Chain, sale: SaleState,
                 signer: PurchaseUrlSigner, finish: Finish, queue: AdmissionQueue,
                 challenges: ChallengeCheck, purchase_budget_ms: int,
                 disk_full: Callable[[], bool] = lambda: False) -> None:
        self.flask_app = flask_app
        self.edge = edge
        self.sale = sale
        self.signer = signer
        self.finish = finish
        self.queue = queue
        self.challenges = challenges
        self.purchase_budget_ms = purchase_budget_ms
        # Whether the local data folder's disk is full (seckill.store.plumbing.storage).
        self.disk_full = disk_full

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> Iterable[bytes]:
        """Answer a hot route, or hand the request to Flask."""
        path: str = environ.get("PATH_INFO") or ""
        if path == "/seckill/url":
            return self._answer(environ, start_response, URL, {})
        parts = path.split("/")
        # '', 'seckill', aid, token, 'buy': what a route with <aid> and <token> matches (no
        # empty segment, no slash inside one); any other shape is Flask's (404 ...).
        if (len(parts) == 5 and parts[1] == "seckill" and parts[4] == "buy" and not parts[0]
                and parts[2] and parts[3]):
            view_args = {"aid": _decoded(parts[2]), "token": _decoded(parts[3])}
            return self._answer(environ, start_response, BUY, view_args)
        if (len(parts) == 4 and parts[1] == "seckill" and parts[3] == "queue" and not parts[0]
                and parts[2]):
            route = QUEUE_JOIN if environ.get("REQUEST_METHOD") == "POST" else QUEUE_STATUS
            return self._answer(environ, start_response, route, {"aid": _decoded(parts[2])})
        return self.flask_app(environ, start_response)

    def _answer(self, environ: WSGIEnviron, start_response: StartResponse, route: Route,
                view_args: dict[str, str]) -> Iterable[bytes]:
        started = time.perf_counter()
        received_ms = now_ms() if route is BUY else 0  # a purchase's deadline counts from it
        method = environ.get("REQUEST_METHOD") or ""
        headers: dict[str, str] = {}
        query: dict[str, str] | None = None
        try:
            declared_length(environ)
            refuse_nul_query(environ.get("QUERY_STRING") or "")
            query = _query(environ) if route is URL else None
            if method not in _ALLOWED[route.endpoint]:
                raise errors.MethodNotAllowed(_ALLOWED[route.endpoint])
            passage = self.edge.run(Passage(
                route.wanted, route.endpoint, environ.get("HTTP_AUTHORIZATION"), view_args,
                query))
            if route is BUY:
                body = self.buy(passage, environ, purchase_deadline(
                    environ.get("HTTP_X_REQUEST_START"), received_ms, self.purchase_budget_ms))
            elif route is QUEUE_STATUS or route is QUEUE_JOIN:
                body = self.queue_call(passage, environ, method)
            else:
                body = self.issue_url(passage)
            status, outcome = 200, "ok"
        except Exception as exc:  # every failure becomes the contract's JSON
            failure = as_domain_error(exc, method, environ.get("PATH_INFO") or "")
            if (failure.extra.get("detail") in UNDECIDED and route is BUY
                    and self.disk_full()):
                failure = errors.Unavailable(STORAGE, detail="storage")
            status, outcome, body = failure.status, failure.code, failure.body()
            headers = failure.headers()
            shared = _SHARED.get(route.endpoint)
            if shared is not None:  # cache_headers says which of its refusals nginx may repeat
                headers.update(cache_headers(shared, failure, now_ms()))
        payload = orjson.dumps(body)
        start_response(_STATUS[status], [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            *headers.items(),
            *self.finish(route.endpoint, outcome, time.perf_counter() - started,
                         view_args.get("aid") or (query or {}).get("activity")),
        ])
        return [] if method == "HEAD" else [payload]

    def buy(self, passage: Passage, environ: WSGIEnviron, deadline_ms: int) -> dict[str, Any]:
        """A purchase the edge let through: its terms (body or query), then the script's
        decision, taken only until ``deadline_ms`` (:func:`purchase_deadline`)."""
        activity = passage.require_activity()
        body = purchase_terms(environ)
        if activity.variants:  # the terms name the variants bought (seckill/domain/variants.py)
            items = parse_variant_purchase(body, activity.variants, activity.per_user_limit)
            return self.sale.purchase_items(activity, passage.require_uid(), items,
                                            person=passage.person,
                                            deadline_ms=deadline_ms).body()
        quantity = parse_quantity(body, activity.per_user_limit)
        return self.sale.purchase(activity, passage.require_uid(), quantity,
                                  person=passage.person, deadline_ms=deadline_ms).body()

    def issue_url(self, passage: Passage) -> dict[str, Any]:
        """The signed purchase URL for a user the edge let through."""
        activity = passage.require_activity()
        who = buyer(activity, passage.require_uid(), passage.person)  # 403 if no person
        if activity.queued:
            position = self.queue.position(activity.id, who)
            if position is None:
                raise errors.NotAdmitted()
            raise errors.NotAdmitted(position=position)
        token, expires_at = self.signer.sign(activity.id, passage.require_uid())
        return {"url": f"/seckill/{activity.id}/{token}/buy", "expires_at": expires_at}

    def queue_call(self, passage: Passage, environ: WSGIEnviron, method: str
                   ) -> dict[str, Any]:
        """Join the queue (POST) or say where the user stands (GET): the status body, with the
        purchase URL once admitted (valid as long as the admission)."""
        activity = self.sale.activity(passage.activity_id())
        uid = passage.require_uid()
        if not activity.queued:
            raise errors.BadRequest("this activity has no queue: its purchase URL is at "
                                    "GET /seckill/url", field="admission")
        # The queue's places are buyers': on a person-limited activity, one per person.
        who = buyer(activity, uid, passage.person)
        if method == "POST":
            body = json_body(read_body(environ), allow_empty=True)  # no body: {}; null: 400
            if not isinstance(body, dict) or set(body) - {"altcha"}:
                raise errors.BadRequest('the body must be {} or {"altcha": "<solution>"}')
            if "altcha" in body and (not isinstance(body["altcha"], str)
                                     or _ALTCHA.fullmatch(body["altcha"]) is None):
                raise errors.BadRequest("altcha must be a base64 solution of at most 1024 "
                                        "characters", field="altcha")
            if activity.challenge:  # a Redis failure: as_domain_error's 503, as everywhere
                self.challenges.verify(activity.id, uid, body.get("altcha"))
            view = self.queue.join(activity, who, account=uid)
        else:
            view = self.queue.status(activity.id, who, account=uid)
        answer = view.body()
        if who != uid and activity.admission == DRAW:
            answer["entry"] = who  # what the draw is recomputed from (seckill/domain/people.py)
        if view.status == "admitted":
            token, expires_at = self.signer.sign(activity.id, uid,
                                                 until=view.admitted_until_ms // 1000)
            answer.update(url=f"/seckill/{activity.id}/{token}/buy", expires_at=expires_at)
        return answer
