"""``seckill reconcile``: an activity's Redis state against the database, and its repair.

Compared: the stock and buyer counts, and each buyer's order as Redis tells it (pending,
confirmed, cancelled) against the database, leaving out the orders still in flight in the
stream. Read-only unless asked to repair.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import redis

from seckill.domain import errors
from seckill.domain.activities import PACKETS, counters_disagree
from seckill.domain.orders import (
    CANCELLED,
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
from seckill.store.connection import Client
from seckill.store.keys import KeySpace, split_buyer_entry
from seckill.store.recovery import CHUNK, LOCK_TTL_MS, ORDERS_GROUP, Restorer, unclaimed_packets

# At most this many stream entries are read to know which orders are in flight.
IN_FLIGHT_LIMIT = 100_000


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
    if activity is not None and activity.shards > 1:
        from seckill.store.reconcile_parts import reconcile_parts
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
        or (activity.kind == PACKETS and int(listed) != int(remaining_raw)),
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


def orders_in_flight(client: Client, stream: str) -> set[str] | None:
    """The order ids of the stream's entries the worker has not acknowledged yet (never
    delivered, or delivered and pending); None past ``IN_FLIGHT_LIMIT`` entries."""
    if not client.exists(stream):
        return set()
    try:
        groups: Any = client.xinfo_groups(stream)
    except redis.ResponseError:
        groups = []
    group = next((g for g in groups if g["name"] == ORDERS_GROUP), None)
    after = str(group["last-delivered-id"]) if group else "0-0"
    undelivered = _pages(lambda start: client.xrange(stream, min=start, max="+", count=CHUNK),
                         "(" + after, lambda entry: str(entry[0]))
    delivered: Iterator[list[Any]] = iter(())
    if group is not None and int(group["pending"]):
        pel = _pages(lambda start: client.xpending_range(stream, ORDERS_GROUP, start, "+", CHUNK),
                     "-", lambda item: str(item["message_id"]))
        delivered = (_entries(client, stream, [str(i["message_id"]) for i in page])
                     for page in pel)
    found: set[str] = set()
    seen = 0
    for entries in itertools.chain(undelivered, delivered):
        found.update(f["order_id"] for _, f in entries if f.get("order_id"))
        seen += len(entries)
        if seen > IN_FLIGHT_LIMIT:
            return None
    return found


def _pages(
    fetch: Callable[[str], Any], start: str, id_of: Callable[[Any], str]
) -> Iterator[list[Any]]:
    """A range read ``CHUNK`` at a time from ``start``, each page after the last id before."""
    while True:
        page = list(fetch(start))
        yield page
        if len(page) < CHUNK:
            return
        start = "(" + id_of(page[-1])


def _entries(client: Client, stream: str, ids: list[str]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xrange(stream, min=entry_id, max=entry_id)
    return [entry for found in pipe.execute() for entry in found]


def told_by_redis(
    client: Client, keys: KeySpace, aid: str, users: list[str] | None = None
) -> dict[str, Told]:
    """Each buyer's order as Redis tells it (all of them, or ``users``)."""
    if users is None:
        buyers = dict(client.hscan_iter(keys.buyers(aid), count=CHUNK))
        cancelled = dict(client.hscan_iter(keys.cancelled(aid), count=CHUNK))
    else:
        pipe = client.pipeline(transaction=False)  # reads only: no MULTI
        pipe.hmget(keys.buyers(aid), users)
        pipe.hmget(keys.cancelled(aid), users)
        buyers, cancelled = ({u: v for u, v in zip(users, got, strict=True) if v is not None}
                             for got in pipe.execute())
    told: dict[str, Told] = {u: (CANCELLED, str(o)) for u, o in cancelled.items()}
    for uid, value in buyers.items():
        order_id, confirmed = split_buyer_entry(str(value))
        told[str(uid)] = (CONFIRMED if confirmed else PENDING, order_id)
    return told


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
