"""What Redis tells of an activity's orders, for reconcile: each buyer's order, and the orders
still in flight in the stream (decided, not yet acknowledged by the orders worker)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import redis

from seckill.domain.orders import CANCELLED, CONFIRMED, PENDING, Told
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace, split_buyer_entry
from seckill.store.sale.activity.recovery import CHUNK, ORDERS_GROUP

# At most this many stream entries are read to know which orders are in flight.
IN_FLIGHT_LIMIT = 100_000


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
