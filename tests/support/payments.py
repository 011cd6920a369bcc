"""A payment provider's webhook as the gateway receives it: a payment event's body
(:func:`payment`) and its Standard Webhooks headers, signed with the provider's secret
(:func:`signed`, :data:`SECRET`)."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from standardwebhooks.webhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"payments-webhook-test-secret-32b").decode()


def signed(body: bytes, secret: str = SECRET, at: datetime | None = None,
           msg_id: str | None = None) -> dict[str, str]:
    """The Standard Webhooks headers a payment provider sends with ``body``."""
    when = at or datetime.now(UTC)
    msg = msg_id or f"msg_{uuid.uuid4().hex}"
    return {"webhook-id": msg, "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg, when, body.decode()),
            "Content-Type": "application/json"}


def payment(order_id: str, ref: str, amount: int | None = None,
            kind: str = "payment.succeeded") -> bytes:
    """A payment event's body for ``order_id`` (``payment.succeeded`` unless told)."""
    data: dict[str, Any] = {"order_id": order_id, "payment_ref": ref}
    if amount is not None:
        data["amount"] = amount
    return orjson.dumps({"type": kind, "data": data})
