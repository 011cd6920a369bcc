"""The edge filter: knows HTTP and users, knows nothing of stock.

A chain of small filters, cheapest first, that turns most of a flash-sale crowd away before
anything touches stock. Each filter is an extension object whose ``init_app`` adds its check
to the chain; a route names the filters it needs (:func:`filters` on a Flask view, a
:class:`Route` for the hot routes answered straight from WSGI), and the chain works out once
per set of names which checks run, in path order. Why one chain and not one Flask hook per
filter: the hot routes run it without Flask at all, and a hook per filter costs every
request, including the ones that need no filter.

Two halves, as Flask's own ``sansio`` split: ``edge.chain`` (the names, the passage, the
chain, the filter base) and the filters' modules import no Flask; ``edge.views`` is the Flask
binding (:class:`Edge`, :func:`filters`, :func:`passage`). Its names are offered here too,
imported on first use, so that importing the chain or a filter never imports Flask.

The edge reads the sale only through :class:`edge.sale.Sale`, a Protocol; it imports nothing
of the sale but its vocabulary (``seckill.domain``: outcomes, ids, clock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.chain import (
    ADMIN,
    IN_STOCK,
    PURCHASE_URL,
    RATE,
    SCRAPER,
    SOLD_OUT,
    USER,
    WINDOW,
    Chain,
    Check,
    Filter,
    Passage,
    Route,
)

if TYPE_CHECKING:
    from edge.views import Edge, filters, passage

__all__ = [
    "ADMIN", "IN_STOCK", "PURCHASE_URL", "RATE", "SCRAPER", "SOLD_OUT", "USER", "WINDOW", "Chain",
    "Check", "Edge", "Filter", "Passage", "Route", "filters", "passage",
]

_BINDING = frozenset({"Edge", "filters", "passage"})


def __getattr__(name: str) -> object:
    """``edge.Edge``, ``edge.filters``, ``edge.passage``: the Flask binding's (``edge.views``),
    imported on first use and kept here after it."""
    if name not in _BINDING:
        raise AttributeError(f"module 'edge' has no attribute {name!r}")
    from edge import views

    found: object = getattr(views, name)
    globals()[name] = found
    return found
