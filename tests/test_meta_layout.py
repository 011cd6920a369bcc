"""An activity's meta hash is stored by Redis as a hash table, never as a listpack: every
purchase reads 13 to 16 of its fields, and a listpack finds each by scanning all of them
(``seckill/store/sale/activity/meta.py``'s ``LAYOUT``; measured with
``python -m bench.script_cost``).
For every kind of activity, each part of a sharded one, and a meta hash rebuilt from the
database after Redis lost it. Single Valkey and the cluster.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from seckill.store.plumbing.parts import part_tags
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import iso
from tests.support.tokens import ADMIN

pytestmark = BOTH_BACKENDS

KINDS: dict[str, dict[str, Any]] = {
    "single": {"total": 10},
    "variants": {"variants": [{"id": "s40", "name": "EU 40", "total": 3},
                              {"id": "s41", "name": "EU 41", "total": 2}]},
    "holds": {"total": 10, "payment_window": 600, "per_user_limit": 2},
    "packets": {"kind": "packets", "amount": 1000, "count": 10},
}


def _create(client: Any, **fields: Any) -> str:
    aid = f"l{uuid.uuid4().hex[:10]}"
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": aid, "name": "Layout", "starts_at": iso(-60), "ends_at": iso(3600), **fields}),
        201)
    return aid


def _encoding(rds: redis.Redis, key: str) -> str:
    assert rds.exists(key), key
    return str(rds.object("encoding", key))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_new_meta_hash_is_a_hash_table(client, rds, prefix, kind):
    aid = _create(client, **KINDS[kind])
    assert _encoding(rds, f"{prefix}:{{{aid}}}:meta") == "hashtable"


def test_every_part_of_a_sharded_activity_is_a_hash_table(client, rds, prefix):
    aid = _create(client, total=40, shards=4)
    for tag in part_tags(aid, 4):
        assert _encoding(rds, f"{prefix}:{{{tag}}}:meta") == "hashtable", tag


def test_a_rebuilt_meta_hash_is_a_hash_table(client, rds, prefix):
    aid = _create(client, **KINDS["variants"], per_user_limit=2)
    expect(buy(client, aid, "ann", {"variant": "s40"}), 200)
    meta = f"{prefix}:{{{aid}}}:meta"
    rds.delete(meta)  # Redis lost the activity: the next purchase rebuilds it from the database
    expect(buy(client, aid, "bob", {"variant": "s41"}), 200)
    assert _encoding(rds, meta) == "hashtable"
    assert rds.hget(meta, "v:s41:sold") == "1"
