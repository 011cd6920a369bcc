"""The outcomes a purchase (or an operator call) can end in, as exceptions carrying their data.

Each class knows its HTTP status and contract error code; the mapping to a JSON body happens
in exactly one place, ``seckill.web.errors``. Nothing here knows about Flask.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from seckill.domain.sizes import size_words


class SeckillError(Exception):
    """Any outcome other than success; as such, an unexpected failure (500 internal)."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    default_message: ClassVar[str] = "unexpected failure"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        self.message = message or self.default_message
        self.extra = extra
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """The contract's JSON error body."""
        return {"error": self.code, "message": self.message, **self.extra}

    def headers(self) -> dict[str, str]:
        """Extra response headers this outcome carries."""
        return {}


class BadRequest(SeckillError):
    """400: the request's body, query or path is malformed."""

    status = 400
    code = "bad_request"
    default_message = "the request is malformed"


class Unauthenticated(SeckillError):
    """401: no valid user token or operator token."""

    status = 401
    code = "unauthenticated"
    default_message = "a valid bearer token is required"


class BadSignature(SeckillError):
    """403: the purchase URL is forged, expired, or someone else's."""

    status = 403
    code = "bad_signature"
    default_message = "this purchase URL is not valid for you, this activity, or any more"


class NotStarted(SeckillError):
    """403: the sale window has not opened yet."""

    status = 403
    code = "not_started"
    default_message = "the sale has not started yet"


class UnknownActivity(SeckillError):
    """404: no such activity."""

    status = 404
    code = "unknown_activity"
    default_message = "no such activity"


class NotFound(SeckillError):
    """404: no such route."""

    status = 404
    code = "not_found"
    default_message = "no such resource"


class UnknownVariant(SeckillError):
    """404: the activity has no variant with this id (carries ``variant``)."""

    status = 404
    code = "unknown_variant"
    default_message = "this activity has no such variant"


class VariantSoldOut(SeckillError):
    """409: a variant has fewer units left than asked while the activity still has others
    (carries ``variant`` and its ``remaining``)."""

    status = 409
    code = "variant_sold_out"
    default_message = "this variant has fewer units left than asked for"


class UnknownOrder(SeckillError):
    """404: no such order."""

    status = 404
    code = "unknown_order"
    default_message = "no such order"


class UnknownWebhook(SeckillError):
    """404: no such webhook endpoint."""

    status = 404
    code = "unknown_webhook"
    default_message = "no such webhook endpoint"


class MethodNotAllowed(SeckillError):
    """405: the route exists, not with this method."""

    status = 405
    code = "method_not_allowed"
    default_message = "this method is not allowed here"

    def __init__(self, allowed: tuple[str, ...] = (), message: str | None = None) -> None:
        super().__init__(message)
        self.allowed = allowed

    def headers(self) -> dict[str, str]:
        """The ``Allow`` header: the methods the route answers."""
        return {"Allow": ", ".join(self.allowed)} if self.allowed else {}


class AlreadyPurchased(SeckillError):
    """409: this user already bought in this activity (carries the order id)."""

    status = 409
    code = "already_purchased"
    default_message = "you have already bought in this activity"


class PurchaseInProgress(SeckillError):
    """409: another purchase of this user is borrowing units from a sharded activity's other
    parts right now; its outcome is the user's order status."""

    status = 409
    code = "purchase_in_progress"
    default_message = "another purchase of yours is being decided; check your order status"

    def headers(self) -> dict[str, str]:
        """``Retry-After: 1``: the other purchase is decided within a round trip or two."""
        return {"Retry-After": "1"}


class InsufficientStock(SeckillError):
    """409: fewer units remain than asked for."""

    status = 409
    code = "insufficient_stock"
    default_message = "fewer units remain than asked for"


class ActivityExists(SeckillError):
    """409: an activity with this id exists."""

    status = 409
    code = "activity_exists"
    default_message = "an activity with this id already exists"


class AlreadyCancelled(SeckillError):
    """409: the order is already cancelled."""

    status = 409
    code = "already_cancelled"
    default_message = "this order is already cancelled"


class HoldExpired(SeckillError):
    """409: this user's order in this activity expired unpaid; no second purchase (carries the
    order id)."""

    status = 409
    code = "hold_expired"
    default_message = "your order here expired unpaid; you cannot buy again in this activity"


