"""The services of the app that serves the request (``seckill.web.app`` puts them there), and
the operator who made it."""

from __future__ import annotations

from flask import current_app

from edge.views import passage
from seckill.domain.operators import Operator
from seckill.services import Services


def services() -> Services:
    """This app's services."""
    found: Services = current_app.extensions["seckill"]
    return found


def operator() -> Operator:
    """The operator who made this request (an operator route: the identity filter found them)."""
    found = passage().operator
    if found is None:
        raise RuntimeError("no operator on a route that needs one")
    return found
