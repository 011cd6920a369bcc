"""The edge filter: knows HTTP and users, knows nothing of stock.

The edge is a chain of small filters run by **one** ``before_request`` hook (:class:`Edge`).
Each filter is an extension object whose ``init_app`` adds its check to the chain;
``create_app`` adds them in the order of the request path, cheapest first: identity (JWT),
sale window and sold-out flag (in-process), purchase URL (HMAC), per-user rate limit (the only
one that needs Redis). A view says which filters it needs with :func:`filters`; the chain
works out, once per endpoint, which checks to run, so a request pays for nothing else.

Why one hook and not one per filter: every ``before_request`` hook that has to look up the
endpoint and its filters through Flask's context proxies costs a few microseconds for every
request, including the ones that need no filter at all; in a flash sale the edge *is* the hot
path (see the README's Performance section).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flask import Flask, current_app, g, request

F = TypeVar("F", bound=Callable[..., Any])

USER = "user"  # a valid user JWT; sets g.uid
ADMIN = "admin"  # the operator token
WINDOW = "window"  # the activity exists and its sale window is open; sets g.activity
IN_STOCK = "in_stock"  # not known to be sold out (in-process flag, no Redis)
SOLD_OUT = "sold_out"  # purchases of a flagged activity: 409 to its winners, 410 to the rest
PURCHASE_URL = "purchase_url"  # the signed token in the path is this user's, for this activity
RATE = "rate"  # the per-user rate limit (needs USER)

_NONE: frozenset[str] = frozenset()


def filters(*names: str) -> Callable[[F], F]:
    """Mark a view with the edge filters it needs."""
    wanted = frozenset(names)
    if RATE in wanted and USER not in wanted:
        # A per-user limit without a user would have no key; refuse the wiring outright.
        raise ValueError("the rate filter needs the user filter")

    def mark(view: F) -> F:
        view.edge_filters = wanted  # type: ignore[attr-defined]
        return view

    return mark


class Passage:
    """One request's way through the chain: what it carries, and what the filters learned.

    It holds plain values, not Flask's request: the same filters run for a request that comes
    through Flask (:meth:`Edge._run`) and for a purchase answered straight from WSGI
    (``seckill.lane``)."""

    __slots__ = (
        "activity", "args", "authorization", "endpoint", "services", "uid", "view_args",
        "wanted",
    )

    def __init__(
        self,
        services: Any,
        wanted: frozenset[str],
        endpoint: str,
        authorization: str | None,
        view_args: Mapping[str, Any] | None,
        args: Mapping[str, str] | None = None,
    ) -> None:
        self.services = services
        self.wanted = wanted
        self.endpoint = endpoint
        self.authorization = authorization
        self.view_args = view_args or {}
        self.args = args or {}
        self.uid: str | None = None
        self.activity: Any = None

    def activity_id(self) -> str:
        aid = self.view_args.get("aid")
        if aid is None:
            aid = self.args.get("activity")
            if not aid:
                from seckill.domain.errors import BadRequest

                raise BadRequest("the activity query parameter is required", field="activity")
        return str(aid)

    def require_uid(self) -> str:
        if not self.uid:
            raise RuntimeError("no authenticated user on a view that needs one")
        return self.uid


Check = Callable[[Passage], None]


class Edge:
    """The chain. Filters add themselves in path order; one hook runs what a view needs."""

    def __init__(self) -> None:
        self._checks: list[tuple[frozenset[str], Check]] = []
        self._plans: dict[str, tuple[frozenset[str], tuple[Check, ...]]] = {}

    def init_app(self, app: Flask) -> None:
        app.extensions["edge"] = self
        app.before_request(self._run)

    @staticmethod
    def of(app: Flask) -> Edge:
        edge: Edge = app.extensions["edge"]
        return edge

    def add(self, names: frozenset[str] | set[str], check: Check) -> None:
        """Run ``check`` for views that want any of ``names``, after the checks added before."""
        self._checks.append((frozenset(names), check))
        self._plans.clear()

    def plan(self, app: Flask, endpoint: str) -> tuple[frozenset[str], tuple[Check, ...]]:
        """The filters ``endpoint``'s view wants, and the checks that run for them, in order."""
        plan = self._plans.get(endpoint)
        if plan is None:
            view = app.view_functions.get(endpoint)
            wanted: frozenset[str] = getattr(view, "edge_filters", _NONE)
            plan = (wanted, tuple(check for names, check in self._checks if names & wanted))
            self._plans[endpoint] = plan
        return plan

    @staticmethod
    def run(passage: Passage, checks: tuple[Check, ...]) -> None:
        for check in checks:
            check(passage)

    def _run(self) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            return
        wanted, checks = self.plan(current_app, endpoint)
        if not checks:
            return
        passage = Passage(
            current_app.extensions["seckill"],
            wanted,
            endpoint,
            request.headers.get("Authorization"),
            request.view_args,
            request.args,
        )
        try:
            self.run(passage, checks)
        finally:
            if passage.uid is not None:
                g.uid = passage.uid
            if passage.activity is not None:
                g.activity = passage.activity


def current_uid() -> str:
    uid: str | None = g.get("uid")
    if not uid:
        # Never run a per-user step without a user. Reaching this is a wiring bug: fail closed.
        raise RuntimeError("no authenticated user on a view that needs one")
    return uid
