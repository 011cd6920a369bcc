"""The purchase on an activity with variants: one variant or several in one
all-or-nothing step, the per-buyer limit across variants, ``variant_sold_out`` against
``sold_out``, every bad body a 400 naming its field, the script as the authority, and the
sold-out flag per variant. Single Valkey and the cluster, through the app.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import redis

from edge.identity import mint_user_token
from seckill.store.plumbing.scripts import lua_source
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN, JWT_SECRET, user_headers

pytestmark = BOTH_BACKENDS


def _activity(client: Any, per_user_limit: int = 3, limit_by: str = "user", **sizes: int
              ) -> str:
    aid = f"v{uuid.uuid4().hex[:10]}"
    variants = [{"id": vid, "name": f"EU {vid}", "total": n}
                for vid, n in (sizes or {"s40": 3, "s41": 2}).items()]
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Sneaker", "variants": variants, "per_user_limit": per_user_limit,
        "limit_by": limit_by, "starts_at": iso(-60), "ends_at": iso(3600)}), 201)
    return aid


def _numbers(client: Any, aid: str) -> dict[str, Any]:
    stats = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
    for vid, v in stats["variants"].items():
        assert v["sold"] + v["remaining"] == v["total"], (vid, v)
    assert stats["remaining"] == sum(v["remaining"] for v in stats["variants"].values())
    assert stats["sold"] == sum(v["sold"] for v in stats["variants"].values())
    return stats


def test_one_variant_then_several(client):
    aid = _activity(client)
    one = expect(buy(client, aid, "ann", {"variant": "s41"}), 200)
    assert one["quantity"] == 1 and one["items"] == [{"variant": "s41", "quantity": 1}]
    two = expect(buy(client, aid, "bob", {"items": [{"variant": "s40", "quantity": 2},
                                                    {"variant": "s41", "quantity": 1}]}), 200)
    assert two["quantity"] == 3
    assert two["items"] == [{"variant": "s40", "quantity": 2}, {"variant": "s41", "quantity": 1}]
    stats = _numbers(client, aid)
    assert stats["variants"] == {"s40": {"total": 3, "remaining": 1, "sold": 2},
                                 "s41": {"total": 2, "remaining": 0, "sold": 2}}
    assert stats["remaining"] == 1 and stats["buyers"] == 2
    view = expect(client.get(f"/admin/activities/{aid}", headers=ADMIN), 200)
    assert [v["state"] for v in view["variants"]] == ["open", "sold_out"]
    assert view["state"] == "open"


def test_all_or_nothing(client):
    aid = _activity(client, per_user_limit=5)
    refused = expect(buy(client, aid, "ann", {"items": [{"variant": "s40", "quantity": 1},
                                                        {"variant": "s41", "quantity": 3}]}),
                     409, "variant_sold_out")
    assert refused["variant"] == "s41" and refused["remaining"] == 2
    stats = _numbers(client, aid)
    assert stats["sold"] == 0 and stats["buyers"] == 0  # s40's unit was not taken either
    expect(buy(client, aid, "ann", {"items": [{"variant": "s40", "quantity": 1},
                                              {"variant": "s41", "quantity": 2}]}), 200)


def test_the_limit_counts_every_variant(client):
    aid = _activity(client, per_user_limit=2)
    over = expect(buy(client, aid, "ann", {"items": [{"variant": "s40", "quantity": 2},
                                                     {"variant": "s41", "quantity": 1}]}),
                  400, "bad_request")
    assert over["field"] == "items"
    expect(buy(client, aid, "ann", {"variant": "s40", "quantity": 3}), 400, "bad_request")
    first = expect(buy(client, aid, "ann", {"items": [{"variant": "s40", "quantity": 1},
                                                      {"variant": "s41", "quantity": 1}]}), 200)
    again = expect(buy(client, aid, "ann", {"variant": "s40"}), 409, "already_purchased")
    assert again["order_id"] == first["order_id"]
    assert _numbers(client, aid)["sold"] == 2


def test_variant_sold_out_then_sold_out(client):
    aid = _activity(client, per_user_limit=1, a=1, b=1)
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("ann")),
                 200)["url"]
    won = expect(client.post(url, headers=user_headers("ann"), json={"variant": "a"}), 200)
    gone = expect(buy(client, aid, "bob", {"variant": "a"}), 409, "variant_sold_out")
    assert gone == {**gone, "variant": "a", "remaining": 0}
    view = expect(client.get(f"/seckill/activities/{aid}"), 200)
    assert view["state"] == "open"
    expect(buy(client, aid, "bob", {"variant": "b"}), 200)
    expect(buy(client, aid, "cat", {"variant": "b"}), 410, "sold_out")
    expect(buy(client, aid, "dan", {"variant": "a"}), 410, "sold_out")
    # A winner repeating the purchase learns their order, whatever they ask for now.
    again = expect(client.post(url, headers=user_headers("ann"), json={"variant": "b"}), 409,
                   "already_purchased")
    assert again["order_id"] == won["order_id"]


BAD_BODIES: list[tuple[dict[str, Any] | None, int, str, str | None]] = [
    # (body, status, error, the field the answer names)
    (None, 400, "bad_request", "variant"),
    ({}, 400, "bad_request", "variant"),
    ({"quantity": 1}, 400, "bad_request", "variant"),
    ({"variant": 40}, 400, "bad_request", "variant"),
    ({"variant": "nope"}, 404, "unknown_variant", None),
    ({"variant": "s40", "quantity": 0}, 400, "bad_request", "quantity"),
    ({"variant": "s40", "quantity": "1"}, 400, "bad_request", "quantity"),
    ({"items": []}, 400, "bad_request", "items"),
    ({"items": "s40"}, 400, "bad_request", "items"),
    ({"items": [{"variant": "s40", "quantity": 1}, {"variant": "s40", "quantity": 1}]},
     400, "bad_request", "items"),
    ({"items": [{"variant": "s40", "quantity": 0}]}, 400, "bad_request", "items"),
    ({"items": [{"variant": "s40"}]}, 400, "bad_request", "items"),
    ({"items": [{"variant": "s40", "quantity": 1, "colour": "red"}]}, 400, "bad_request",
     "items"),
    ({"items": [{"variant": "nope", "quantity": 1}]}, 404, "unknown_variant", None),
    ({"items": [{"variant": "s40", "quantity": 1}], "variant": "s40"}, 400, "bad_request",
     None),
    ({"variant": "s40", "colour": "red"}, 400, "bad_request", None),
]


def test_bad_bodies(client):
    aid = _activity(client)
    for i, (body, status, error, field) in enumerate(BAD_BODIES):
        answer = expect(buy(client, aid, f"u{i}", body), status, error)
        if field is not None:
            assert answer.get("field") == field, (body, answer)
        if error == "unknown_variant":
            assert answer["variant"] == "nope"
    stats = _numbers(client, aid)
    assert stats["sold"] == 0 and stats["buyers"] == 0


def test_a_single_item_activity_refuses_a_variant(client, make_activity):
    aid = make_activity()["id"]
    expect(buy(client, aid, "ann", {"variant": "s40"}), 400, "bad_request")
    expect(buy(client, aid, "ann", {}), 200)


def _script(rds: redis.Redis, prefix: str, aid: str, argv2: str, variant_keys: bool = True
            ) -> list[Any]:
    keys = [f"{prefix}:{{{aid}}}:{name}" for name in ("meta", "buyers", "orders", "items")]
    source = lua_source("purchase")
    return list(rds.eval(source, 4 if variant_keys else 3,
                         *keys[: 4 if variant_keys else 3], "eve", argv2, aid))


def test_the_script_is_the_authority(client, rds, prefix):
    """What the gateway refuses first, the script refuses too: a variant named twice (which
    would pass each check alone and sell one more than the variant has), a quantity of 0, a
    plain quantity on an activity with variants, a variant that does not exist."""
    aid = _activity(client, per_user_limit=5, a=1, b=5)
    assert _script(rds, prefix, aid, "a:1,a:1")[0] == "bad_quantity"
    assert _script(rds, prefix, aid, "a:0")[0] == "bad_quantity"
    assert _script(rds, prefix, aid, "b:6")[0] == "bad_quantity"
    assert _script(rds, prefix, aid, "2")[0] == "variant_required"
    assert _script(rds, prefix, aid, "zz:1")[:2] == ["unknown_variant", "zz"]
    assert _script(rds, prefix, aid, "a:1", variant_keys=False)[0] == "variant_keys"
    assert _script(rds, prefix, aid, "a:1,b:2")[0] == "ok"
    assert _numbers(client, aid)["variants"]["a"] == {"total": 1, "remaining": 0, "sold": 1}


def test_variant_refusals_come_from_the_flag_without_redis(make_app, private_valkey):
    # Long intervals: no background round runs, so the server's counts are the requests'.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60",
                   SECKILL_META_TTL="60")
    client = app.test_client()
    aid = _activity(client, per_user_limit=1, a=1, b=5)
    urls = {uid: expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)),
                        200)["url"] for uid in ("ann", *(f"late{i}" for i in range(10)))}
    won = expect(client.post(urls["ann"], headers=user_headers("ann"), json={"variant": "a"}),
                 200)
    expect(client.post(urls["late0"], headers=user_headers("late0"), json={"variant": "a"}),
           409, "variant_sold_out")  # from the script: the flag goes up
    observer = redis.Redis.from_url(private_valkey.url)
    before = observer.info("commandstats")
    for i in range(1, 10):
        gone = expect(client.post(urls[f"late{i}"], headers=user_headers(f"late{i}"),
                                  json={"variant": "a"}), 409, "variant_sold_out")
        assert gone["remaining"] == 0
    again = expect(client.post(urls["ann"], headers=user_headers("ann"), json={"variant": "a"}),
                   409, "already_purchased")
    after = observer.info("commandstats")
    assert again["order_id"] == won["order_id"]
    assert {k: v["calls"] for k, v in after.items() if k != "cmdstat_info"} == {
        k: v["calls"] for k, v in before.items() if k != "cmdstat_info"}
    # Another variant still sells (through the script).
    expect(client.post(urls["late1"], headers=user_headers("late1"), json={"variant": "b"}), 200)
    observer.close()


def test_several_variants_are_written_in_one_command(make_app, private_valkey):
    """A purchase of three variants writes the meta hash once, as one of a single variant
    does: every counter, the variants' and the activity's, in the one HSET that follows every
    check (all or nothing by construction). It costs one command more than one variant, the
    read of its variants' counters. It used to write each variant's counters with two
    HINCRBYs of its own, before the activity's checks."""
    # Long intervals: no background round runs, so the server's counts are the requests'.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60",
                   SECKILL_META_TTL="60")
    client = app.test_client()
    aid = _activity(client, per_user_limit=3, a=5, b=5, c=5)
    urls = {uid: expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)),
                        200)["url"] for uid in ("warm", "one", "three")}
    observer = redis.Redis.from_url(private_valkey.url)

    def calls(uid: str, body: dict[str, Any]) -> Counter[str]:
        before = observer.info("commandstats")
        expect(client.post(urls[uid], headers=user_headers(uid), json=body), 200)
        after = observer.info("commandstats")
        return Counter({k: v["calls"] - before.get(k, {"calls": 0})["calls"]
                        for k, v in after.items() if k != "cmdstat_info"})

    calls("warm", {"variant": "a"})  # the script loaded, the activity in the cache
    one = calls("one", {"variant": "b"})
    three = calls("three", {"items": [{"variant": v, "quantity": 1} for v in "abc"]})
    assert three - one == Counter({"cmdstat_hmget": 1}) and one - three == Counter(), (
        one, three)
    assert _numbers(client, aid)["variants"] == {
        "a": {"total": 5, "remaining": 3, "sold": 2}, "b": {"total": 5, "remaining": 3, "sold": 2},
        "c": {"total": 5, "remaining": 4, "sold": 1}}
    observer.close()


