"""Request bodies: the one size guard, the one reader, and the purchase's JSON.

A body over 4 KiB is refused before anything else runs (413 ``too_large``). A plain
``Content-Length`` body is read straight from the socket; anything else (chunked, an odd
length) through werkzeug's own input stream, as Flask reads it.
"""

from __future__ import annotations

from typing import Any

import orjson
from werkzeug.wsgi import get_content_length, get_input_stream

from seckill.domain import errors

MAX_BODY = 4096

WSGIEnviron = dict[str, Any]


def declared_length(environ: WSGIEnviron) -> int | None:
    """The body's declared length (None: chunked or not said); 413 when over ``MAX_BODY``."""
    raw = environ.get("CONTENT_LENGTH")
    if raw and raw.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        length: int | None = int(raw)
    else:
        length = get_content_length(environ)
    if length is not None and length > MAX_BODY:
        raise errors.TooLarge()
    return length


def read_body(environ: WSGIEnviron) -> bytes:
    """The whole body, after :func:`declared_length` allowed it."""
    raw = environ.get("CONTENT_LENGTH")
    if raw and raw.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        length = int(raw)
        return environ["wsgi.input"].read(length) if length else b""
    return get_input_stream(environ, max_content_length=MAX_BODY).read()


def json_body(raw: bytes, allow_empty: bool) -> Any:
    """The body as JSON; empty is ``{}`` where ``allow_empty``; 400 when it is not JSON."""
    if not raw.strip():
        if allow_empty:
            return {}
        raise errors.BadRequest("a JSON body is required")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("the body is not valid JSON") from None


def parse_quantity(body: Any, per_user_limit: int) -> int:
    """A purchase body's quantity (default 1), an integer in 1..``per_user_limit``."""
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object, e.g. {\"quantity\": 1}")
    unknown = sorted(set(body) - {"quantity"})
    if unknown:
        raise errors.BadRequest(f"unknown fields: {', '.join(unknown)}", fields=unknown)
    quantity = body.get("quantity", 1)
    if (
        not isinstance(quantity, int)
        or isinstance(quantity, bool)
        or not 1 <= quantity <= per_user_limit
    ):
        raise errors.BadRequest(
            f"quantity must be an integer in 1..{per_user_limit}", field="quantity"
        )
    return quantity
