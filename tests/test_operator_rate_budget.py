"""Which operator routes count against ``SECKILL_ADMIN_RATE`` (``seckill/web/limits.py``), and
that they share one budget: creating an activity, its stock and stats, orders, blocks and
webhooks and operators are counted together; the sale-day levers (list, show, edit, pause,
resume, end, the admission factor), the console and who is signed in are not, so an operator
who spent the budget can still stop a sale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.support.admission import queued_activity
from tests.support.api import create_activity, expect
from tests.support.tokens import ADMIN

# Every counted route, once the budget is spent: each answers 429 before its view runs, so
# the ids and bodies need not exist.
COUNTED: tuple[tuple[str, str, Any], ...] = (
    ("POST", "/admin/activities", {"id": "a-late", "name": "x", "total": 1}),
    ("POST", "/admin/activities/{aid}/stock", {"add": 1}),
    ("GET", "/admin/activities/{aid}/stats", None),
    ("POST", "/admin/orders/o-none/cancel", None),
    ("POST", "/admin/orders/o-none/pay", {"payment_ref": "p-1"}),
    ("POST", "/admin/blocks", {"user": "mallory"}),
    ("GET", "/admin/blocks", None),
    ("DELETE", "/admin/blocks/user/mallory", None),
    ("DELETE", "/admin/blocks/person/p-none", None),
    ("POST", "/admin/webhooks", {"url": "https://shop.example/hook"}),
    ("GET", "/admin/webhooks", None),
    ("DELETE", "/admin/webhooks/w-none", None),
    ("GET", "/admin/webhooks/w-none/deliveries", None),
    ("POST", "/admin/webhooks/w-none/replay", {}),
    ("GET", "/admin/operators", None),
    ("POST", "/admin/operators", {"name": "late", "role": "viewer"}),
    ("DELETE", "/admin/operators/nobody", None),
)


def _call(client: FlaskClient, method: str, path: str, body: Any = None) -> Any:
    return client.open(path, method=method, headers=ADMIN, json=body)


def _levers(client: FlaskClient, aid: str, queued: str) -> None:
    """The routes outside the budget, each answering as it would with budget to spare."""
    listed = expect(client.get("/admin/activities", headers=ADMIN), 200)
    assert {a["id"] for a in listed["activities"]} >= {aid, queued}
    expect(client.get(f"/admin/activities/{aid}", headers=ADMIN), 200)
    expect(client.patch(f"/admin/activities/{aid}", json={"name": "Renamed"}, headers=ADMIN),
           200)
    expect(client.post(f"/admin/activities/{aid}/pause", headers=ADMIN), 200)
    expect(client.post(f"/admin/activities/{aid}/resume", headers=ADMIN), 200)
    expect(client.post(f"/admin/activities/{queued}/admission", json={"factor": 2},
                       headers=ADMIN), 200)
    expect(client.get("/admin/console/state", headers=ADMIN), 200)
    expect(client.get("/admin/whoami", headers=ADMIN), 200)  # the console signs in with it


def test_counted_routes_share_one_budget_and_the_levers_stay_outside_it(
        make_app: Callable[..., Flask]) -> None:
    app = make_app(SECKILL_ADMIN_RATE="3/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]  # 1
    queued = queued_activity(client, starts_in=600)["id"]  # 2
    for _ in range(3):  # none of these is counted
        _levers(client, aid, queued)
    expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)  # 3
    # The fourth counted call is refused, whichever resource it is for.
    for method, path, body in COUNTED:
        refused = _call(client, method, path.format(aid=aid), body)
        expect(refused, 429, "rate_limited")
        assert refused.headers["X-Seckill-Outcome"] == "rate_limited", path
    # The levers and the console still answer, and the operator can still end the sale.
    _levers(client, aid, queued)
    expect(client.post(f"/admin/activities/{aid}/end", headers=ADMIN), 200)
    expect(client.get(f"/seckill/activities/{aid}"), 200)  # public: not the operator's


def test_the_third_counted_call_in_a_row_is_refused_across_resources(
        make_app: Callable[..., Flask]) -> None:
    app = make_app(SECKILL_ADMIN_RATE="2/minute")
    client = app.test_client()
    aid = create_activity(client)["id"]  # 1: the activities' create
    expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)  # 2: stats
    expect(client.post("/admin/blocks", json={"user": "mallory"}, headers=ADMIN), 429,
           "rate_limited")  # 3: a block, on the same budget
    expect(client.post(f"/admin/activities/{aid}/pause", headers=ADMIN), 200)
    expect(client.post(f"/admin/activities/{aid}/resume", headers=ADMIN), 200)
