"""``seckill reconcile``: an activity's Redis state against the database, and its repair.

Compared: the stock and buyer counts, and each buyer's order as Redis tells it (pending,
confirmed, cancelled) against the database, leaving out the orders still in flight in the
stream. Read-only unless asked to repair.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import PACKETS, counters_disagree
from seckill.domain.orders import (
    CONFIRMED,
    NO_ORDER,
    PENDING,
    StoredOrder,
    Told,
    disagree,
    live_and_cancelled,
    told_body,
    told_by_database,
)
from seckill.store.audit.reconcile_parts import reconcile_parts
from seckill.store.audit.told import IN_FLIGHT_LIMIT, orders_in_flight, told_by_redis
from seckill.store.audit.variant_audit import variant_differences
from seckill.store.sale.activity.recovery import (
    LOCK_TTL_MS,
    ORDERS_GROUP,
    Restorer,
    unclaimed_packets,
)


def reconcile(restorer: Restorer, aid: str, repair: bool = False) -> dict[str, Any]:
    """Compare an activity's Redis state with the database and say what differs; write
    nothing unless ``repair``.

    Compared: the stock and buyer counts, and each buyer's order as Redis tells it (pending,
    confirmed, cancelled) against the database, leaving out the orders still in flight in the
    stream. With ``repair``: a missing state is rebuilt; an order stored but still marked
    pending is marked confirmed (safe at any time); any other difference rebuilds Redis from
    the database, refused while orders wait in the stream (rebuilding would forget them).
    """
    keys, client = restorer.keys, restorer.client
    activity = restorer.book.load_activity(aid)
    if activity is not None and activity.sharded:
        return reconcile_parts(restorer, activity, repair)
    if not client.exists(keys.meta(aid)):
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        if not repair:
            return {"activity": aid, "action": "none", "differences": {
                "redis": "the activity's state is missing; --repair rebuilds it"}}
        if not restorer.ensure(aid):
            raise errors.UnknownActivity(activity=aid)
        return {"activity": aid, "action": "rebuilt", "differences": {}}
    if activity is None:
        return {"activity": aid, "action": "none",
                "differences": {"database": "the database does not know this activity"}}
    if repair:
        restorer.migrate(aid)  # a meta hash from before the unlimited flag: flagged first
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.meta(aid), "total", "remaining", "sold", "amount_given", "unlimited")
    pipe.hlen(keys.buyers(aid))
    pipe.xlen(keys.orders(aid))
    pipe.llen(keys.packets(aid))
    (total_raw, remaining_raw, sold_raw, given_raw, flag), buyers, backlog, listed = (
        pipe.execute())
    told_redis = told_by_redis(client, keys, aid)
    in_flight = orders_in_flight(client, keys.orders(aid))
    stored = restorer.book.orders_of(aid)
    live, _ = live_and_cancelled(stored)
    db_sold = sum(o.quantity for o in live.values())
    expected = {
        "unlimited": int(activity.total is None),
        "total": -1 if activity.total is None else activity.total,
        "remaining": -1 if activity.total is None else activity.total - db_sold,
        "sold": db_sold,
        "buyers": len(live),
    }
    actual = {"unlimited": None if flag is None else int(flag),
              "total": int(total_raw), "remaining": int(remaining_raw),
              "sold": int(sold_raw or 0), "buyers": int(buyers)}
    if activity.kind == PACKETS:
        unclaimed, given = unclaimed_packets(activity, list(live.values()))
        expected.update(remaining=len(unclaimed), packets=len(unclaimed), amount_given=given)
        actual.update(packets=int(listed), amount_given=int(given_raw or 0))
    differences: dict[str, Any] = {
        name: {"redis": actual[name], "database": expected[name]}
        for name in expected if actual[name] != expected[name]
    }
    variant_diffs, variants_disagree = variant_differences(client, keys, activity,
                                                           live.values())
    differences.update(variant_diffs)
    marks = _mark_differences(restorer, aid, told_redis, in_flight, stored)
    if marks is None:
        differences["marks"] = f"not compared: over {IN_FLIGHT_LIMIT} entries wait in the stream"
    elif marks:
        differences["marks"] = {"count": len(marks), "orders": [
            {"user": u, "redis": told_body(r), "database": told_body(d)}
            for u, (r, d) in sorted(marks.items())[:100]]}
    unmarked = [(u, str(r[1])) for u, (r, d) in (marks or {}).items()
                if r[0] == PENDING and d == (CONFIRMED, r[1])]
    report: dict[str, Any] = {
        "activity": aid, "action": "none", "stream_backlog": int(backlog),
        # Purchases refuse (503 inconsistent) while this holds: lua/purchase.lua, grab.lua.
        "inconsistent": counters_disagree(total_raw, remaining_raw, sold_raw, None, flag)
        or (activity.kind == PACKETS and int(listed) != int(remaining_raw))
        or variants_disagree,
        "differences": differences}
    if not repair:
        return report
    if len(unmarked) < len(marks or {}) or set(differences) - {"marks"}:
        if int(backlog):
            report["action"] = ("refused: orders are still waiting in the stream; "
                                "run the worker first")
        else:
            _rebuild_now(restorer, aid)
            report["action"] = "rebuilt"
            return report
    if unmarked:
        args = [ORDERS_GROUP, "0", *itertools.chain.from_iterable(unmarked)]
        marked = restorer.scripts.confirm(keys=[keys.buyers(aid), keys.orders(aid)], args=args)
        report["marked"] = int(marked[0])
        if report["action"] == "none":
            report["action"] = "marked"
    return report


def _mark_differences(
    restorer: Restorer, aid: str, told_redis: dict[str, Told], in_flight: set[str] | None,
    stored: list[StoredOrder],
) -> dict[str, tuple[Told, Told]] | None:
    """The buyers whose order Redis and the database tell differently, read twice: Redis, then
    the stream, then the database (an order moves from the first to the last, so an order
    caught moving between two reads is seen again, settled, on the second pass)."""
    if in_flight is None:
        return None
    told_db = told_by_database(stored)
    suspects = [u for u in told_redis.keys() | told_db.keys()
                if disagree(told_redis.get(u, NO_ORDER), told_db.get(u, NO_ORDER), in_flight)]
    if not suspects:
        return {}
    again = told_by_redis(restorer.client, restorer.keys, aid, suspects)
    in_flight = orders_in_flight(restorer.client, restorer.keys.orders(aid))
    if in_flight is None:
        return None
    told_db = told_by_database(restorer.book.orders_of(aid))
    found = {u: (again.get(u, NO_ORDER), told_db.get(u, NO_ORDER)) for u in suspects}
    return {u: pair for u, pair in found.items() if disagree(*pair, in_flight)}


def _rebuild_now(restorer: Restorer, aid: str) -> None:
    """Rebuild an activity whose state is present (and wrong), under the rebuild lock."""
    keys, client = restorer.keys, restorer.client
    lock, token = keys.rebuild_lock(aid), secrets.token_hex(16)
    if not client.set(lock, token, nx=True, px=LOCK_TTL_MS):
        raise errors.Uninitialized("another rebuild of this activity is in progress")
    try:
        client.delete(keys.meta(aid))
        restorer.rebuild(aid)
    finally:
        restorer.scripts.unlock(keys=[lock], args=[token])
