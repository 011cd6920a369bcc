"""An upgrade from the meta hash of before the ``unlimited`` flag: then
``remaining = -1`` (and ``total = -1``) meant unlimited. The database says which activities
are unlimited (``total`` NULL); the new gateway asks it on its first copy of such an activity
(or when a script answers ``unmigrated``): an unlimited one stays unlimited and sells, a
limited one stays limited, and a limited one that reads -1 refuses as inconsistent.

``V2`` is a frozen copy of the fields the gateway wrote before the flag
(``Activity.redis_fields`` and ``part_fields`` of commit e335bfa, now
``seckill.store.sale.activity.meta``): the test writes them by
hand, as that code did, never through today's code."""

from __future__ import annotations

from typing import Any

import redis

from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags
from tests.support.api import buy, expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.tokens import ADMIN


def v2_meta(name: str, starts_ms: int, ends_ms: int, total: int, per_user_limit: int = 1,
            part: tuple[int, int] | None = None) -> dict[Any, Any]:
    """The meta hash of one stock activity (or of part j of n: ``part=(j, n)``), exactly as
    the code before the flag wrote it; ``total`` -1 for unlimited (remaining too)."""
    fields: dict[Any, Any] = {
        "name": name, "kind": "stock", "starts_ms": starts_ms, "ends_ms": ends_ms,
        "total": total, "remaining": total, "per_user_limit": per_user_limit,
        "sold": 0, "seq": 0, "created_ms": now_ms(),
    }
    if part is not None:
        j, shards = part
        fields.update(shards=shards, part=j, held=0, lent=0, borrowed=0, seq=j)
    return fields


def stored_before_the_flag(app: Any, rds: redis.Redis, prefix: str, aid: str,
                           total: int | None, shards: int = 1,
                           meta_total: int | None = None) -> None:
    """The activity in the database (the gateway's own insert) and its meta hash(es) in the
    shape of before the flag; ``meta_total`` overrides what the meta says (a torn replay)."""
    at = now_ms()
    activity = Activity(id=aid, name="Old", starts_ms=at - 60_000, ends_ms=at + 3_600_000,
                        total=total, remaining=total, shards=shards)
    app.extensions["seckill"].book.save_activity(activity)
    keys = KeySpace(prefix)
    stored = -1 if total is None else total
    if meta_total is not None:
        stored = meta_total
    if shards == 1:
        rds.hset(keys.meta(aid), mapping=v2_meta("Old", activity.starts_ms, activity.ends_ms,
                                                 stored))
        return
    share = -1 if stored < 0 else stored // shards
    for j, tag in reversed(list(enumerate(part_tags(aid, shards)))):
        rds.hset(keys.meta(tag), mapping=v2_meta("Old", activity.starts_ms, activity.ends_ms,
                                                 share, part=(j, shards)))


def test_an_upgrade_keeps_unlimited_unlimited_and_limited_limited(
    make_app: Any, rds: redis.Redis, prefix: str,
) -> None:
    old = make_app()  # the database's schema; nothing of it is used after this
    stored_before_the_flag(old, rds, prefix, "v2free", None)
    stored_before_the_flag(old, rds, prefix, "v2three", 3)
    stored_before_the_flag(old, rds, prefix, "v2parts", None, shards=2)
    stored_before_the_flag(old, rds, prefix, "v2torn", 5, meta_total=-1)
    keys = KeySpace(prefix)
    assert rds.hget(keys.meta("v2free"), "unlimited") is None

    client = make_app().test_client()  # the new gateway, started on the old data
    for i in range(12):
        expect(buy(client, "v2free", f"f{i}"), 200)
        expect(buy(client, "v2parts", f"f{i}"), 200)
    for i in range(3):
        expect(buy(client, "v2three", f"t{i}"), 200)
    expect(buy(client, "v2three", "t3"), 410, "sold_out")
    refused = expect(buy(client, "v2torn", "x"), 503, "unavailable")
    assert refused["detail"] == "inconsistent"

    assert rds.hget(keys.meta("v2free"), "unlimited") == "1"
    assert rds.hget(keys.meta("v2three"), "unlimited") == "0"
    assert [rds.hget(keys.meta(t), "unlimited") for t in part_tags("v2parts", 2)] == ["1", "1"]
    view = expect(client.get("/seckill/activities/v2free"), 200)
    assert (view["total"], view["remaining"]) == (None, None)
    stats = expect(client.get("/admin/activities/v2parts/stats", headers=ADMIN), 200)
    assert (stats["total"], stats["remaining"], stats["sold"]) == (None, None, 12)
    expect(client.post("/admin/activities/v2free/stock", json={"add": 5}, headers=ADMIN),
           400, "bad_request")


def test_a_script_meeting_an_unmigrated_meta_hash_has_it_migrated(
    make_app: Any, rds: redis.Redis, prefix: str,
) -> None:
    """A process that copied the activity before the meta hash lost its flag (a restore of an
    old backup): the purchase script answers ``unmigrated``, the gateway asks the database,
    and the purchase goes through."""
    app = make_app()
    client = app.test_client()
    stored_before_the_flag(app, rds, prefix, "v2late", None)
    expect(buy(client, "v2late", "first"), 200)
    rds.hdel(KeySpace(prefix).meta("v2late"), "unlimited")
    expect(buy(client, "v2late", "second"), 200)
    assert rds.hget(KeySpace(prefix).meta("v2late"), "unlimited") == "1"
    assert rds.hget(KeySpace(prefix).meta("v2late"), "sold") == "2"
