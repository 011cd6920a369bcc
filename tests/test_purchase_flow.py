"""The happy path of the contract, end to end through the Flask app and a real Valkey."""

from __future__ import annotations

import pytest

from tests.support.api import buy
from tests.support.tokens import ADMIN, user_headers

pytestmark = pytest.mark.database


def test_exactly_total_units_go_to_distinct_users(client, make_activity):
    activity = make_activity(total=3)
    answers = [buy(client, activity["id"], f"user{i}") for i in range(5)]
    codes = [r.status_code for r in answers]
    assert codes == [200, 200, 200, 410, 410]
    order_ids = {r.get_json()["order_id"] for r in answers[:3]}
    assert len(order_ids) == 3
    assert answers[3].get_json()["error"] == "sold_out"
    stats = client.get(f"/admin/activities/{activity['id']}/stats", headers=ADMIN).get_json()
    assert stats["total"] == 3
    assert stats["remaining"] == 0
    assert stats["sold"] == 3
    assert stats["buyers"] == 3


def test_repeat_purchase_returns_the_same_order(client, make_activity):
    activity = make_activity(total=5)
    first = buy(client, activity["id"], "alice")
    assert first.status_code == 200
    again = buy(client, activity["id"], "alice")
    assert again.status_code == 409
    assert again.get_json()["error"] == "already_purchased"
    assert again.get_json()["order_id"] == first.get_json()["order_id"]
    status = client.get(f"/seckill/{activity['id']}/order", headers=user_headers("alice"))
    assert status.get_json() == {"status": "pending", "order_id": first.get_json()["order_id"]}
    nobody = client.get(f"/seckill/{activity['id']}/order", headers=user_headers("bob"))
    assert nobody.get_json() == {"status": "none"}
