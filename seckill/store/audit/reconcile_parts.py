"""``seckill reconcile`` for a sharded activity: its parts against the database, and what a
gateway that died between two of a borrow's scripts can leave behind.

A crash between ``lua/purchase.lua`` ("borrow") and ``lua/settle.lua`` leaves a **claim**
holding units on the buyer's home part (the buyer's next purchase takes it over once it is
older than the lease; ``--repair`` gives the units back to the part's stock), and possibly a
**transfer** in transit: units a part lent that the home part never received (``--repair``
delivers them, exactly once: ``lua/receive.lua``). Neither is ever sold twice. Compared too:
the whole's total, sold units and buyers, and each buyer's order, against the database; and
each part's counters with each other (total = remaining + held + sold: a part whose counters
disagree refuses its purchases, and ``--repair`` rebuilds it from the database).
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import Activity, counters_disagree
from seckill.domain.clock import now_ms
from seckill.domain.orders import (
    CONFIRMED,
    NO_ORDER,
    PENDING,
    Told,
    disagree,
    live_and_cancelled,
    told_body,
    told_by_database,
)
from seckill.store.audit.told import orders_in_flight, told_by_redis
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.parts import part_tags
from seckill.store.sale.activity.activities import PART_FIELDS
from seckill.store.sale.activity.recovery import LOCK_TTL_MS, ORDERS_GROUP, Restorer, rebuild_parts

# A claim or a transfer younger than this may belong to a purchase still under way: left
# alone. (lua/settle.lua refuses claims older than 60 s, so past this none can settle.)
STALE_MS = 90_000
HELD_AT, UNLIMITED_AT = PART_FIELDS.index("held"), PART_FIELDS.index("unlimited")


def reconcile_parts(restorer: Restorer, activity: Activity, repair: bool) -> dict[str, Any]:
    """Compare a sharded activity's parts with the database; repair what is safe to."""
    keys, client, aid = restorer.keys, restorer.client, activity.id
    tags = part_tags(aid, activity.shards)
    if not restorer.complete(aid):
        if not repair:
            return {"activity": aid, "action": "none", "differences": {
                "redis": "parts of the activity are missing; --repair rebuilds them"}}
        if not restorer.ensure(aid):
            raise errors.UnknownActivity(activity=aid)
        return {"activity": aid, "action": "rebuilt", "differences": {}}
    if repair:
        restorer.migrate(aid)  # parts from before the unlimited flag: flagged first
    now = _now_ms(client, repair)
    pipe = client.pipeline(transaction=False)
    for tag in tags:
        pipe.hmget(keys.meta(tag), PART_FIELDS)
        pipe.hgetall(keys.claims(tag))
        pipe.hgetall(keys.transfers(tag))
        pipe.xlen(keys.orders(tag))
    replies = pipe.execute()
    raw = replies[0::4]
    parts = [[int(v or 0) for v in f] for f in raw]
    claims, transfers, backlogs = replies[1::4], replies[2::4], replies[3::4]
    stale = [(tag, uid, value) for tag, found in zip(tags, claims, strict=True)
             for uid, value in found.items() if now - int(value.split(":", 1)[0]) > STALE_MS]
    # (donor part, donor tag, claim id, [units, home tag, user]); the home part's receipt of
    # it is keyed by claim and donor (lua/include/receive_units.lua).
    records = [(j, tag, claim, value.split("|"))
               for j, (tag, found) in enumerate(zip(tags, transfers, strict=True))
               for claim, value in found.items() if now - int(claim.split(":", 1)[0]) > STALE_MS]
    pipe = client.pipeline(transaction=False)
    for j, _, claim, (_, home, _) in records:
        pipe.hexists(keys.received(home), f"{claim}@{j}")
    received = pipe.execute() if records else []
    stranded = [r for r, done in zip(records, received, strict=True) if not done]
    settled = [r for r, done in zip(records, received, strict=True) if done]

    stored = restorer.book.orders_of(aid)
    live, _ = live_and_cancelled(stored)
    unlimited = raw[0][UNLIMITED_AT] == "1"  # the flag, never a counter
    whole = -1 if unlimited else sum(p[0] + p[3] - p[4] for p in parts)
    actual = {"total": whole, "sold": sum(p[2] for p in parts)}
    expected = {"total": -1 if activity.total is None else activity.total,
                "sold": sum(o.quantity for o in live.values())}
    differences: dict[str, Any] = {
        name: {"redis": actual[name], "database": expected[name]}
        for name in expected if actual[name] != expected[name]}
    disagreeing = {j: {"total": f[0], "remaining": f[1], "sold": f[2], "held": f[HELD_AT]}
                   for j, f in enumerate(raw)
                   if counters_disagree(f[0], f[1], f[2], f[HELD_AT], f[UNLIMITED_AT])}
    if disagreeing:
        differences["parts"] = {"inconsistent": disagreeing}
    unflagged = [j for j, f in enumerate(raw) if f[UNLIMITED_AT] is None]
    if unflagged:
        differences["unlimited"] = {"redis": {"unflagged parts": unflagged},
                                    "database": int(activity.total is None)}
    if stale:
        differences["claims"] = {"count": len(stale), "units": sum(
            int(v.rsplit("|", 1)[1]) for _, _, v in stale)}
    if stranded:
        differences["in_transit"] = {"count": len(stranded),
                                     "units": sum(int(u) for *_, (u, _, _) in stranded)}
    in_flight: set[str] = set()
    told_redis: dict[str, Told] = {}
    for tag in tags:
        found = orders_in_flight(client, keys.orders(tag))
        in_flight |= found or set()
        told_redis.update(told_by_redis(client, keys, tag))
    told_db = told_by_database(stored)
    marks = {u: (told_redis.get(u, NO_ORDER), told_db.get(u, NO_ORDER))
             for u in told_redis.keys() | told_db.keys()
             if disagree(told_redis.get(u, NO_ORDER), told_db.get(u, NO_ORDER), in_flight)}
    if marks:
        differences["marks"] = {"count": len(marks), "orders": [
            {"user": u, "redis": told_body(r), "database": told_body(d)}
            for u, (r, d) in sorted(marks.items())[:100]]}
    report: dict[str, Any] = {"activity": aid, "action": "none",
                              "stream_backlog": sum(int(b) for b in backlogs),
                              "inconsistent": bool(disagreeing), "differences": differences}
    if not repair:
        return report
    done: list[str] = []
    for tag, uid, value in stale:
        if restorer.scripts.release_claim(keys=[keys.meta(tag), keys.claims(tag)],
                                          args=[uid, value])[0] == "released":
            done.append(f"claim of {uid} released")
    for j, tag, claim, (units, home, _) in stranded:
        if restorer.scripts.receive(keys=[keys.meta(home), keys.received(home)],
                                    args=[claim, units, j])[0] == "delivered":
            done.append(f"{units} units of {claim} delivered")
        client.hdel(keys.transfers(tag), claim)
    for _, tag, claim, _ in settled:  # received long ago: the record has done its job
        client.hdel(keys.transfers(tag), claim)
    unmarked = [(u, str(r[1])) for u, (r, d) in marks.items()
                if r[0] == PENDING and d == (CONFIRMED, r[1])]
    by_part: dict[str, list[tuple[str, str]]] = {}
    for uid, order_id in unmarked:
        by_part.setdefault(tags[int(order_id.rsplit("-", 1)[1]) % len(tags)], []).append(
            (uid, order_id))
    for tag, pairs in by_part.items():
        restorer.scripts.confirm(keys=[keys.buyers(tag), keys.orders(tag)],
                                 args=[ORDERS_GROUP, "0", *itertools.chain.from_iterable(pairs)])
        done.append(f"{len(pairs)} orders marked confirmed")
    if disagreeing:
        if sum(int(backlogs[j]) for j in disagreeing):
            done.append(f"refused to rebuild parts {sorted(disagreeing)}: orders are still "
                        "waiting in their streams; run the worker first")
        else:
            rebuild_disagreeing(restorer, activity, [tags[j] for j in disagreeing])
            done.append(f"parts {sorted(disagreeing)} rebuilt from the database")
    if set(differences) - {"marks", "claims", "in_transit", "parts", "unlimited"} or len(
            unmarked) < len(marks):
        done.append("left: the totals or orders differ otherwise; compare again once the "
                    "orders worker has drained the streams")
    report["action"] = "; ".join(done) if done else "none"
    return report


