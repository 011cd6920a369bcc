"""The operator's stats of an activity with variants under traffic: one answer is
one moment, so its variants always add up to its own totals.

Found by the sale-day drill: the activity's counters and its variants were read by two
commands, and a purchase between them made one answer disagree with itself by a unit."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from flask import Flask

from tests.support.api import buy, expect
from tests.support.timing import iso
from tests.support.tokens import ADMIN

BUYERS = 300
READS = 400


def test_the_variants_of_one_stats_answer_add_up_to_its_totals(app: Flask) -> None:
    client = app.test_client()
    aid = f"vs{uuid.uuid4().hex[:10]}"
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Sneaker", "per_user_limit": 1,
        "variants": [{"id": f"s{n}", "name": f"EU {n}", "total": 200} for n in range(3)],
        "starts_at": iso(-60), "ends_at": iso(3600)}), 201)
    done = threading.Event()
    sold = []

    def crowd(offset: int) -> None:
        own = app.test_client()
        for i in range(offset, BUYERS, 3):
            answer = buy(own, aid, f"b{i}-{aid}", {"variant": f"s{i % 3}"})
            sold.append(answer.status_code)
        done.set()

    threads = [threading.Thread(target=crowd, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    torn: list[dict[str, Any]] = []
    reads = 0
    while reads < READS and not (done.is_set() and all(not t.is_alive() for t in threads)):
        stats = expect(client.get(f"/admin/activities/{aid}/stats", headers=ADMIN), 200)
        reads += 1
        variants = stats["variants"].values()
        if (stats["sold"] != sum(v["sold"] for v in variants)
                or stats["remaining"] != sum(v["remaining"] for v in variants)):
            torn.append(stats)
    for thread in threads:
        thread.join(60)
    assert sold.count(200) == BUYERS, sold
    assert reads > 20  # the reads really overlapped the purchases
    assert torn == [], (len(torn), reads, torn[:2])
