"""Variants of one item: creation, the view, the stats, every bad input a 400
naming its field with nothing half-created. Against the session's Valkey (and the cluster
where the module says so) through the app, as the operator and buyers call it.

The purchase, cancel, expiry, restock and rebuild: tests/test_variants_sale.py; a model of
every step: tests/test_variants_model.py; the crowd: tests/test_variants_crowd.py.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN
from tests.support.valkey import keys_of

pytestmark = pytest.mark.database

# The bad inputs are refused before anything is written: they run on the single server; what
# is written and read back runs on both.


SIZES = [{"id": "40", "name": "EU 40", "total": 5}, {"id": "41", "name": "EU 41", "total": 3},
         {"id": "big_one-2", "name": "XXL", "total": 0}]


def _valid(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": f"v{uuid.uuid4().hex[:10]}", "name": "Sneaker",
                            "variants": SIZES, "starts_at": iso(-60), "ends_at": iso(3600)}
    body.update(fields)
    return body


def _create(client: Any, body: dict[str, Any]) -> Any:
    # Compact, as a shop's client would send it (the operator routes take up to 256 KiB).
    return client.post("/admin/activities", data=json.dumps(body, separators=(",", ":")),
                       headers=ADMIN | {"Content-Type": "application/json"})


@BOTH_BACKENDS
def test_creation_and_view(client):
    body = _valid(per_user_limit=2)
    created = expect(_create(client, body), 201)
    assert created["total"] == 8 and created["remaining"] == 8 and created["state"] == "open"
    assert created["per_user_limit"] == 2
    assert created["variants"] == [
        {"id": "40", "name": "EU 40", "total": 5, "remaining": 5, "state": "open"},
        {"id": "41", "name": "EU 41", "total": 3, "remaining": 3, "state": "open"},
        {"id": "big_one-2", "name": "XXL", "total": 0, "remaining": 0, "state": "sold_out"},
    ]
    view = expect(client.get(f"/seckill/activities/{body['id']}"), 200)
    assert view["variants"] == created["variants"] and view["total"] == 8
    listed = expect(client.get(f"/admin/activities/{body['id']}", headers=ADMIN), 200)
    assert listed["variants"] == created["variants"] and listed["sold"] == 0
    stats = expect(client.get(f"/admin/activities/{body['id']}/stats", headers=ADMIN), 200)
    assert stats["total"] == 8 and stats["remaining"] == 8 and stats["sold"] == 0
    assert stats["variants"] == {"40": {"total": 5, "remaining": 5, "sold": 0},
                                 "41": {"total": 3, "remaining": 3, "sold": 0},
                                 "big_one-2": {"total": 0, "remaining": 0, "sold": 0}}


@BOTH_BACKENDS
def test_state_is_sold_out_only_when_every_variant_is(client):
    body = _valid(variants=[{"id": "a", "name": "A", "total": 0},
                            {"id": "b", "name": "B", "total": 0}])
    created = expect(_create(client, body), 201)
    assert created["state"] == "sold_out" and created["remaining"] == 0
    assert [v["state"] for v in created["variants"]] == ["sold_out", "sold_out"]
    later = expect(_create(client, _valid(starts_at=iso(600))), 201)
    assert later["state"] == "upcoming"
    assert {v["state"] for v in later["variants"]} == {"upcoming"}


def test_single_item_activities_show_no_variants(client, make_activity):
    created = make_activity()
    assert "variants" not in created
    stats = expect(client.get(f"/admin/activities/{created['id']}/stats", headers=ADMIN), 200)
    assert "variants" not in stats


@BOTH_BACKENDS
def test_a_hundred_variants_are_accepted(client):
    many = [{"id": f"s{i}", "name": f"S{i}", "total": 1} for i in range(100)]
    created = expect(_create(client, _valid(variants=many)), 201)
    assert created["total"] == 100 and len(created["variants"]) == 100
    assert [v["id"] for v in created["variants"]] == [f"s{i}" for i in range(100)]


def _variant(**fields: Any) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"id": "40", "name": "EU 40", "total": 5}
    entry.update(fields)
    return [entry, {"id": "41", "name": "EU 41", "total": 3}]


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("total and variants", _valid(total=8), "total"),
    ("with kind packets", {**_valid(kind="packets", amount=100, count=2)}, "variants"),
    ("with shards", _valid(shards=2), "shards"),
    ("empty list", _valid(variants=[]), "variants"),
    ("not a list", _valid(variants={"id": "40"}), "variants"),
    ("null", _valid(variants=None), "variants"),
    ("101 variants", _valid(variants=[{"id": f"s{i}", "name": "S", "total": 1}
                                      for i in range(101)]), "variants"),
    ("duplicate ids", _valid(variants=[{"id": "40", "name": "A", "total": 1},
                                       {"id": "40", "name": "B", "total": 2}]), "variants"),
    ("id with a brace", _valid(variants=_variant(id="4{0}")), "variants"),
    ("id with a slash", _valid(variants=_variant(id="40/41")), "variants"),
    ("id with a colon", _valid(variants=_variant(id="40:1")), "variants"),
    ("id with a comma", _valid(variants=_variant(id="40,41")), "variants"),
    ("id with a space", _valid(variants=_variant(id="4 0")), "variants"),
    ("id of 33 characters", _valid(variants=_variant(id="x" * 33)), "variants"),
    ("id empty", _valid(variants=_variant(id="")), "variants"),
    ("id a number", _valid(variants=_variant(id=40)), "variants"),
    ("id missing", _valid(variants=[{"name": "A", "total": 1}]), "variants"),
    ("name missing", _valid(variants=[{"id": "40", "total": 1}]), "variants"),
    ("name blank", _valid(variants=_variant(name="  ")), "variants"),
    ("name too long", _valid(variants=_variant(name="n" * 101)), "variants"),
    ("total missing", _valid(variants=[{"id": "40", "name": "A"}]), "variants"),
    ("total negative", _valid(variants=_variant(total=-1)), "variants"),
    ("total 1.0", _valid(variants=_variant(total=1.0)), "variants"),
    ("total true", _valid(variants=_variant(total=True)), "variants"),
    ("total null", _valid(variants=_variant(total=None)), "variants"),
    ("total over the maximum", _valid(variants=_variant(total=10**9 + 1)), "variants"),
    ("totals over the maximum", _valid(variants=[
        {"id": "a", "name": "A", "total": 10**9}, {"id": "b", "name": "B", "total": 1}]),
     "variants"),
    ("unknown field in a variant", _valid(variants=_variant(colour="red")), "variants"),
    ("a variant not an object", _valid(variants=["40"]), "variants"),
]


@pytest.mark.parametrize(("case", "body", "field"), INVALID, ids=[c for c, _, _ in INVALID])
def test_bad_variants_are_400_naming_the_field_and_create_nothing(client, app, rds, prefix,
                                                                   case, body, field):
    answer = expect(_create(client, body), 400, "bad_request")
    assert answer.get("field") == field, (case, answer)
    assert keys_of(rds, prefix) == set(), case
    engine = app.extensions["seckill"].engine
    with engine.connect() as conn:
        tables = sa.inspect(conn).get_table_names()
        for table in ("seckill_activities", "seckill_variants"):
            if table in tables:
                assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0


def test_the_duplicate_id_is_said(client):
    answer = expect(_create(client, _valid(variants=[{"id": "40", "name": "A", "total": 1},
                                                     {"id": "40", "name": "B", "total": 2}])),
                    400, "bad_request")
    assert "variants[1].id" in answer["message"] and "twice" in answer["message"]
