"""What the sale page shows of an activity's product: description, image and price, optional,
validated, kept in Redis and the database alike."""

from __future__ import annotations

import pytest

from tests.support.api import create_activity, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN

pytestmark = pytest.mark.database

PRODUCT = {"description": "A phone.\nTwo cameras.", "image_url": "https://shop.example/x.png",
           "price": {"amount": 49999, "currency": "EUR"}}


@BOTH_BACKENDS
def test_the_product_is_shown_and_kept_across_a_rebuild(client, app, rds, prefix):
    aid = create_activity(client, **PRODUCT)["id"]
    view = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert {k: view[k] for k in PRODUCT} == PRODUCT
    for key in list(rds.scan_iter(f"{prefix}:{{{aid}}}:*")):
        rds.delete(key)
    app.extensions["seckill"].cache.forget(aid)
    again = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert {k: again[k] for k in PRODUCT} == PRODUCT


def test_without_a_product_the_view_has_none_of_its_fields(client):
    view = create_activity(client)
    assert not set(PRODUCT) & set(view)
    assert view["paused"] is False


def test_a_same_site_path_is_an_image_url_too(client):
    assert create_activity(client, image_url="/img/phone.webp")["image_url"] == "/img/phone.webp"


@pytest.mark.parametrize(("field", "value"), [
    ("description", "x" * 2001), ("description", 5), ("description", "bell\x07"),
    ("image_url", "http://shop.example/x.png"), ("image_url", "javascript:alert(1)"),
    ("image_url", "//evil.example/x.png"), ("image_url", "data:image/png;base64,AAAA"),
    ("image_url", "https://"), ("image_url", "https://a b/x"), ("image_url", ""),
    ("image_url", "/x\"onerror=\"y"), ("image_url", "https://x/" + "a" * 2048),
    ("price", 12), ("price", {"amount": 1}), ("price", {"amount": -1, "currency": "EUR"}),
    ("price", {"amount": 1.5, "currency": "EUR"}), ("price", {"amount": True, "currency": "EUR"}),
    ("price", {"amount": 100, "currency": "EUT"}), ("price", {"amount": 100, "currency": "eur"}),
    ("price", {"amount": 100, "currency": "EUR", "tax": 1}),
])
def test_a_bad_product_field_is_refused_and_nothing_is_created(client, field, value):
    body = {"id": "bad", "name": "Bad", "total": 1, "starts_at": iso(-1), "ends_at": iso(600),
            field: value}
    refused = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                     "bad_request")
    assert refused["field"] == field
    expect(client.get("/seckill/activities/bad"), 404, "unknown_activity")
