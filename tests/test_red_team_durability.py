"""The red team's durability finding, with the numbers it measured:
``SECKILL_DURABILITY=replica`` on a master that takes writes while it has no replica online
(``min-replicas-to-write`` 0) sold 200 units to 200 buyers who were each told 503
``durability``, and the gateway only said so once in its log.

* a production gateway refuses to start there, naming the node and the fix;
* started anyway (``SECKILL_DURABILITY_UNGUARDED=1``), the same 200 buyers get one decision
  unconfirmed (the first wait finds no replica), the other 199 are refused before anything is
  decided (503 ``no_replica``), and the stock shows one unit sold.

The cluster cases (a frozen replica, a crowd in flight, the probe that resumes the sale):
tests/test_replica_unguarded.py.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from seckill.config import ConfigError
from tests.support.api import activity_stats, buy, create_activity

BUYERS = 200


def test_replica_durability_on_an_unguarded_master_decides_one_purchase_not_200(
    private_valkey: Any, make_app: Any
) -> None:
    """One server, no replica, no ``min-replicas-to-write``: refused at start in production;
    with the override, 200 buyers one after another: 1 decided (503 ``durability``), 199
    refused before deciding (503 ``no_replica``). Before: 200 decided, 200 told 503."""
    env = {"REDIS_URL": private_valkey.url, "SECKILL_DURABILITY": "replica",
           "SECKILL_DURABILITY_TIMEOUT_MS": "50"}
    with pytest.raises(ConfigError, match=r"min-replicas-to-write is 0 on 127\.0\.0\.1:"):
        make_app(**env)
    client = make_app(**env, SECKILL_DURABILITY_UNGUARDED="1").test_client()
    aid = create_activity(client, total=BUYERS)["id"]
    answers = collections.Counter(
        (response.status_code, (response.get_json() or {}).get("detail"))
        for response in (buy(client, aid, f"buyer{i:03d}") for i in range(BUYERS)))
    assert answers == {(503, "durability"): 1, (503, "no_replica"): BUYERS - 1}, answers
    counts = activity_stats(client, aid)
    assert (counts["sold"], counts["remaining"]) == (1, BUYERS - 1), counts
