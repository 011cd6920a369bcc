"""The service's own routes: ``GET /healthz`` (the store and the database, 503 when one is
failing), ``GET /metrics`` (for the scraper's token) and ``GET /openapi.json`` (the contract,
``openapi.json`` next to this module)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, g, request

import edge
from seckill import metrics
from seckill.domain.activities import now_ms
from seckill.services import Services
from seckill.sql import deliveries
from seckill.store.audit.shared import SharedText
from seckill.store.plumbing.storage import read_storage
from seckill.web.census import CensusCollector
from seckill.web.current import services
from seckill.web.health import database_health, store_health

# The contract as OpenAPI 3.1, kept next to this module (so the wheel ships it) and served as is.
OPENAPI_DOCUMENT = Path(__file__).with_name("openapi.json")


def blueprint(found: Services) -> Blueprint:
    """Health, metrics and the contract, on ``found``'s store and database."""
    bp = Blueprint("service", __name__)
    # What a scrape reads from the store and the database, read once per interval by one
    # process of the deployment and shared through Redis; the whole body kept per process.
    interval = found.settings.metrics_interval
    scraped = metrics.Scrape(metrics.Kept(
        CensusCollector(found.census),
        metrics.WebhookCollector(lambda: deliveries.webhook_numbers(found.engine, now_ms())),
        metrics.StorageCollector(lambda: read_storage(found.client, found.settings.data_dir)),
        ttl=interval, shared=SharedText(found.client, found.keys)), ttl=interval)

    @bp.get("/healthz")
    def healthz() -> tuple[dict[str, Any], int]:
        found = services()
        problems = store_health(found)
        if (database := database_health(found).failing()) is not None:
            problems["database"] = database
        if problems:
            g.outcome = "unavailable"
            return {"status": "unavailable", "failing": problems}, 503
        return {"status": "ok"}, 200

    @bp.get("/metrics")
    @edge.filters(edge.SCRAPER)
    def metrics_view() -> Response:
        if request.accept_encodings["gzip"] > 0:
            response = Response(scraped.packed(), content_type=scraped.content_type)
            response.headers["Content-Encoding"] = "gzip"
        else:
            response = Response(scraped.body(), content_type=scraped.content_type)
        response.vary.add("Accept-Encoding")
        return response

    @bp.get("/openapi.json")
    def openapi() -> Response:
        return Response(openapi_document(), mimetype="application/json")

    return bp


@functools.cache
def openapi_document() -> bytes:
    """The OpenAPI document's bytes (``seckill/web/openapi.json``), read once."""
    return OPENAPI_DOCUMENT.read_bytes()