def test_a_person_buys_variants_once_whichever_account(make_app):
    """Variants on an activity limited by person: the person's second account gets the
    person's order, whatever variant it asks for; the order carries its items."""
    client = make_app(SECKILL_PERSON_CLAIM="person").test_client()
    aid = _activity(client, limit_by="person")

    def person_headers(uid: str) -> dict[str, str]:
        token = mint_user_token(uid, JWT_SECRET, 600, claims={"person": "pat"})
        return {"Authorization": f"Bearer {token}"}

    def purchase(uid: str, body: dict[str, Any]) -> Any:
        url = expect(client.get(f"/seckill/url?activity={aid}", headers=person_headers(uid)),
                     200)["url"]
        return client.post(url, headers=person_headers(uid), json=body)

    first = expect(purchase("pat-phone", {"items": [{"variant": "s40", "quantity": 1},
                                                    {"variant": "s41", "quantity": 1}]}), 200)
    again = expect(purchase("pat-laptop", {"variant": "s41"}), 409, "already_purchased")
    assert again["order_id"] == first["order_id"]
    status = expect(client.get(f"/seckill/{aid}/order", headers=person_headers("pat-laptop")),
                    200)
    assert status["items"] == first["items"] and status["order_id"] == first["order_id"]
    assert _numbers(client, aid)["sold"] == 2


