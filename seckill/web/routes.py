"""The HTTP routes of ``../shared/API.md``. Each view is short: the edge has already run."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, g, request

import edge
from seckill import metrics
from seckill.domain import errors
from seckill.domain.activities import (
    MAX_TOTAL,
    Activity,
    is_activity_id,
    now_ms,
    parse_new_activity,
)
from seckill.domain.orders import activity_of_order
from seckill.sql import engine as db
from seckill.store import catalog


def _services() -> Any:
    return current_app.extensions["seckill"]


def _json_body(allow_empty: bool) -> Any:
    return json_body(request.get_data(cache=False), allow_empty)


def json_body(raw: bytes, allow_empty: bool) -> Any:
    if not raw.strip():
        if allow_empty:
            return {}
        raise errors.BadRequest("a JSON body is required")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("the body is not valid JSON") from None


def parse_quantity(body: Any, per_user_limit: int) -> int:
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object, e.g. {\"quantity\": 1}")
    unknown = sorted(set(body) - {"quantity"})
    if unknown:
        raise errors.BadRequest(f"unknown fields: {', '.join(unknown)}", fields=unknown)
    quantity = body.get("quantity", 1)
    if (
        not isinstance(quantity, int)
        or isinstance(quantity, bool)
        or not 1 <= quantity <= per_user_limit
    ):
        raise errors.BadRequest(
            f"quantity must be an integer in 1..{per_user_limit}", field="quantity"
        )
    return quantity


def issue_url(services: Any, activity: Activity, uid: str) -> dict[str, Any]:
    """The signed purchase URL for a user the edge has let through."""
    token, expires_at = services.signer.sign(activity.id, uid)
    return {"url": f"/seckill/{activity.id}/{token}/buy", "expires_at": expires_at}


def buy(services: Any, activity: Activity, uid: str, raw_body: bytes) -> dict[str, Any]:
    """A purchase the edge has let through: the body's quantity, then the script's decision.
    Returns the 200's body; a refusal is raised as its ``errors`` exception."""
    quantity = parse_quantity(json_body(raw_body, allow_empty=True), activity.per_user_limit)
    try:
        bought = services.stock.purchase(activity.id, uid, quantity, activity.kind)
    except errors.SoldOut:
        services.cache.note_remaining(activity.id, 0)
        services.board.mark(activity.id)
        raise
    services.cache.note_remaining(activity.id, bought.remaining)
    services.board.note_sale(activity.id)
    body: dict[str, Any] = bought.body()  # a packet's grab adds its amount
    return body


def user_blueprint() -> Blueprint:
    bp = Blueprint("user", __name__)

    @bp.get("/seckill/time")
    def time_now() -> dict[str, Any]:
        return {"now_ms": now_ms()}

    @bp.get("/seckill/activities/<aid>")
    def activity(aid: str) -> dict[str, Any]:
        found: Activity = _services().cache.require(aid)
        return found.public(now_ms())

    @bp.get("/seckill/url")
    @edge.filters(edge.USER, edge.WINDOW, edge.IN_STOCK, edge.RATE)
    def purchase_url() -> dict[str, Any]:
        # Like the purchase, normally answered by seckill.lane before Flask sees it.
        return issue_url(_services(), g.activity, edge.current_uid())

    @bp.post("/seckill/<aid>/<token>/buy")
    # No edge.RATE here: the per-user limit on purchases is counted by the purchase script
    # itself, in the same round trip (lua/include/rate_limit.lua).
    @edge.filters(edge.USER, edge.WINDOW, edge.SOLD_OUT, edge.PURCHASE_URL)
    def purchase(aid: str, token: str) -> dict[str, Any]:
        # POSTs to this route are normally answered by seckill.lane before Flask sees them;
        # Flask answers the rest (chunked bodies, odd Content-Length) the same way, here.
        return buy(_services(), g.activity, edge.current_uid(), request.get_data(cache=False))

    @bp.get("/seckill/<aid>/order")
    @edge.filters(edge.USER)
    def order_status(aid: str) -> dict[str, Any]:
        services = _services()
        services.cache.require(aid)
        return services.stock.order_status(aid, edge.current_uid()).body()

    return bp


def admin_blueprint() -> Blueprint:
    bp = Blueprint("admin", __name__)

    @bp.post("/admin/activities")
    @edge.filters(edge.ADMIN)
    def create_activity() -> tuple[dict[str, Any], int]:
        services = _services()
        activity = parse_new_activity(_json_body(allow_empty=False))
        catalog.create_activity(services.book, services.activities, activity)
        services.cache.forget(activity.id)
        return activity.public(now_ms()), 201

    @bp.post("/admin/activities/<aid>/stock")
    @edge.filters(edge.ADMIN)
    def restock(aid: str) -> dict[str, Any]:
        services = _services()
        found: Activity = services.cache.require(aid)
        body = _json_body(allow_empty=False)
        if not isinstance(body, dict) or set(body) != {"add"}:
            raise errors.BadRequest('the body must be {"add": <integer>}')
        add = body["add"]
        if not isinstance(add, int) or isinstance(add, bool) or abs(add) > MAX_TOTAL:
            raise errors.BadRequest(f"add must be an integer in -{MAX_TOTAL}..{MAX_TOTAL}",
                                    field="add")
        total, remaining = services.stock.restock(found.id, add)
        services.board.clear(found.id)  # this process at once; the others by pub/sub
        updated = dataclasses.replace(found, total=total, remaining=remaining)
        return updated.public(now_ms())

    @bp.post("/admin/orders/<order_id>/cancel")
    @edge.filters(edge.ADMIN)
    def cancel_order(order_id: str) -> dict[str, Any]:
        services = _services()
        services.stock.cancel(order_id)
        aid = activity_of_order(order_id)
        if aid is not None:
            services.board.clear(aid)  # this process at once; the others by pub/sub
        return {"status": "cancelled", "order_id": order_id}

    @bp.get("/admin/activities/<aid>/stats")
    @edge.filters(edge.ADMIN)
    def stats(aid: str) -> dict[str, Any]:
        if not is_activity_id(aid):
            raise errors.UnknownActivity(activity=aid[:80])
        found = _services().stock.stats(aid)
        if found is None:
            raise errors.UnknownActivity(activity=aid)
        return found.body()

    return bp


def service_blueprint() -> Blueprint:
    bp = Blueprint("service", __name__)

    @bp.get("/healthz")
    def healthz() -> tuple[dict[str, Any], int]:
        services = _services()
        problems: dict[str, str] = {}
        try:
            services.client.ping()
        except Exception as exc:
            problems["redis"] = type(exc).__name__
        try:
            services.book.ready()
            db.ping(services.engine)
        except Exception as exc:
            problems["database"] = type(exc).__name__
        if problems:
            g.outcome = "unavailable"
            return {"status": "unavailable", "failing": problems}, 503
        return {"status": "ok"}, 200

    @bp.get("/metrics")
    def metrics_view() -> Response:
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    return bp
