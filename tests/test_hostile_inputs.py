"""Hostile input: ids that could break out of a key or a route, odd bodies, odd activities.

Every answer must be a clean JSON 4xx (never 500), nothing may be bought by a refused request,
and no Redis key may ever be built from a refused id. Each hostile id carries a unique tag so
that a SCAN of the *whole* server proves no key was made from it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import pytest

from seckill.domain.clock import iso_from_ms, ms_from_iso
from tests.support.api import expect
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers
from tests.support.valkey import keys_of

CLEAN_404 = {"unknown_activity", "not_found"}


def hostile_ids(tag: str) -> list[str]:
    return [
        f"{tag}{{x}}",
        f"{tag}{{",
        f"{tag}}}",
        f"{tag}:meta",
        f"{tag}/x",
        f"{tag} x",
        f"{tag}" + "x" * 1000,
        f"{tag}|x",
        f"{tag}*",
        f"{tag}?x=1",
        f"{tag}\u00e9",
        f"{tag}%00",
        f"{tag}\t",
    ]


def no_key_mentions(rds: Any, tag: str) -> None:
    found = list(rds.scan_iter(match=f"*{tag}*", count=1000))
    assert found == [], found


def clean_rejection(response: Any) -> dict[str, Any]:
    """A JSON 404 (unknown activity, or no such route) or a JSON 400; never a 500."""
    status = response.status_code
    assert status in (400, 404), (status, response.get_data()[:200])
    body = response.get_json()
    assert response.mimetype == "application/json", response.headers
    assert isinstance(body, dict) and isinstance(body.get("message"), str), body
    expected = CLEAN_404 if status == 404 else {"bad_request"}
    assert body.get("error") in expected, body
    return body


@pytest.fixture
def tag() -> str:
    return f"h{uuid.uuid4().hex[:10]}"


# --- ids in URLs ------------------------------------------------------------------------------


def test_hostile_ids_on_every_user_endpoint(app, client, rds, prefix, tag):
    headers = user_headers("alice")
    signer = app.extensions["edge.PurchaseUrls"].signer
    before = keys_of(rds, prefix)
    for aid in hostile_ids(tag):
        in_path = quote(aid, safe="")
        clean_rejection(client.get(f"/seckill/activities/{in_path}"))
        clean_rejection(client.get(f"/seckill/url?activity={in_path}", headers=headers))
        clean_rejection(client.get(f"/seckill/{in_path}/order", headers=headers))
        # Even with a token correctly signed for this very id (so that only the id is wrong).
        token, _ = signer.sign(aid, "alice")
        clean_rejection(client.post(f"/seckill/{in_path}/{token}/buy", headers=headers))
        clean_rejection(client.post(f"/seckill/{in_path}/{token}/buy", headers=headers,
                                    json={"quantity": 1}))
        clean_rejection(client.get(f"/admin/activities/{in_path}/stats", headers=ADMIN))
    no_key_mentions(rds, tag)
    assert keys_of(rds, prefix) == before


def test_hostile_ids_unquoted_in_the_path(client, rds, tag):
    """The same ids sent raw (a proxy that does not encode): slashes change the route, braces
    and colons reach the view; both must end in a clean 404."""
    headers = user_headers("alice")
    for aid in (f"{tag}{{x}}", f"{tag}:x", f"{tag}/x", f"{tag}/../x", "x" * 1000 + tag):
        clean_rejection(client.get(f"/seckill/activities/{aid}"))
        clean_rejection(client.get(f"/seckill/{aid}/order", headers=headers))
        clean_rejection(client.post(f"/seckill/{aid}/123.abc.def/buy", headers=headers))
    no_key_mentions(rds, tag)


def test_unknown_but_well_formed_id_makes_no_key(client, rds, prefix, tag):
    headers = user_headers("alice")
    aid = f"{tag}-valid_id"
    expect(client.get(f"/seckill/activities/{aid}"), 404, "unknown_activity")
    expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 404, "unknown_activity")
    expect(client.get(f"/seckill/{aid}/order", headers=headers), 404, "unknown_activity")
    expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 404, "unknown_activity")
    no_key_mentions(rds, tag)


def test_unknown_activity_echo_is_bounded(client):
    body = expect(client.get(f"/seckill/activities/{'x' * 1000}"), 404, "unknown_activity")
    assert len(body["activity"]) <= 80


def test_hostile_tokens_in_the_purchase_path(client, make_activity, rds, prefix):
    activity = make_activity()
    headers = user_headers("alice")
    for token in ("x" * 1000, "1.2.3", "..", "99999999999999.abcdef01.x", "-1.a.b",
                  "1e9.a.b", "%7B%7D", "0.0.0", "\uff11\uff12.a.b"):
        expect(client.post(f"/seckill/{activity['id']}/{quote(token, safe='')}/buy",
                           headers=headers), 403, "bad_signature")
    assert rds.hlen(f"{prefix}:{{{activity['id']}}}:buyers") == 0


# --- purchase bodies --------------------------------------------------------------------------


BAD_BODIES: list[bytes] = [
    b"{",
    b"not json",
    b'{"quantity": }',
    b"\xff\xfe\x00",
    b"[1]",
    b'"quantity"',
    b"1",
    b"null",
    b"true",
    b"[]",
    b'{"quantity": 0}',
    b'{"quantity": -1}',
    b'{"quantity": 3}',  # per_user_limit is 2 below
    b'{"quantity": 1000000}',
    b'{"quantity": 100000000000000000000000000000}',
    b'{"quantity": 1.5}',
    b'{"quantity": 1.0}',
    b'{"quantity": 1e0}',
    b'{"quantity": "1"}',
    b'{"quantity": true}',
    b'{"quantity": false}',
    b'{"quantity": null}',
    b'{"quantity": [1]}',
    b'{"quantity": {"n": 1}}',
    b'{"quantity": NaN}',
    b'{"quantity": Infinity}',
    b'{"quantity": 1, "extra": 1}',
    b'{"qty": 1}',
    b'{"quantity": 1, "quantity": 0}',
]


def test_hostile_purchase_bodies(client, make_activity, rds, prefix):
    activity = make_activity(total=5, per_user_limit=2)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    for raw in BAD_BODIES:
        response = client.post(url, headers=headers | {"Content-Type": "application/json"},
                               data=raw)
        body = expect(response, 400, "bad_request")
        assert "Traceback" not in body["message"], raw
    # None of them bought anything; the same URL still buys the maximum.
    meta = f"{prefix}:{{{activity['id']}}}:meta"
    assert rds.hget(meta, "remaining") == "5"
    assert rds.hlen(f"{prefix}:{{{activity['id']}}}:buyers") == 0
    assert rds.xlen(f"{prefix}:{{{activity['id']}}}:orders") == 0
    assert expect(client.post(url, headers=headers, json={"quantity": 2}), 200)["quantity"] == 2
    assert rds.hget(meta, "remaining") == "3"


def test_quantity_rules_hold_for_a_limit_of_one(client, make_activity):
    activity = make_activity(total=5)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    body = expect(client.post(url, headers=headers, json={"quantity": 2}), 400, "bad_request")
    assert body["field"] == "quantity"


def test_bad_body_after_purchase_is_still_400(client, make_activity):
    """A malformed repeat is refused as malformed; it does not leak or change the order."""
    activity = make_activity(total=5)
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    first = expect(client.post(url, headers=headers), 200)
    expect(client.post(url, headers=headers, data=b"{oops"), 400, "bad_request")
    again = expect(client.post(url, headers=headers), 409, "already_purchased")
    assert again["order_id"] == first["order_id"]


# --- operator input ---------------------------------------------------------------------------


def _valid(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": f"a{uuid.uuid4().hex[:10]}", "name": "Phone", "total": 10,
                            "starts_at": iso(-60), "ends_at": iso(3600)}
    body.update(fields)
    return body


def _without(field: str) -> dict[str, Any]:
    body = _valid()
    del body[field]
    return body


INVALID_ACTIVITIES: list[tuple[str, Any, str | None]] = [
    # (case, body, the field the answer names; None when it names none)
    ("id with {", _valid(id="a{b"), "id"),
    ("id with }", _valid(id="a}b"), "id"),
    ("id with braces", _valid(id="{a}"), "id"),
    ("id with :", _valid(id="a:b"), "id"),
    ("id with /", _valid(id="a/b"), "id"),
    ("id with space", _valid(id="a b"), "id"),
    ("id with |", _valid(id="a|b"), "id"),
    ("id with *", _valid(id="a*"), "id"),
    ("id non-ascii", _valid(id="caf\u00e9"), "id"),
    ("id trailing newline", _valid(id="abc\n"), "id"),
    ("id 1000 chars", _valid(id="x" * 1000), "id"),
    ("id 65 chars", _valid(id="x" * 65), "id"),
    ("id empty", _valid(id=""), "id"),
    ("id number", _valid(id=12), "id"),
    ("id null", _valid(id=None), "id"),
    ("id missing", _without("id"), "id"),
    ("reserved activities", _valid(id="activities"), "id"),
    ("reserved url", _valid(id="url"), "id"),
    ("reserved time", _valid(id="time"), "id"),
    ("name empty", _valid(name=""), "name"),
    ("name blank", _valid(name="   "), "name"),
    ("name too long", _valid(name="n" * 201), "name"),
    ("name number", _valid(name=5), "name"),
    ("name missing", _without("name"), "name"),
    ("total -1", _valid(total=-1), "total"),
    ("total 1.5", _valid(total=1.5), "total"),
    ("total 10.0", _valid(total=10.0), "total"),
    ("total true", _valid(total=True), "total"),
    ("total string", _valid(total="10"), "total"),
    ("total list", _valid(total=[10]), "total"),
    ("total huge", _valid(total=10**20), "total"),
    ("total missing", _without("total"), "total"),
    ("per_user_limit 0", _valid(per_user_limit=0), "per_user_limit"),
    ("per_user_limit -1", _valid(per_user_limit=-1), "per_user_limit"),
    ("per_user_limit 1.5", _valid(per_user_limit=1.5), "per_user_limit"),
    ("per_user_limit true", _valid(per_user_limit=True), "per_user_limit"),
    ("per_user_limit string", _valid(per_user_limit="2"), "per_user_limit"),
    ("per_user_limit null", _valid(per_user_limit=None), "per_user_limit"),
    ("kind unknown", _valid(kind="lottery"), "kind"),
    ("starts_at without offset", _valid(starts_at="2030-01-01T12:00:00"), "starts_at"),
    ("ends_at without offset", _valid(ends_at="2030-01-01T12:00:00"), "ends_at"),
    ("starts_at garbage", _valid(starts_at="soon"), "starts_at"),
    ("ends_at garbage", _valid(ends_at="2030-13-45T99:00:00Z"), "ends_at"),
    ("starts_at empty", _valid(starts_at=""), "starts_at"),
    ("starts_at number", _valid(starts_at=1_900_000_000), "starts_at"),
    ("ends_at null", _valid(ends_at=None), "ends_at"),
    ("ends_at missing", _without("ends_at"), "ends_at"),
    ("starts_at overlong", _valid(starts_at="2030-01-01T12:00:00Z" + " " * 100), "starts_at"),
    ("ends before starts", _valid(starts_at=iso(3600), ends_at=iso(60)), "ends_at"),
    ("ends equals starts", _valid(starts_at="2099-01-01T12:00:00Z",
                                  ends_at="2099-01-01T13:00:00+01:00"), "ends_at"),
    ("ends in the past", _valid(starts_at=iso(-7200), ends_at=iso(-60)), "ends_at"),
    ("ends past year 9999", _valid(ends_at="9999-12-31T23:59:59-12:00"), "ends_at"),
    ("starts before year 1", _valid(starts_at="0001-01-01T00:00:00+14:00"), "starts_at"),
    ("starts before 1970", _valid(starts_at="1969-12-31T23:59:59Z"), "starts_at"),
    ("unknown field", _valid(colour="red"), None),
    ("unknown field remaining", _valid(remaining=5), None),
    ("non-object list", [_valid()], None),
    ("non-object string", "activity", None),
    ("non-object number", 1, None),
    ("non-object null", None, None),
]


@pytest.mark.parametrize(("case", "body", "field"), INVALID_ACTIVITIES,
                         ids=[case for case, _, _ in INVALID_ACTIVITIES])
def test_invalid_activity_fields(client, rds, prefix, case, body, field):
    # Sent with the standard library: the app's own encoder refuses some of these (10**20).
    response = client.post("/admin/activities", data=json.dumps(body),
                           headers=ADMIN | {"Content-Type": "application/json"})
    answer = expect(response, 400, "bad_request")
    if field is not None:
        assert answer.get("field") == field, answer
    assert keys_of(rds, prefix) == set(), case


@pytest.mark.parametrize("raw", [b"", b"   ", b"{", b"{'id': 'x'}", b"\xff", b"[1,]"])
def test_invalid_activity_json(client, rds, prefix, raw):
    response = client.post("/admin/activities", data=raw,
                           headers=ADMIN | {"Content-Type": "application/json"})
    expect(response, 400, "bad_request")
    assert keys_of(rds, prefix) == set()


def test_the_valid_baseline_is_accepted(client):
    """The invalid cases above differ from this body by one field each."""
    body = _valid(per_user_limit=3, kind="stock")
    created = expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)
    assert created["per_user_limit"] == 3
    longest = _valid(id="x" * 64, name="n" * 200, ends_at="9999-12-31T23:59:59Z")
    assert expect(client.post("/admin/activities", json=longest, headers=ADMIN),
                  201)["ends_at"] == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("ms", [0, 1, 999, 1_076_783_066_975, 1_795_284_971_620,
                                4_102_444_800_001, 253_402_300_799_999])
def test_times_round_trip_to_the_millisecond(ms):
    text = iso_from_ms(ms)
    assert text.endswith("Z")
    assert ms_from_iso(text, "starts_at") == ms


def test_times_keep_milliseconds_through_the_api(client):
    body = _valid(starts_at="2099-02-14T18:24:26.975Z", ends_at="2099-02-14T20:24:26.001+01:00")
    created = expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)
    assert created["starts_at"] == "2099-02-14T18:24:26.975Z"
    assert created["ends_at"] == "2099-02-14T19:24:26.001Z"


# --- headers ----------------------------------------------------------------------------------


def test_oversized_authorization_header(client, make_activity):
    activity = make_activity()
    huge = {"Authorization": "Bearer " + "a" * 8000}
    expect(client.get(f"/seckill/url?activity={activity['id']}", headers=huge), 401,
           "unauthenticated")
    expect(client.get("/admin/activities/x/stats", headers=huge), 401, "unauthenticated")
