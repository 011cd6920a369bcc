"""The services of the app that serves the request (``seckill.web.app`` puts them there)."""

from __future__ import annotations

from flask import current_app

from seckill.services import Services


def services() -> Services:
    """This app's services."""
    found: Services = current_app.extensions["seckill"]
    return found