def test_counters_that_disagree_are_refused_before_anything_is_written(client, rds, prefix):
    """The activity's own counters say fewer units than its variant has (a torn state that
    `seckill reconcile` repairs): the purchase is refused, and neither the variant's counters
    nor anything else is written, for one variant and for several. The script used to take
    the units from the variants first and refuse after, leaving them sold with no order."""
    aid = _activity(client, per_user_limit=5, a=5, b=5)
    meta = f"{prefix}:{{{aid}}}:meta"
    rds.hset(meta, mapping={"total": 1, "remaining": 1, "sold": 0})  # each check alone holds
    before = rds.hgetall(meta)
    assert _script(rds, prefix, aid, "a:2") == ["insufficient_stock", 1]
    assert _script(rds, prefix, aid, "a:1,b:1") == ["insufficient_stock", 1]
    assert rds.hgetall(meta) == before
    assert not rds.exists(f"{prefix}:{{{aid}}}:buyers", f"{prefix}:{{{aid}}}:orders",
                          f"{prefix}:{{{aid}}}:items")
    assert _script(rds, prefix, aid, "b:1")[0] == "ok"  # what there is still sells
    after = rds.hgetall(meta)
    assert (after["remaining"], after["sold"], after["v:b:remaining"], after["v:b:sold"]) == (
        "0", "1", "4", "1")