def rebuild_disagreeing(restorer: Restorer, activity: Activity, tags: list[str]) -> None:
    """Rebuild the parts whose counters disagree from the database, as if Redis had lost them
    (``seckill.store.sale.activity.recovery.rebuild_parts``: the other parts are kept as they
    are), under the rebuild lock. Call only once their streams are drained (their buyers come
    back from the database)."""
    keys, client, aid = restorer.keys, restorer.client, activity.id
    lock, token = keys.rebuild_lock(aid), secrets.token_hex(16)
    if not client.set(lock, token, nx=True, px=LOCK_TTL_MS):
        raise errors.Uninitialized("another rebuild of this activity is in progress")
    try:
        for tag in tags:
            client.delete(keys.meta(tag))
        rebuild_parts(client, keys, restorer.scripts, activity, restorer.book.orders_of(aid))
    finally:
        restorer.scripts.unlock(keys=[lock], args=[token])


def _now_ms(client: Client, repair: bool) -> int:
    """What the claims' and transfers' ages are judged by. A repair acts on them: Redis's
    clock, the one that stamped them. A report only reads, and TIME is no read (the server
    flags it neither readonly nor connection, so a read-only ``seckill reconcile`` refuses to
    send it; a red team found it): this host's clock, which only sets which claims the report
    calls stale."""
    if not repair:
        return now_ms()
    t: Any = client.time()
    return int(t[0]) * 1000 + int(t[1]) // 1000
