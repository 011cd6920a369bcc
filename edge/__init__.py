"""The edge filter: knows HTTP and users, knows nothing of stock.

A chain of small filters, cheapest first, that turns most of a flash-sale crowd away before
anything touches stock. Each filter is an extension object whose ``init_app`` adds its check
to the chain; a route names the filters it needs (:func:`filters` on a Flask view, a
:class:`Route` for the hot routes answered straight from WSGI), and the chain works out once
per set of names which checks run, in path order. Why one chain and not one Flask hook per
filter: the hot routes run it without Flask at all, and a hook per filter costs every
request, including the ones that need no filter.

The edge reads the sale only through :class:`edge.sale.Sale`, a Protocol; it imports nothing
of the sale but its vocabulary (``seckill.domain``: outcomes, ids, clock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from flask import Flask, current_app, g, request

from seckill.domain import errors

if TYPE_CHECKING:
    from seckill.domain.activities import Activity

F = TypeVar("F", bound=Callable[..., object])

USER = "user"  # a valid user JWT; sets Passage.uid
ADMIN = "admin"  # the operator token
WINDOW = "window"  # the activity exists and its sale window is open; sets Passage.activity
IN_STOCK = "in_stock"  # not known to be sold out (no Redis)
SOLD_OUT = "sold_out"  # purchases of a flagged activity: 409 to its winners, 410 to the rest
PURCHASE_URL = "purchase_url"  # the signed token in the path is this user's, for this activity
RATE = "rate"  # the per-user rate limit (needs USER)

_NONE: frozenset[str] = frozenset()


def _checked(names: tuple[str, ...]) -> frozenset[str]:
    wanted = frozenset(names)
    if RATE in wanted and USER not in wanted:
        # A per-user limit without a user would have no key; refuse the wiring outright.
        raise ValueError("the rate filter needs the user filter")
    return wanted


def filters(*names: str) -> Callable[[F], F]:
    """Mark a Flask view with the edge filters it needs."""
    wanted = _checked(names)

    def mark(view: F) -> F:
        view.edge_filters = wanted  # type: ignore[attr-defined]
        return view

    return mark


class Route:
    """A route answered outside Flask (``seckill.web.hot``): its endpoint name and filters."""

    __slots__ = ("endpoint", "wanted")

    def __init__(self, endpoint: str, *names: str) -> None:
        self.endpoint = endpoint
        self.wanted = _checked(names)


class Passage:
    """One request's way through the chain: what it carries, and what the filters learned.

    Plain values, not Flask's request, so that the same filters run for a request that comes
    through Flask and for one answered straight from WSGI."""

    __slots__ = ("activity", "args", "authorization", "endpoint", "uid", "view_args", "wanted")

    def __init__(
        self,
        wanted: frozenset[str],
        endpoint: str,
        authorization: str | None,
        view_args: Mapping[str, str] | None,
        args: Mapping[str, str] | None = None,
    ) -> None:
        self.wanted = wanted
        self.endpoint = endpoint
        self.authorization = authorization
        self.view_args = view_args or {}
        self.args = args or {}
        self.uid: str | None = None
        self.activity: Activity | None = None

    def activity_id(self) -> str:
        """The activity the request is about: from the path, else the ``activity`` query."""
        aid = self.view_args.get("aid")
        if aid is None:
            aid = self.args.get("activity")
            if not aid:
                raise errors.BadRequest("the activity query parameter is required",
                                        field="activity")
        return str(aid)

    def require_uid(self) -> str:
        """The authenticated user; a route that needs one without the user filter is a bug."""
        if not self.uid:
            raise RuntimeError("no authenticated user on a route that needs one")
        return self.uid

    def require_activity(self) -> Activity:
        """The activity the window filter let through."""
        if self.activity is None:
            raise RuntimeError("no activity on a route that needs the window filter")
        return self.activity


Check = Callable[[Passage], None]


class Edge:
    """The chain. Filters add themselves in path order; one plan per set of filter names."""

    def __init__(self) -> None:
        self._checks: list[tuple[frozenset[str], Check]] = []
        self._plans: dict[frozenset[str], tuple[Check, ...]] = {}

    def init_app(self, app: Flask) -> None:
        """Register the chain and its one ``before_request`` hook for Flask's views."""
        app.extensions["edge"] = self
        app.before_request(self._run_for_view)

    @staticmethod
    def of(app: Flask) -> Edge:
        """The chain registered on ``app``."""
        edge: Edge = app.extensions["edge"]
        return edge

    def add(self, names: frozenset[str] | set[str], check: Check) -> None:
        """Run ``check`` for routes that want any of ``names``, after the checks added before."""
        self._checks.append((frozenset(names), check))
        self._plans.clear()

    def plan(self, wanted: frozenset[str]) -> tuple[Check, ...]:
        """The checks that run, in order, for a route wanting ``wanted``."""
        plan = self._plans.get(wanted)
        if plan is None:
            plan = self._plans[wanted] = tuple(
                check for names, check in self._checks if names & wanted
            )
        return plan

    def run(self, passage: Passage) -> Passage:
        """Run every check ``passage``'s route wants; a refusal is raised."""
        for check in self.plan(passage.wanted):
            check(passage)
        return passage

    def _run_for_view(self) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            return
        wanted: frozenset[str] = getattr(current_app.view_functions.get(endpoint),
                                         "edge_filters", _NONE)
        if not wanted:
            return
        g.passage = self.run(Passage(wanted, endpoint, request.headers.get("Authorization"),
                                     request.view_args, request.args))


class Filter:
    """One filter of the chain: ``check`` runs for the routes that want any of ``names``."""

    names: frozenset[str] = _NONE

    def init_app(self, app: Flask) -> None:
        """Register the filter on ``app`` and add its check to the chain, in call order."""
        app.extensions[f"edge.{type(self).__name__}"] = self
        Edge.of(app).add(self.names, self.check)

    def check(self, passage: Passage) -> None:
        """Let the request go on, or raise the refusal."""
        raise NotImplementedError


def passage() -> Passage:
    """The current Flask request's passage (views marked with :func:`filters`)."""
    found: Passage | None = g.get("passage")
    if found is None:
        raise RuntimeError("no edge passage on a view that needs one")
    return found
