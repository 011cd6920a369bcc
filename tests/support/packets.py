"""The packet tests' helpers (tests/test_packets.py, tests/test_packets_rebuild.py): a packets
activity made through the operator API, its seeded split as the database keeps it, and what
Redis holds of it."""

from __future__ import annotations

import uuid
from typing import Any

import redis
from flask.testing import FlaskClient

from seckill.domain.packets import split
from seckill.sql import engine as db
from seckill.sql.book import OrderBook
from seckill.sql.sealing import Keyring
from tests.support.api import expect
from tests.support.timing import iso
from tests.support.tokens import ADMIN, URL_KEY


def key(prefix: str, aid: str, name: str) -> str:
    """The activity's Redis key ``name`` under the test's prefix."""
    return f"{prefix}:{{{aid}}}:{name}"


def create(client: FlaskClient, amount: int, count: int, **fields: Any) -> dict[str, Any]:
    """A packets activity, open now, made through the operator API: its 201 body."""
    body: dict[str, Any] = {
        "id": f"p{uuid.uuid4().hex[:10]}", "name": "Lucky money", "kind": "packets",
        "amount": amount, "count": count, "starts_at": iso(-60), "ends_at": iso(3600),
    }
    body.update(fields)
    return expect(client.post("/admin/activities", json=body, headers=ADMIN), 201)


def seed(database_url: str, aid: str) -> int:
    """The activity's split seed, as the database keeps it (sealed under the key the test
    gateway derives from its SECKILL_SECRET_KEY)."""
    engine = db.make_engine(database_url)
    try:
        found = OrderBook(engine, Keyring.from_material([URL_KEY])).load_activity(aid)
    finally:
        engine.dispose()
    assert found is not None and found.seed is not None
    return found.seed


def split_of(database_url: str, aid: str, amount: int, count: int) -> list[int]:
    """The packets the activity was split into."""
    return split(amount, count, seed(database_url, aid))


def held(rds: redis.Redis, prefix: str, aid: str) -> tuple[list[int], dict[str, int]]:
    """Atomically: the packets in the list, and user -> amount of each live grab."""
    pipe = rds.pipeline(transaction=True)
    pipe.lrange(key(prefix, aid, "packets"), 0, -1)
    pipe.hgetall(key(prefix, aid, "amounts"))
    listed, amounts = pipe.execute()
    return [int(p) for p in listed], {u: int(a) for u, a in amounts.items()}


def multiset_is_the_split(rds: redis.Redis, prefix: str, aid: str, packets: list[int]) -> None:
    """Every packet is in the list or held by a live grab, exactly once."""
    listed, amounts = held(rds, prefix, aid)
    assert sorted(listed + list(amounts.values())) == sorted(packets)
