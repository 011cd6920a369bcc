"""Payments in: ``POST /payments/webhook`` on the public port, for the payment provider.

The provider signs each event per the Standard Webhooks specification with
``SECKILL_PAYMENT_WEBHOOK_SECRET``; the signature (and a timestamp within 5 minutes) is
checked by the ``standardwebhooks`` library before anything of the body is read as JSON, so
an unsigned request learns nothing about orders (401 ``unauthenticated`` whatever it sends).
A signed ``payment.succeeded`` is applied by ``seckill.operator.payments_in``; any other type
is acknowledged and ignored. Without a secret there is no such route (404 ``not_found``): an
unsigned payment is never taken. No per-address limit (nginx passes the route through without
one too): a provider sends from few addresses, and every request is signed.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, request
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from seckill.domain import errors
from seckill.operator import payments_in
from seckill.web.body import json_body, read_body
from seckill.web.current import services

ROUTE = "/payments/webhook"
# The headers the library reads; nothing else of the request reaches it.
_SIGNED = ("webhook-id", "webhook-timestamp", "webhook-signature")


class NotConfigured(errors.NotFound):
    """404: no SECKILL_PAYMENT_WEBHOOK_SECRET, so no payment is taken here."""

    default_message = ("payments webhook not configured: the gateway has no "
                       "SECKILL_PAYMENT_WEBHOOK_SECRET")


def _verify(webhook: Webhook, raw: bytes) -> None:
    """401 unless ``raw`` carries a valid signature of the secret, made within 5 minutes."""
    headers = {name: value for name in _SIGNED if (value := request.headers.get(name))}
    try:
        webhook.verify(raw, headers, json_parse=False)
    # The library raises its own error for a wrong or stale signature, but ValueError (a
    # binascii.Error, a UnicodeDecodeError, an unpacking error) for a malformed one.
    except (WebhookVerificationError, ValueError):
        raise errors.Unauthenticated("a valid Standard Webhooks signature (webhook-id, "
                                     "webhook-timestamp within 5 minutes, webhook-signature) "
                                     "is required") from None


def blueprint(secret: str | None) -> Blueprint:
    """The payments webhook; ``secret`` None: the route answers 404 ``not_found``."""
    bp = Blueprint("payments", __name__)
    webhook = None if secret is None else Webhook(secret)

    @bp.post(ROUTE)
    def payment_webhook() -> dict[str, Any]:
        if webhook is None:
            raise NotConfigured()
        raw = read_body(request.environ)
        _verify(webhook, raw)
        event = json_body(raw, allow_empty=False)
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise errors.BadRequest('the body must be a Standard Webhooks event: {"type": '
                                    '<string>, "data": {...}}', field="type")
        if event["type"] != payments_in.PAYMENT_SUCCEEDED:
            g.outcome = "ignored"
            return {"status": "ignored", "type": event["type"]}
        answer = payments_in.receive(services(), payments_in.parse_payment(event.get("data")))
        g.outcome = str(answer["status"])  # paid, payment_mismatch or refund_due
        return answer

    return bp
