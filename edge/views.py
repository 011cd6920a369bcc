"""The Flask binding of the check chain: the chain's one ``before_request`` hook for Flask's
views, the mark a view names its filters with, and the passage of the current request.

The chain itself, the filters and their checks know no Flask (``edge.chain``); this is the
only module of the edge that imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Flask, current_app, g, request

from edge.chain import EXTENSION, NONE, Chain, Passage, wanted

F = TypeVar("F", bound=Callable[..., object])


def filters(*names: str) -> Callable[[F], F]:
    """Mark a Flask view with the edge filters it needs."""
    found = wanted(names)

    def mark(view: F) -> F:
        view.edge_filters = found  # type: ignore[attr-defined]
        return view

    return mark


class Edge(Chain):
    """The chain, also run for Flask's views that :func:`filters` marks (one hook for all)."""

    def init_app(self, app: Flask) -> None:
        """Register the chain, where its filters find it, and its one ``before_request`` hook
        for Flask's views."""
        app.extensions[EXTENSION] = self
        app.before_request(self._run_for_view)

    def _run_for_view(self) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            return
        names: frozenset[str] = getattr(current_app.view_functions.get(endpoint),
                                        "edge_filters", NONE)
        if not names:
            return
        g.passage = self.run(Passage(names, endpoint, request.headers.get("Authorization"),
                                     request.view_args, request.args))


def passage() -> Passage:
    """The current Flask request's passage (views marked with :func:`filters`)."""
    found: Passage | None = g.get("passage")
    if found is None:
        raise RuntimeError("no edge passage on a view that needs one")
    return found
