"""The cold routes of the contract (the two hot ones: ``seckill.web.hot``). Each view is
short: the edge and the cold-route limits have already run, and the operator's actions are
``seckill.operator``'s (a view reads the request and renders the answer)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, g, request

import edge
from seckill import metrics
from seckill.domain import errors
from seckill.domain.activities import Activity, is_activity_id, now_ms
from seckill.domain.people import buyer
from seckill.operator import activities, orders
from seckill.services import Services
from seckill.sql import deliveries
from seckill.store.audit.shared import SharedText
from seckill.store.plumbing.storage import read_storage
from seckill.web import admission as admission_routes
from seckill.web import blocks as blocks_routes
from seckill.web import console as console_routes
from seckill.web import operator as operator_routes
from seckill.web import payments_webhook
from seckill.web import webhooks_admin as webhooks_routes
from seckill.web.body import json_body, read_body
from seckill.web.census import CensusCollector
from seckill.web.current import services
from seckill.web.health import database_health, store_health
from seckill.web.limits import ColdLimits

# The contract as OpenAPI 3.1, kept next to this module (so the wheel ships it) and served as is.
OPENAPI_DOCUMENT = Path(__file__).with_name("openapi.json")


def _json_body(allow_empty: bool) -> Any:
    return json_body(read_body(request.environ), allow_empty)


def register(app: Flask, limits: ColdLimits) -> None:
    """Add the user, operator and service routes to ``app``."""
    app.register_blueprint(_user(limits))
    app.register_blueprint(_admin(limits))
    app.register_blueprint(_service(app.extensions["seckill"]))
    app.register_blueprint(admission_routes.blueprint(limits))
    app.register_blueprint(operator_routes.blueprint())
    app.register_blueprint(console_routes.blueprint())
    app.register_blueprint(blocks_routes.blueprint(limits))
    app.register_blueprint(payments_webhook.blueprint(
        app.config["SECKILL_SETTINGS"].payment_webhook_secret))
    app.register_blueprint(webhooks_routes.blueprint(limits))


def _user(limits: ColdLimits) -> Blueprint:
    bp = Blueprint("user", __name__)

    @bp.get("/seckill/time")
    def time_now() -> dict[str, Any]:
        return {"now_ms": now_ms()}

    @bp.get("/seckill/activities/<aid>")
    def activity(aid: str) -> dict[str, Any]:
        found: Activity = services().cache.require(aid)
        return found.public(now_ms())

    @bp.get("/seckill/<aid>/order")
    @edge.filters(edge.USER)
    @limits.per_user
    def order_status(aid: str) -> dict[str, Any]:
        found = services()
        activity = found.cache.require(aid)
        passage = edge.passage()
        # A person-limited activity's order is the person's, whichever account asks.
        who = buyer(activity, passage.require_uid(), passage.person)
        status = found.payments.annotate(aid, found.orders.order_status(aid, who))
        if activity.variants:  # which variant each unit is
            status = found.orders.with_items(aid, status)
        return status.body()

    return bp


def _admin(limits: ColdLimits) -> Blueprint:
    bp = Blueprint("admin", __name__)
    limits.operator(bp)

    @bp.post("/admin/activities")
    @edge.filters(edge.ADMIN)
    def create_activity() -> tuple[dict[str, Any], int]:
        activity = activities.new_activity(_json_body(allow_empty=False))
        return activities.create(services(), activity).public(now_ms()), 201

    @bp.post("/admin/activities/<aid>/stock")
    @edge.filters(edge.ADMIN)
    def restock(aid: str) -> dict[str, Any]:
        found = services()
        activity = activities.find(found, aid)
        body = _json_body(allow_empty=False)
        if not isinstance(body, dict) or "add" not in body or set(body) - {"add", "variant"}:
            raise errors.BadRequest('the body must be {"add": <integer>}, with "variant": '
                                    '"<id>" on an activity with variants')
        if activity.variants or "variant" in body:
            return activities.restock_variant(found, activity, body["add"],
                                              body.get("variant")).public(now_ms())
        return activities.restock(found, activity, body["add"]).public(now_ms())

    @bp.post("/admin/orders/<order_id>/cancel")
    @edge.filters(edge.ADMIN)
    def cancel_order(order_id: str) -> dict[str, Any]:
        cancelled = orders.cancel(services(), order_id)
        return {"status": "cancelled", "order_id": cancelled.order_id}

    @bp.post("/admin/orders/<order_id>/pay")
    @edge.filters(edge.ADMIN)
    def pay_order(order_id: str) -> dict[str, Any]:
        body = _json_body(allow_empty=False)
        if not isinstance(body, dict) or set(body) != {"payment_ref"}:
            raise errors.BadRequest('the body must be {"payment_ref": <string>}')
        return orders.pay(services(), order_id, body["payment_ref"])

    @bp.get("/admin/activities/<aid>/stats")
    @edge.filters(edge.ADMIN)
    def stats(aid: str) -> dict[str, Any]:
        if not is_activity_id(aid):
            raise errors.UnknownActivity(activity=aid[:80])
        found = services()
        stats = found.stats.of(aid)
        if stats is None:
            raise errors.UnknownActivity(activity=aid)
        payments = found.payments.counts(aid)
        return (stats if payments is None else dataclasses.replace(stats, payments=payments)).body()

    return bp


def _service(found: Services) -> Blueprint:
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