class AlreadyPaid(SeckillError):
    """409: the order was paid with another payment reference (carries both)."""

    status = 409
    code = "already_paid"
    default_message = "this order is already paid with another payment reference"


class PaymentExpired(SeckillError):
    """409: the order's payment window has passed; the payment is to be refunded."""

    status = 409
    code = "payment_expired"
    default_message = "the payment window of this order has passed; refund the payment"


class NoPaymentWindow(SeckillError):
    """409: the order's activity has no payment window: nothing to pay here."""

    status = 409
    code = "no_payment_window"
    default_message = "this order's activity has no payment window"


class NotAdmitted(SeckillError):
    """403: a queue or draw activity hands out purchase URLs through its queue only (carries
    ``position`` while the user waits)."""

    status = 403
    code = "not_admitted"
    default_message = "this sale admits buyers through its queue: join it and wait for your turn"


class QueueNotOpen(SeckillError):
    """403: the queue opens later (carries ``queue_opens_at``)."""

    status = 403
    code = "not_open"
    default_message = "the queue is not open yet"


class EntriesClosed(SeckillError):
    """403: a draw takes entries until the sale starts; this one has been drawn."""

    status = 403
    code = "entries_closed"
    default_message = "the draw has taken place; it takes no more entries"


class VerificationRequired(SeckillError):
    """403: the activity limits purchases per person, and the user's token names none (no
    ``SECKILL_PERSON_CLAIM`` claim: the account is not verified)."""

    status = 403
    code = "verification_required"
    default_message = ("this sale counts people, not accounts: your account must be verified "
                       "(your token names no person)")


class AlreadyJoined(SeckillError):
    """409: another account of the same person holds the person's one place in the queue or
    entry in the draw."""

    status = 409
    code = "already_joined"
    default_message = "another of your accounts has already joined this queue"


class ChallengeFailed(SeckillError):
    """403: the proof-of-work solution is missing, wrong, reused, expired or someone else's."""

    status = 403
    code = "challenge_failed"
    default_message = "solve this activity's challenge (GET /seckill/<aid>/challenge) first"


class SoldOut(SeckillError):
    """410: nothing is left."""

    status = 410
    code = "sold_out"
    default_message = "sold out"


class Ended(SeckillError):
    """410: the sale window has closed."""

    status = 410
    code = "ended"
    default_message = "the sale has ended"


class AlreadyEnded(SeckillError):
    """409: the operator asked to end an activity whose sale has already ended."""

    status = 409
    code = "already_ended"
    default_message = "this sale has already ended"


class Paused(SeckillError):
    """503: the operator paused the sale; carries Retry-After (how soon to look again)."""

    status = 503
    code = "paused"
    default_message = "the sale is paused for a moment; please try again shortly"
    RETRY_AFTER = 5  # seconds

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, retry_after=self.RETRY_AFTER)

    def headers(self) -> dict[str, str]:
        """The ``Retry-After`` header, next to the body's ``retry_after``."""
        return {"Retry-After": str(self.RETRY_AFTER)}


class TooLarge(SeckillError):
    """413: the body is over its route's limit (``seckill.domain.sizes``: 4 KiB on the public
    routes)."""

    status = 413
    code = "too_large"
    default_message = "the request body is larger than 4 KiB"

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(None if limit is None
                         else f"the request body is larger than {size_words(limit)}")


class RequestTimeout(SeckillError):
    """408: the client stopped sending its headers or its body in time."""

    status = 408
    code = "timeout"
    default_message = "the request was not received in time"


class IncompleteBody(BadRequest):
    """400: the connection ended before the body its ``Content-Length`` announced."""

    default_message = "the body ended before its Content-Length; nothing was decided"


class ProtocolError(SeckillError):
    """What the HTTP server itself refuses before any route runs (414, 417, 431, 501, ...);
    its status and code are the instance's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status  # type: ignore[misc]
        self.code = code  # type: ignore[misc]


class RateLimited(SeckillError):
    """429: over the per-user rate; carries Retry-After."""

    status = 429
    code = "rate_limited"
    default_message = "too many requests, slow down"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after

    @classmethod
    def after_ms(cls, wait_ms: float) -> RateLimited:
        """Refused for ``wait_ms`` more milliseconds: ``Retry-After`` in whole seconds, >= 1."""
        return cls(retry_after=max(1, math.ceil(wait_ms / 1000)))

    def headers(self) -> dict[str, str]:
        """The ``Retry-After`` header, next to the body's ``retry_after``."""
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
