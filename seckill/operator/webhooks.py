"""The operator's webhook endpoints: register one (its URL, the event types it
wants, its signing secret), list them with what became of their events, remove one, read its
deliveries, replay its events since a moment. The admin API (``/admin/webhooks``) and
``seckill webhooks`` both call these; the dispatcher (``seckill/webhooks/``) sends.

What an endpoint may be: an ``http`` or ``https`` URL with a host, without credentials (a
``user:password@`` would sit in every list and log), at most 2 048 characters. Private
addresses are allowed: only the operator registers endpoints, and a shop's order system
usually lives on a private network. The secret is Standard Webhooks': ``whsec_`` and the
base64 of at least 16 bytes (24 random bytes when the operator gives none).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import weakref
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from seckill.domain import bodies, errors
from seckill.domain.clock import ms_from_iso
from seckill.domain.events import ALL_EVENTS, EVENT_TYPES
from seckill.domain.operators import Operator
from seckill.operator import trail
from seckill.services import Services
from seckill.sql.webhooks import STATUSES, Endpoint, WebhookBook

MAX_PAGE = 200  # as the list of activities
MAX_URL = 2048
MIN_SECRET_BYTES = 16
SECRET_PREFIX = "whsec_"
_FIELDS = frozenset({"url", "events", "secret"})
_ENDPOINT_ID = re.compile(r"ep_[0-9a-f]{20}", re.ASCII)
_SEQ = re.compile(r"[0-9]{1,18}", re.ASCII)
# The characters of a URI (RFC 3986: unreserved, reserved, and "%" of percent-encoding).
_URI = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+", re.ASCII)
_books: weakref.WeakKeyDictionary[sa.Engine, WebhookBook] = weakref.WeakKeyDictionary()

__all__ = ["MAX_PAGE", "STATUSES", "checked_cursor", "checked_id", "checked_seq",
           "checked_status", "deliveries", "new_endpoint", "page", "register", "remove",
           "replay", "since_of"]


def _book(services: Services) -> WebhookBook:
    """The process's one book on the services' database (its schema checked once)."""
    book = _books.get(services.engine)
    if book is None:
        book = _books[services.engine] = WebhookBook(services.engine, services.book.keys)
    return book


# -- what an operator may ask for ------------------------------------------------------


def checked_url(url: Any) -> str:
    """An endpoint's URL if it may be one (see the module's docstring); BadRequest naming
    ``url`` otherwise."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise errors.BadRequest(f"url must be an http or https URL of at most {MAX_URL} "
                                "characters", field="url")
    if _URI.fullmatch(url) is None:
        raise errors.BadRequest("url must hold only the characters of a URI (percent-encode "
                                "blanks, quotes and any other)", field="url")
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed [ of an IPv6 address
        raise errors.BadRequest("url is not a URL", field="url") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise errors.BadRequest("url must be http:// or https://", field="url")
    if "@" in parts.netloc:
        raise errors.BadRequest("url must not carry credentials (user:password@); the "
                                "endpoint's secret signs every event", field="url")
    if not parts.hostname:
        raise errors.BadRequest("url must name a host", field="url")
    try:
        port = parts.port  # raises on a port that is not one
    except ValueError:
        port = 0
    if port == 0:  # urlsplit takes :0, which no endpoint listens on
        raise errors.BadRequest("url has a port that is not one (1..65535)", field="url")
    return url


def checked_events(events: Any) -> list[str]:
    """A non-empty list of known event types (each once, in the order given), or ``["*"]``
    for every type; BadRequest naming ``events`` otherwise."""
    known = ", ".join(EVENT_TYPES)
    if not isinstance(events, list) or not events \
            or not all(isinstance(e, str) for e in events):
        raise errors.BadRequest(f'events must be a non-empty list of event types ({known}) '
                                'or ["*"]', field="events")
    if ALL_EVENTS in events:
        if len(events) != 1:
            raise errors.BadRequest('events: "*" (every type) stands alone', field="events")
        return [ALL_EVENTS]
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise errors.BadRequest(f"events: unknown type {unknown[0][:40]!r} (known: {known})",
                                field="events")
    return list(dict.fromkeys(events))


def checked_secret(secret: Any) -> str:
    """A Standard Webhooks secret, ``whsec_`` and the base64 of at least 16 bytes; BadRequest
    naming ``secret`` otherwise."""
    why = (f"secret must be {SECRET_PREFIX!r} and the base64 of at least {MIN_SECRET_BYTES} "
           "bytes (or absent: one is made)")
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX) or len(secret) > 128:
        raise errors.BadRequest(why, field="secret")
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise errors.BadRequest(why, field="secret") from None
    if len(key) < MIN_SECRET_BYTES:
        raise errors.BadRequest(why, field="secret")
    return secret


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def new_endpoint(body: Any) -> tuple[str, list[str], str]:
    """The endpoint an operator's ``POST /admin/webhooks`` body asks for: its URL, event types
    and secret (made when absent); BadRequest naming the field. Writes nothing."""
    body = bodies.known_fields(bodies.json_object(
        body, '{"url": <http(s) URL>, "events": [<type>, ...] or ["*"], "secret"?: '
        '"whsec_..."}'), _FIELDS)
    url = checked_url(body.get("url"))
    events = checked_events(body.get("events"))
    secret = new_secret() if body.get("secret") is None else checked_secret(body["secret"])
    return url, events, secret


