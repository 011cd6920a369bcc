"""A sharded activity says "sold out" only when it is: no part has, holds or lends a unit.

A buyer asking for more than a part holds makes their home part hold its units in a claim and
borrow the others' while their purchase is in flight; a one-unit buyer arriving then finds
every part empty. Before, that buyer got 410 ``sold_out``, the process's copy kept
``remaining = 0`` and nginx repeated the 410, while the units came back a moment later. Now
such a refusal is checked against every part first: while a unit is held or in transit the
purchase is tried again, then answered 503 ``unavailable`` (detail ``held``), never 410.
Single server and cluster, through the app; a crowd of real threads at the end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import home_part, part_tags
from seckill.store.plumbing.scripts import Scripts
from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.tokens import ADMIN, user_headers

pytestmark = BOTH_BACKENDS


def _uid_at(part: int, shards: int, stem: str) -> str:
    """A user id whose home is ``part``."""
    return next(f"{stem}{i}" for i in range(10_000) if home_part(f"{stem}{i}", shards) == part)


def _stats(client: Any, aid: str) -> dict[str, Any]:
    return expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)


def test_units_held_by_a_borrowing_purchase_are_never_called_sold_out(
        client: Any, rds: redis.Redis, make_activity: Callable[..., dict[str, Any]],
        prefix: str) -> None:
    aid = make_activity(total=4, shards=2, per_user_limit=5)["id"]
    keys, scripts = KeySpace(prefix), Scripts(rds)
    tags = part_tags(aid, 2)
    # A buyer asking for 5 (of 4): their home part holds its 2, the other part lends its 2;
    # their purchase has not settled yet.
    big = _uid_at(0, 2, "big")
    borrow = scripts.purchase(keys=keys.part_keys(tags[0]), args=[big, 5, aid, 0])
    assert borrow[0] == "borrow", borrow
    lent = scripts.lend(keys=[keys.meta(tags[1]), keys.transfers(tags[1])],
                        args=[borrow[1], 3, tags[0], big])
    assert lent[:2] == ["lent", 2], lent
    # Every part now says 0 left; four units are held or in transit.
    small = _uid_at(1, 2, "small")
    headers = user_headers(small)
    url = expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
    refused = client.post(url, headers=headers)
    body = expect(refused, 503, "unavailable")
    assert body["detail"] == "held", body
    # Nothing believes it sold out: the URL route still hands out URLs, the view says 4 left.
    expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("other")), 200)
    assert expect(client.get(f"/seckill/activities/{aid}"), 200)["remaining"] == 4
    # The big purchase settles (too few: everything back), and the small buyer buys.
    settled = scripts.settle(keys=keys.settle_keys(tags[0]),
                             args=[big, 5, aid, borrow[1], 0, 1, 2])
    assert settled[0] == "insufficient_stock", settled
    expect(client.post(url, headers=headers), 200)
    assert _stats(client, aid)["remaining"] == 3


def test_a_crowd_mixing_one_unit_and_oversized_buyers_sells_every_unit(
        app: Any, client: Any, make_activity: Callable[..., dict[str, Any]]) -> None:
    """As many one-unit buyers as units, racing buyers who ask for more than there is (refused
    in the end, after holding units on the way): every one-unit buyer buys, none hears 410."""
    units, shards = 12, 4
    aid = make_activity(total=units, shards=shards, per_user_limit=50)["id"]
    stem = uuid.uuid4().hex[:6]
    singles = [f"s{stem}{i}" for i in range(units)]
    greedy = [f"g{stem}{i}" for i in range(12)]
    outcomes: dict[str, list[str]] = {uid: [] for uid in singles + greedy}
    start = threading.Event()
    stop_greedy = threading.Event()

    def single(uid: str) -> None:
        own = app.test_client()
        headers = user_headers(uid)
        url = expect(own.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
        start.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # as the sale page does: 503 and 409 are retried
            answer = own.post(url, headers=headers)
            outcomes[uid].append(answer.get_json().get("error", "ok"))
            if answer.status_code not in (503, 409) or answer.get_json().get(
                    "error") == "already_purchased":
                return
            time.sleep(0.02)

    def oversized(uid: str) -> None:
        own = app.test_client()
        headers = user_headers(uid)
        url = expect(own.get(f"/seckill/url?activity={aid}", headers=headers), 200)["url"]
        start.wait(10)
        deadline = time.monotonic() + 20
        while not stop_greedy.is_set() and time.monotonic() < deadline:
            answer = own.post(url, headers=headers, json={"quantity": 50})
            outcomes[uid].append(answer.get_json().get("error", "ok"))

    threads = [threading.Thread(target=single, args=(uid,)) for uid in singles]
    hogs = [threading.Thread(target=oversized, args=(uid,)) for uid in greedy]
    for thread in threads + hogs:
        thread.start()
    start.set()
    for thread in threads:
        thread.join(30)
    stop_greedy.set()
    for thread in hogs:
        thread.join(30)
    false_sold_out = {uid: seen for uid in singles if "sold_out" in (seen := outcomes[uid])}
    assert not false_sold_out, false_sold_out
    assert all(outcomes[uid][-1] == "ok" for uid in singles), outcomes
    assert all("ok" not in outcomes[uid] for uid in greedy), outcomes
    stats = _stats(client, aid)
    assert (stats["sold"], stats["remaining"]) == (units, 0), stats


def test_a_borrow_that_settles_after_the_end_sells_nothing(
        client: Any, rds: redis.Redis, make_activity: Callable[..., dict[str, Any]],
        prefix: str) -> None:
    """A purchase that borrowed before the operator's end and settles after it: no order
    after the answered end; the claim's units go back to its part's stock."""
    aid = make_activity(total=4, shards=2, per_user_limit=5)["id"]
    keys, scripts = KeySpace(prefix), Scripts(rds)
    tags = part_tags(aid, 2)
    buyer = _uid_at(0, 2, "late")
    borrow = scripts.purchase(keys=keys.part_keys(tags[0]), args=[buyer, 3, aid, 0])
    assert borrow[0] == "borrow", borrow
    lent = scripts.lend(keys=[keys.meta(tags[1]), keys.transfers(tags[1])],
                        args=[borrow[1], 1, tags[0], buyer])
    assert lent[:2] == ["lent", 1], lent
    ended = expect(client.post(f"/admin/activities/{aid}/end", headers=ADMIN), 200)
    assert ended["state"] == "ended", ended
    time.sleep(0.005)  # Redis's clock past the end it answered
    settled = scripts.settle(keys=keys.settle_keys(tags[0]),
                             args=[buyer, 3, aid, borrow[1], 0, 1, 1])
    assert settled == ["ended"], settled
    assert not rds.hget(keys.part_keys(tags[0])[1], buyer)  # no buyer recorded
    numbers = _stats(client, aid)
    assert (numbers["sold"], numbers["remaining"]) == (0, 4), numbers
