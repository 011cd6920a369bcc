"""A purchase's terms in its URL's query instead of a body (``POST .../buy?variant=<vid>
&quantity=<n>``): bought exactly as with the body, every bad query a 400 naming its parameter
with nothing sold, never a query and a body together. Single Valkey and the cluster, through
the app. nginx's copy of the activity-level refusals for the query form: tests/
test_edge_cache.py; the sale page, which buys this way: tests/test_sale_page_variants.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers


def _activity(client: Any, **fields: Any) -> str:
    aid = f"q{uuid.uuid4().hex[:10]}"
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Sneaker", "per_user_limit": 3, "starts_at": iso(-60),
        "ends_at": iso(3600), **fields}), 201)
    return aid


def _variants(client: Any) -> str:
    return _activity(client, variants=[{"id": "s40", "name": "EU 40", "total": 3},
                                       {"id": "s41", "name": "EU 41", "total": 2}])


def _buy(client: Any, aid: str, uid: str, query: str, body: bytes | None = None) -> Any:
    headers = user_headers(uid)
    got = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)
    if body is not None:
        headers = headers | {"Content-Type": "application/json"}
    return client.post(f"{got['url']}?{query}", headers=headers, data=body)


def _stats(client: Any, aid: str) -> dict[str, Any]:
    stats: dict[str, Any] = expect(client.get(f"/admin/activities/{aid}/stats",
                                              headers=ADMIN), 200)
    return stats


@BOTH_BACKENDS
def test_the_terms_in_the_query_buy_as_the_body_does(client):
    aid = _variants(client)
    one = expect(_buy(client, aid, "ann", "variant=s41"), 200)
    assert one["quantity"] == 1 and one["items"] == [{"variant": "s41", "quantity": 1}]
    two = expect(_buy(client, aid, "bob", "variant=s40&quantity=2"), 200)
    assert two["items"] == [{"variant": "s40", "quantity": 2}]
    # Spelled otherwise (the parameters swapped, the id percent-encoded): read as Flask reads
    # a query, the same purchase.
    three = expect(_buy(client, aid, "cy", "quantity=1&variant=s%341"), 200)
    assert three["items"] == [{"variant": "s41", "quantity": 1}]
    assert expect(_buy(client, aid, "ann", "variant=s40"), 409,
                  "already_purchased")["order_id"] == one["order_id"]
    stats = _stats(client, aid)
    assert stats["variants"] == {"s40": {"total": 3, "remaining": 1, "sold": 2},
                                 "s41": {"total": 2, "remaining": 0, "sold": 2}}
    assert stats["buyers"] == 3
    refused = expect(_buy(client, aid, "dan", "variant=s41"), 409, "variant_sold_out")
    assert refused["variant"] == "s41" and refused["remaining"] == 0
    status = expect(client.get(f"/seckill/{aid}/order", headers=user_headers("bob")), 200)
    assert status["items"] == [{"variant": "s40", "quantity": 2}]


def test_a_single_items_quantity_in_the_query(client, make_activity):
    aid = make_activity(total=10, per_user_limit=3)["id"]
    assert expect(_buy(client, aid, "ann", "quantity=2"), 200)["quantity"] == 2
    expect(_buy(client, aid, "bob", "variant=s40"), 400, "bad_request")
    assert _stats(client, aid)["sold"] == 2


# query, body, status, error, the field named
BAD = [
    ("variant=s40", b'{"variant": "s40"}', 400, "bad_request", None),
    ("variant=s40", b"{}", 400, "bad_request", None),
    ("variant=s40&colour=red", None, 400, "bad_request", ["colour"]),
    ("activity=x", None, 400, "bad_request", ["activity"]),
    ("variant=s40&variant=s41", None, 400, "bad_request", "variant"),
    ("variant=s40&quantity=1&quantity=2", None, 400, "bad_request", "quantity"),
    ("variant=s40&quantity=x", None, 400, "bad_request", "quantity"),
    ("variant=s40&quantity=-1", None, 400, "bad_request", "quantity"),
    ("variant=s40&quantity=0", None, 400, "bad_request", "quantity"),
    ("variant=s40&quantity=4", None, 400, "bad_request", "quantity"),  # over the limit
    ("variant=s40&quantity=99999999999", None, 400, "bad_request", "quantity"),
    ("quantity=1", None, 400, "bad_request", "variant"),
    ("variant=nope", None, 404, "unknown_variant", None),
    ("variant=", None, 404, "unknown_variant", None),
    ("variant=s40%00", None, 400, "bad_request", None),
]


@pytest.mark.parametrize(("query", "body", "status", "error", "field"), BAD,
                         ids=[f"{q}|{b!r}" for q, b, *_ in BAD])
def test_a_bad_query_is_a_400_naming_its_parameter_and_sells_nothing(
        client, query, body, status, error, field):
    aid = _variants(client)
    answer = expect(_buy(client, aid, "ann", query, body), status, error)
    if isinstance(field, list):
        assert answer.get("fields") == field, answer
    elif field is not None:
        assert answer.get("field") == field, answer
    stats = _stats(client, aid)
    assert stats["sold"] == 0 and stats["buyers"] == 0
    expect(_buy(client, aid, "ann", "variant=s40"), 200)  # and the buyer may still buy