def checked_id(endpoint_id: str) -> str:
    """``endpoint_id`` if it could be an endpoint's; UnknownWebhook (404) otherwise: no
    endpoint has it."""
    if _ENDPOINT_ID.fullmatch(endpoint_id) is None:
        raise errors.UnknownWebhook(id=endpoint_id[:80])
    return endpoint_id


def checked_cursor(cursor: str | None) -> str | None:
    """The id after which a page of endpoints starts (None: the first page); BadRequest."""
    if cursor is not None and _ENDPOINT_ID.fullmatch(cursor) is None:
        raise errors.BadRequest("cursor must be the 'next' of an earlier page", field="cursor")
    return cursor


def checked_seq(cursor: str | None) -> int:
    """The event after which a page of deliveries starts (0: the first page); BadRequest."""
    if cursor is None:
        return 0
    if _SEQ.fullmatch(cursor) is None:
        raise errors.BadRequest("cursor must be the 'next' of an earlier page", field="cursor")
    return int(cursor)


def checked_status(status: str | None) -> str | None:
    """A delivery status to list (None: every one); BadRequest naming ``status``."""
    if status is not None and status not in STATUSES:
        raise errors.BadRequest(f"status must be one of {', '.join(STATUSES)}", field="status")
    return status


def since_of(body: Any) -> int:
    """The moment a replay's body names, ``{"since": ISO}``, in epoch ms; BadRequest."""
    if not isinstance(body, dict):
        raise errors.BadRequest('the body must be {"since": <ISO 8601 time>}')
    bodies.known_fields(body, ("since",))
    if "since" not in body:
        raise errors.BadRequest("since is required: the time from which events are sent "
                                "again", field="since")
    return ms_from_iso(body["since"], "since")


# -- the actions -----------------------------------------------------------------------


def register(services: Services, url: str, events: list[str], secret: str, *,
             by: Operator) -> Endpoint:
    """Register an endpoint (validated by :func:`new_endpoint`); events from now on are sent
    to it. Returns it, its secret with it."""
    # The host only: a URL's path or query may hold what the shop treats as a secret.
    with trail.action(by, "webhook.add", host=urlsplit(url).hostname) as target:
        made = _book(services).add(url, events, secret)
        target["webhook"] = made.id
    return made


def remove(services: Services, endpoint_id: str, *, by: Operator) -> Endpoint:
    """Remove an endpoint; its pending deliveries are never sent. UnknownWebhook."""
    with trail.action(by, "webhook.remove", webhook=endpoint_id[:40]):
        return _book(services).remove(checked_id(endpoint_id))


def page(services: Services, after: str | None,
         limit: int) -> tuple[list[Endpoint], str | None]:
    """A page of endpoints (at most ``limit``, in the order they were registered, after id
    ``after``), each with its summary, and the next page's cursor (None: the last)."""
    return _book(services).page(after, limit)


def deliveries(services: Services, endpoint_id: str, status: str | None, after: int,
               limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """A page of an endpoint's deliveries in event order (of ``status``, or all), and the next
    page's cursor. UnknownWebhook."""
    return _book(services).deliveries(checked_id(endpoint_id), status, after, limit)


def replay(services: Services, endpoint_id: str, since_ms: int, *, by: Operator) -> int:
    """Send again, under their own webhook-ids, the endpoint's events since ``since_ms``;
    returns how many. UnknownWebhook."""
    with trail.action(by, "webhook.replay", webhook=endpoint_id[:40], since_ms=since_ms):
        return _book(services).replay(checked_id(endpoint_id), since_ms)
