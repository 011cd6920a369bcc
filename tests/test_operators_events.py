"""The events an operator's action causes name the operator: ``order.cancelled`` (a stored
order's, written by the cancel itself; a pending one's, written by the orders worker after the
order) and ``order.paid`` when an operator marked it paid by hand, through the admin API or the
command (``cli:<SECKILL_OPERATOR>``); no other event carries ``operator``. On one server and on
the cluster, the real orders worker driven in-process, the events read from the outbox."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import buy, expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.cli import seckill
from tests.support.operators import make_operator
from tests.support.orders import built_worker, drain
from tests.support.outbox import events, open_book

pytestmark = pytest.mark.database


def _bought(client: Any, aid: str, uid: str) -> str:
    return str(expect(buy(client, aid, uid), 200)["order_id"])


def test_an_operators_cancel_and_pay_name_them_in_the_events(
        client, make_activity, settings, database_url, env) -> None:
    olga = make_operator(client, "operator", "olga")
    pat = make_operator(client, "admin", "pat")
    aid = make_activity(total=10, payment_window=600)["id"]
    stored = _bought(client, aid, "u-stored")
    with built_worker(settings) as worker:
        drain(worker)  # stored: the cancel itself writes its order.cancelled
        waiting = _bought(client, aid, "u-pending")  # not stored yet: the worker writes it
        expect(client.post(f"/admin/orders/{stored}/cancel", headers=olga), 200)
        expect(client.post(f"/admin/orders/{waiting}/cancel", headers=olga), 200)
        by_hand = _bought(client, aid, "u-by-hand")
        expect(client.post(f"/admin/orders/{by_hand}/pay", json={"payment_ref": "bank-77"},
                           headers=pat), 200)
        by_cli = _bought(client, aid, "u-by-cli")
        drain(worker)
        cancelled = seckill("order", "cancel", by_cli,
                            env={**env, "SECKILL_OPERATOR": "ops-quinn"})
        assert cancelled.returncode == 0, cancelled.stderr
        drain(worker)

    book = open_book(database_url)
    try:
        found = events(book, aid)
    finally:
        book.engine.dispose()
    named = {(kind, data["order_id"]): data.get("operator") for kind, _, data in found}
    assert named == {
        ("order.created", stored): None, ("order.cancelled", stored): "olga",
        ("order.created", waiting): None, ("order.cancelled", waiting): "olga",
        ("order.created", by_hand): None, ("order.paid", by_hand): "pat",
        ("order.created", by_cli): None, ("order.cancelled", by_cli): "cli:ops-quinn",
    }
    paid = next(data for kind, _, data in found if kind == "order.paid")
    assert (paid["payment"], paid["operator"]) == ("paid", "pat")
