"""The outcomes a purchase (or an operator call) can end in, as exceptions carrying their data.

Each class knows its HTTP status and contract error code; the mapping to a JSON body happens
in exactly one place, ``edge.errors``. Nothing here knows about Flask.
"""

from __future__ import annotations

from typing import Any, ClassVar


class SeckillError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    default_message: ClassVar[str] = "unexpected failure"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        self.message = message or self.default_message
        self.extra = extra
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}

    def headers(self) -> dict[str, str]:
        return {}


class BadRequest(SeckillError):
    status = 400
    code = "bad_request"
    default_message = "the request is malformed"


class Unauthenticated(SeckillError):
    status = 401
    code = "unauthenticated"
    default_message = "a valid bearer token is required"


class BadSignature(SeckillError):
    status = 403
    code = "bad_signature"
    default_message = "this purchase URL is not valid for you, this activity, or any more"


class NotStarted(SeckillError):
    status = 403
    code = "not_started"
    default_message = "the sale has not started yet"


class UnknownActivity(SeckillError):
    status = 404
    code = "unknown_activity"
    default_message = "no such activity"


class NotFound(SeckillError):
    status = 404
    code = "not_found"
    default_message = "no such resource"


class UnknownOrder(SeckillError):
    status = 404
    code = "unknown_order"
    default_message = "no such order"


class MethodNotAllowed(SeckillError):
    status = 405
    code = "method_not_allowed"
    default_message = "this method is not allowed here"


class AlreadyPurchased(SeckillError):
    status = 409
    code = "already_purchased"
    default_message = "you have already bought in this activity"


class InsufficientStock(SeckillError):
    status = 409
    code = "insufficient_stock"
    default_message = "fewer units remain than asked for"


class ActivityExists(SeckillError):
    status = 409
    code = "activity_exists"
    default_message = "an activity with this id already exists"


class AlreadyCancelled(SeckillError):
    status = 409
    code = "already_cancelled"
    default_message = "this order is already cancelled"


class SoldOut(SeckillError):
    status = 410
    code = "sold_out"
    default_message = "sold out"


class Ended(SeckillError):
    status = 410
    code = "ended"
    default_message = "the sale has ended"


class TooLarge(SeckillError):
    status = 413
    code = "too_large"
    default_message = "the request body is larger than 4 KiB"


class RateLimited(SeckillError):
    status = 429
    code = "rate_limited"
    default_message = "too many requests, slow down"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class Unavailable(SeckillError):
    """The store could not be reached, or the outcome of a purchase is unknown.

    Fail closed: a purchase never answers 200 unless the script's answer was read. A client
    that gets this after sending a purchase can learn what happened from
    ``GET /seckill/<aid>/order``.
    """

    status = 503
    code = "unavailable"
    default_message = "the stock service cannot be reached; check your order status before retrying"


class Uninitialized(SeckillError):
    """The activity's keys are missing in Redis although it exists (Redis lost its data)."""

    status = 503
    code = "unavailable"
    default_message = "the activity's stock is being restored; try again shortly"
