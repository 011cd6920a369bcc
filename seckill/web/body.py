"""Request bodies: the one size guard, the one reader, and the purchase's terms (its JSON
body, or its query).

A body over its route's limit (``seckill.domain.sizes``: 4 KiB on the public routes, 256 KiB
on the operator's ``/admin/...``) is refused before anything else runs, on every route (413
``too_large``): a declared one by its ``Content-Length``, a chunked one as soon as the byte past
the limit arrives (the guard reads it then, even on a route that takes no body). A body is only
ever used whole: a short one is a 400. No text of a body or a query may hold a NUL (400
``bad_request``): PostgreSQL cannot store one, and no field of the contract has a use for it.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Request
from werkzeug.wsgi import get_content_length

from seckill.domain import errors
from seckill.domain.sizes import PUBLIC_MAX_BODY, max_body

MAX_BODY = PUBLIC_MAX_BODY  # the public routes'; body_limit() says a route's own
# A Content-Length as gunicorn passes it: ASCII digits (str.isdigit() would take "²").
_LENGTH = re.compile(r"[0-9]{1,18}", re.ASCII)
_READ = "seckill.body"  # the environ key of a chunked body the guard read whole
# A purchase's terms in its query (purchase_terms), as the sale page writes them: plain ids.
_PLAIN_TERMS = re.compile(r"variant=([A-Za-z0-9_-]{1,32})(?:&quantity=([0-9]{1,9}))?",
                          re.ASCII)
_TERMS = frozenset({"variant", "quantity"})
_DIGITS = re.compile(r"[0-9]{1,9}", re.ASCII)

WSGIEnviron = dict[str, Any]


def _sized(environ: WSGIEnviron) -> int | None:
    raw = environ.get("CONTENT_LENGTH")
    if raw and _LENGTH.fullmatch(raw) and "HTTP_TRANSFER_ENCODING" not in environ:
        return int(raw)
    return None


def body_limit(environ: WSGIEnviron) -> int:
    """The largest body the request's route takes (by its path, as Flask routes it, and
    whether it carries credentials at all)."""
    return max_body(environ.get("PATH_INFO") or "", "HTTP_AUTHORIZATION" in environ)


def declared_length(environ: WSGIEnviron) -> int | None:
    """The one size guard, first on every route: the body's declared length (None: chunked
    or not said), 413 when over the route's :func:`body_limit`. A chunked body is read here,
    up to one byte past the limit, so that one too large is refused whatever the route (a
    route that takes no body would otherwise answer without ever reading it);
    :func:`read_body` then gives it."""
    length = _sized(environ)
    if length is None:
        length = get_content_length(environ)
    limit = body_limit(environ)
    if length is not None and length > limit:
        raise errors.TooLarge(limit)
    if length is None and "HTTP_TRANSFER_ENCODING" in environ and _READ not in environ:
        environ[_READ] = _read_chunked(environ)
    return length


def _read_chunked(environ: WSGIEnviron) -> bytes:
    limit = body_limit(environ)
    try:
        data: bytes = environ["wsgi.input"].read(limit + 1)  # one byte past the limit tells
    except (ParseException, NoMoreData) as exc:
        # gunicorn parses the chunks as they are read: a bad chunk size, a missing CRLF or a
        # connection closed half way is the client's fault (it answered 500).
        _close_after_answer(environ)
        raise errors.BadRequest(f"malformed chunked body: {type(exc).__name__}") from None
    if len(data) > limit:
        _close_after_answer(environ)  # what is left of it is never read
        raise errors.TooLarge(limit)
    return data


def read_body(environ: WSGIEnviron) -> bytes:
    """The whole body, after :func:`declared_length` allowed it.

    Never a part: a body shorter than its ``Content-Length`` (the client half-closed) is a 400
    and a chunked one over the route's limit a 413, each before anything is decided, and the
    connection is then closed (what is left of the body is never read). A client too slow to
    send it meets the server's body deadline first (``seckill.web.server``: 408)."""
    if _READ in environ:
        read: bytes = environ[_READ]
        return read
    length = _sized(environ)
    if length is not None:
        data: bytes = environ["wsgi.input"].read(length) if length else b""
        if len(data) < length:
            _close_after_answer(environ)
            raise errors.IncompleteBody(received=len(data), content_length=length)
        return data
    if "HTTP_TRANSFER_ENCODING" not in environ and not environ.get("wsgi.input_terminated"):
        return b""  # neither a length nor chunks: no body (HTTP/1.1)
    return _read_chunked(environ)


