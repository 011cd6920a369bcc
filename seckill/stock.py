"""The stock decision: one EVALSHA of ``lua/purchase.lua`` per purchase, nothing else.

Failure behaviour (fail closed): if the script's answer was not read (connection refused,
timeout, pool exhausted), the purchase answers 503 ``unavailable``. The decision may or may not
have been taken; the client resolves it with ``GET /seckill/<aid>/order``. The purchase is never
retried here: a retried EVALSHA is a second purchase attempt.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from seckill import errors
from seckill.activities import iso_from_ms
from seckill.store import KeySpace, Scripts


@dataclasses.dataclass(frozen=True, slots=True)
class Purchase:
    order_id: str
    quantity: int
    remaining: int | None  # None: unlimited


@dataclasses.dataclass(frozen=True, slots=True)
class OrderStatus:
    status: str
    order_id: str | None = None

    def body(self) -> dict[str, Any]:
        if self.order_id is None:
            return {"status": self.status}
        return {"status": self.status, "order_id": self.order_id}


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    total: int | None
    remaining: int | None
    sold: int
    buyers: int

    def body(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "remaining": self.remaining,
            "sold": self.sold,
            "buyers": self.buyers,
            # Until the orders worker confirms them in the database, every decided order is
            # pending; the orders issue fills in confirmed and cancelled.
            "orders": {"pending": self.buyers, "confirmed": 0, "cancelled": 0},
        }


class StockService:
    def __init__(self, client: redis.Redis, keys: KeySpace, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    def purchase(self, aid: str, uid: str, quantity: int) -> Purchase:
        try:
            reply = self.scripts.purchase(
                keys=self.keys.activity_keys(aid), args=[uid, quantity, aid]
            )
        except redis.RedisError as exc:
            raise errors.Unavailable(detail=type(exc).__name__) from exc
        return _outcome(reply, quantity)

    def order_status(self, aid: str, uid: str) -> OrderStatus:
        try:
            order_id = self.client.hget(self.keys.buyers(aid), uid)
        except redis.RedisError as exc:
            raise errors.Unavailable(detail=type(exc).__name__) from exc
        if order_id is None:
            return OrderStatus("none")
        return OrderStatus("pending", str(order_id))

    def stats(self, aid: str) -> Stats | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.meta(aid), "total", "remaining", "sold")
        pipe.hlen(self.keys.buyers(aid))
        (total_raw, remaining_raw, sold_raw), buyers = pipe.execute()
        if total_raw is None:
            return None
        total, remaining = int(total_raw), int(remaining_raw)
        return Stats(
            total=None if total < 0 else total,
            remaining=None if remaining < 0 else remaining,
            sold=int(sold_raw or 0),
            buyers=int(buyers),
        )


def _outcome(reply: list[Any], quantity: int) -> Purchase:
    kind = reply[0]
    if kind == "ok":
        remaining = int(reply[2])
        return Purchase(str(reply[1]), quantity, None if remaining < 0 else remaining)
    if kind == "already_purchased":
        raise errors.AlreadyPurchased(order_id=str(reply[1]))
    if kind == "sold_out":
        raise errors.SoldOut()
    if kind == "insufficient_stock":
        raise errors.InsufficientStock(remaining=int(reply[1]))
    if kind == "not_started":
        raise errors.NotStarted(starts_at=iso_from_ms(int(reply[1])), now_ms=int(reply[2]))
    if kind == "ended":
        raise errors.Ended()
    if kind == "bad_quantity":
        raise errors.BadRequest(
            f"quantity must be an integer in 1..{int(reply[1])}", field="quantity"
        )
    if kind == "uninitialized":
        raise errors.Uninitialized()
    raise errors.SeckillError(f"unexpected script reply {kind!r}")
