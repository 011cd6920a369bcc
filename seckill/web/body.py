"""Request bodies: the one size guard, the one reader, and the purchase's JSON.

A body over 4 KiB is refused before anything else runs (413 ``too_large``); a chunked one as
soon as its 4 097th byte arrives. A body is only ever used whole: a short one is a 400.
"""

from __future__ import annotations

from typing import Any

import orjson
from werkzeug.wsgi import get_content_length

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
    """The whole body, after :func:`declared_length` allowed it.

    Never a part: a body shorter than its ``Content-Length`` (the client half-closed) is a 400
    and a chunked one over ``MAX_BODY`` a 413, each before anything is decided, and the
    connection is then closed (what is left of the body is never read). A client too slow to
    send it meets the server's body deadline first (``seckill.web.server``: 408)."""
    stream = environ["wsgi.input"]
    raw = environ.get("CONTENT_LENGTH")
    if raw and raw.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        length = int(raw)
        data: bytes = stream.read(length) if length else b""
        if len(data) < length:
            _close_after_answer(environ)
            raise errors.IncompleteBody(received=len(data), content_length=length)
        return data
    if "HTTP_TRANSFER_ENCODING" not in environ and not environ.get("wsgi.input_terminated"):
        return b""  # neither a length nor chunks: no body (HTTP/1.1)
    data = stream.read(MAX_BODY + 1)  # chunked: one byte past the limit tells
    if len(data) > MAX_BODY:
        _close_after_answer(environ)
        raise errors.TooLarge()
    return data


def _close_after_answer(environ: WSGIEnviron) -> None:
    # The gateway's gunicorn worker (seckill.web.server.DeadlineSocket) closes the connection
    # after this answer; under any other server this does nothing.
    sock = environ.get("gunicorn.socket")
    if sock is not None and hasattr(sock, "close_after_answer"):
        sock.close_after_answer = True


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
