"""2,000 buyers race for 5 variants x 20 units over real HTTP: gunicorn with gevent
workers on the session's Valkey and on its cluster (tests/test_concurrency.py's gateway), 96
client threads, every buyer's URL fetched first and the purchases all at once. Exactly 100
winners, exactly 20 of each variant, no buyer twice, and every other answer a sold-out one."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from tests.support.race import CLIENT_THREADS, Gateway, order_ids_of_buyers, run_all
from tests.support.timing import iso
from tests.support.tokens import ADMIN, user_headers

# The race's fixtures, ``gateway`` and ``rdb`` of tests/support/race.py: a gunicorn of this
# module's own, on the single server and the cluster.

VARIANTS, UNITS, BUYERS = 5, 20, 2_000


def test_two_thousand_buyers_on_five_variants(gateway: Gateway, rdb: redis.Redis) -> None:
    aid = gateway.activity_ids(1)[0]
    sizes = [f"s{36 + i}" for i in range(VARIANTS)]
    status, body = gateway.call("POST", "/admin/activities",
                                headers={**ADMIN, "Content-Type": "application/json"}, body={
        "id": aid, "name": "Sneaker", "starts_at": iso(-60), "ends_at": iso(3600),
        "variants": [{"id": vid, "name": vid.upper(), "total": UNITS} for vid in sizes]})
    assert status == 201, body
    uids = [f"crowd{i:05d}" for i in range(BUYERS)]
    wants = {uid: sizes[i % VARIANTS] for i, uid in enumerate(uids)}
    headers = {uid: user_headers(uid) for uid in uids}

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        def fetch_url(uid: str) -> tuple[int, dict[str, Any]]:
            return gateway.call("GET", f"/seckill/url?activity={aid}", headers=headers[uid])

        urls = run_all(pool, fetch_url, [(uid,) for uid in uids])
        assert collections.Counter(s for s, _ in urls) == {200: BUYERS}
        gate = threading.Event()

        def purchase(uid: str, path: str) -> tuple[str, int, dict[str, Any]]:
            gate.wait(10)
            return uid, *gateway.call("POST", path, headers=headers[uid],
                                      body={"variant": wants[uid]})

        answers = run_all(pool, purchase, [(uid, body["url"]) for uid, (_, body)
                                           in zip(uids, urls, strict=True)], gate=gate)

    winners = [(uid, body) for uid, s, body in answers if s == 200]
    assert len(winners) == VARIANTS * UNITS
    assert len({uid for uid, _ in winners}) == len(winners)
    per_variant = collections.Counter(body["items"][0]["variant"] for _, body in winners)
    assert per_variant == dict.fromkeys(sizes, UNITS)
    assert all(body["items"] == [{"variant": wants[uid], "quantity": 1}]
               for uid, body in winners)
    refusals = collections.Counter((s, body.get("error")) for _, s, body in answers if s != 200)
    assert set(refusals) <= {(409, "variant_sold_out"), (410, "sold_out")}, refusals

    meta = rdb.hgetall(gateway.key(aid, "meta"))
    assert (meta["total"], meta["remaining"], meta["sold"]) == ("100", "0", "100")
    for vid in sizes:
        assert (meta[f"v:{vid}:remaining"], meta[f"v:{vid}:sold"]) == ("0", str(UNITS))
    buyers = order_ids_of_buyers(rdb, gateway.key(aid, "buyers"))
    assert buyers == {uid: body["order_id"] for uid, body in winners}
    items = rdb.hgetall(gateway.key(aid, "items"))
    assert items == {body["order_id"]: f"{wants[uid]}:1" for uid, body in winners}
    stats = gateway.call("GET", f"/admin/activities/{aid}/stats", headers=ADMIN)[1]
    assert stats["variants"] == {vid: {"total": UNITS, "remaining": 0, "sold": UNITS}
                                 for vid in sizes}