def refuse_nul_query(query: str) -> None:
    """400 when a query string decodes to text holding a NUL: only ``%00`` (or a raw NUL)
    does, since a ``%`` never ends another escape."""
    if "%00" in query or "\x00" in query:
        raise errors.BadRequest("a query parameter holds a NUL character")


def _has_nul(body: Any) -> bool:
    # A loop, not recursion: 4 KiB of JSON nests deeper than Python's recursion limit.
    pending = [body]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


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
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("the body is not valid JSON") from None
    # Once here for every text of every body (names, descriptions, URLs, ids, currencies...):
    # SQLite would store a NUL, PostgreSQL refuses it with an error (a 500).
    if b"\\u0000" in raw and _has_nul(body):
        raise errors.BadRequest("a text in the body holds a NUL character (\\u0000)")
    return body


def purchase_terms(environ: WSGIEnviron) -> Any:
    """What a purchase asks for: its JSON body, or the same terms in its URL's query
    (``?variant=<vid>&quantity=<n>``, each optional), never both (400).

    The query is the cheaper way: a request without a body is two headers and a body read
    shorter in gunicorn's parser, about 8 % of a purchase's CPU (docs/performance.md), and is
    what the sale page sends. Its terms then go through the same checks as a body's
    (:func:`parse_quantity`, ``seckill.domain.variants.parse_purchase``)."""
    query: str = environ.get("QUERY_STRING") or ""
    raw = read_body(environ)
    if not query:
        return json_body(raw, allow_empty=True)
    if raw.strip():
        raise errors.BadRequest("name what is bought in the body or in the URL's query, "
                                "not both")
    plain = _PLAIN_TERMS.fullmatch(query)
    if plain is not None:  # as the sale page sends it: nothing to decode
        vid, quantity = plain.groups()
        return {"variant": vid} if quantity is None else {"variant": vid,
                                                          "quantity": int(quantity)}
    return _query_terms(Request(environ).args)  # decoded exactly as Flask would


def _query_terms(args: MultiDict[str, str]) -> dict[str, Any]:
    unknown = sorted(set(args) - _TERMS)
    if unknown:
        raise errors.BadRequest(f"unknown query parameters: {', '.join(unknown)[:200]}; a "
                                "purchase's are variant and quantity", fields=unknown[:20])
    terms: dict[str, Any] = {}
    for name in sorted(args):
        values = args.getlist(name)
        if len(values) > 1:
            raise errors.BadRequest(f"{name} is given more than once", field=name)
        terms[name] = values[0]
    if "quantity" in terms:
        if not _DIGITS.fullmatch(terms["quantity"]):
            raise errors.BadRequest("quantity must be a whole number, e.g. quantity=2",
                                    field="quantity")
        terms["quantity"] = int(terms["quantity"])
    return terms


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


def request_arrival_ms(stamp: str | None, received_ms: int) -> int:
    """When a request arrived (epoch ms): nginx's stamp (``X-Request-Start: t=<seconds>``, as
    ``$msec`` writes it; milli- or microseconds are read too) when it is earlier than this
    process's receipt ``received_ms``. A later stamp never counts (a client talking to
    gunicorn directly could send any), nor one that is not a number."""
    if stamp:
        raw = stamp[2:] if stamp.startswith("t=") else stamp
        try:
            value = float(raw)
        except ValueError:
            return received_ms
        if value > 1e14:  # microseconds
            value /= 1000
        elif value < 1e11:  # seconds
            value *= 1000
        if 0 < value < received_ms:
            return int(value)
    return received_ms
