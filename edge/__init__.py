"""The edge filter: knows HTTP and users, knows nothing of stock.

Each filter is a small extension object whose ``init_app`` registers one ``before_request``
hook. ``create_app`` registers them in the order of the request path, cheapest first:
body size, identity (JWT), sale window and sold-out flag (in-process), purchase URL (HMAC).
The per-user rate limit (flask-limiter, Redis) wraps the view itself, so it always runs
*after* identity has set the user id it is keyed by. A view opts into filters with
:func:`filters`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, g, request

F = TypeVar("F", bound=Callable[..., Any])

_NONE: frozenset[str] = frozenset()

USER = "user"  # a valid user JWT; sets g.uid
ADMIN = "admin"  # the operator token
WINDOW = "window"  # the activity exists and its sale window is open; sets g.activity
IN_STOCK = "in_stock"  # not known to be sold out (in-process flag, no Redis)
SOLD_OUT = "sold_out"  # purchases of a flagged activity: 409 to its winners, 410 to the rest
PURCHASE_URL = "purchase_url"  # the signed token in the path is this user's, for this activity


def filters(*names: str) -> Callable[[F], F]:
    """Mark a view with the edge filters it needs."""

    def mark(view: F) -> F:
        view.edge_filters = frozenset(names)  # type: ignore[attr-defined]
        return view

    return mark


def active_filters() -> frozenset[str]:
    endpoint = request.endpoint
    if endpoint is None:
        return _NONE
    view = current_app.view_functions.get(endpoint)
    return getattr(view, "edge_filters", _NONE)


def current_uid() -> str:
    uid: str | None = g.get("uid")
    if not uid:
        # Never let a per-user check run without a user: flask-limiter would silently skip
        # a limit whose key is empty. Reaching this is a wiring bug, and it fails closed.
        raise RuntimeError("no authenticated user on a view that needs one")
    return uid


def request_activity_id() -> str:
    view_args = request.view_args or {}
    aid = view_args.get("aid")
    if aid is None:
        aid = request.args.get("activity")
        if not aid:
            from seckill.errors import BadRequest

            raise BadRequest("the activity query parameter is required", field="activity")
    return str(aid)
