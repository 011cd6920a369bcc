"""The check chain, without Flask: the filters' names, a request's passage, the chain and the
filter base.

Nothing here imports Flask or werkzeug (``tests/test_architecture.py`` keeps it so): the hot
routes run the chain straight from WSGI, and ``edge.views`` binds the same chain to Flask's
views, as Flask's own ``sansio`` package holds what does not need a WSGI request. An app is
anything with an ``extensions`` dict (Flask's ``app.extensions``): the chain and each filter
register there, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from seckill.domain import errors

if TYPE_CHECKING:
    from seckill.domain.activities import Activity
    from seckill.domain.operators import Operator

USER = "user"  # a valid user JWT; sets Passage.uid
ADMIN = "admin"  # the operator token
SCRAPER = "scraper"  # the metrics token or the operator token (GET /metrics)
WINDOW = "window"  # the activity exists and its sale window is open; sets Passage.activity
IN_STOCK = "in_stock"  # not known to be sold out (no Redis)
SOLD_OUT = "sold_out"  # purchases of a flagged activity: 409 to its winners, 410 to the rest
PURCHASE_URL = "purchase_url"  # the signed token in the path is this user's, for this activity
RATE = "rate"  # the per-user rate limit (needs USER)
NOT_BLOCKED = "not_blocked"  # the operator has not blocked the user or its person (needs USER)

NONE: frozenset[str] = frozenset()


def wanted(names: tuple[str, ...]) -> frozenset[str]:
    """The filter names a route wants, checked: the rate filter needs the user filter."""
    found = frozenset(names)
    if RATE in found and USER not in found:
        # A per-user limit without a user would have no key; refuse the wiring outright.
        raise ValueError("the rate filter needs the user filter")
    if NOT_BLOCKED in found and USER not in found:
        raise ValueError("the block filter needs the user filter")
    return found


class Route:
    """A route answered outside Flask (``seckill.web.hot``): its endpoint name and filters."""

    __slots__ = ("endpoint", "wanted")

    def __init__(self, endpoint: str, *names: str) -> None:
        self.endpoint = endpoint
        self.wanted = wanted(names)


class Passage:
    """One request's way through the chain: what it carries, and what the filters learned.

    Plain values, not Flask's request, so that the same filters run for a request that comes
    through Flask and for one answered straight from WSGI."""

    __slots__ = ("activity", "args", "authorization", "endpoint", "operator", "person", "uid",
                 "view_args", "wanted")

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
        # The verified person behind the account (the SECKILL_PERSON_CLAIM claim of the user's
        # token), when the deployment names such a claim and the token carries it.
        self.person: str | None = None
        self.operator: Operator | None = None  # who called an operator route (edge.operators)
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


EXTENSION = "edge"  # the chain's name in app.extensions


class App(Protocol):
    """What the chain needs of an app: its extensions (Flask's ``app.extensions``)."""

    extensions: dict[str, object]


class Chain:
    """The chain. Filters add themselves in path order; one plan per set of filter names."""

    def __init__(self) -> None:
        self._checks: list[tuple[frozenset[str], Check]] = []
        self._plans: dict[frozenset[str], tuple[Check, ...]] = {}

    @staticmethod
    def of(app: App) -> Chain:
        """The chain registered on ``app`` (``edge.views.Edge.init_app``)."""
        chain = app.extensions.get(EXTENSION)
        if not isinstance(chain, Chain):
            raise RuntimeError("the edge chain is not registered on this app")
        return chain

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


class Filter:
    """One filter of the chain: ``check`` runs for the routes that want any of ``names``."""

    names: frozenset[str] = NONE

    def init_app(self, app: App) -> None:
        """Register the filter on ``app`` and add its check to the chain, in call order."""
        app.extensions[f"edge.{type(self).__name__}"] = self
        Chain.of(app).add(self.names, self.check)

    def check(self, passage: Passage) -> None:
        """Let the request go on, or raise the refusal."""
        raise NotImplementedError
