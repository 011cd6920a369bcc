"""How large a request body may be, per route family: the one table every layer reads (the
gateway's guard, Flask's own parsers, nginx's ``client_max_body_size``), so that they agree.

The public routes take 4 KiB (a purchase, a queue entry, a payment event: a few hundred bytes
at most), and the crowd can send no more. The operator routes (``/admin/...``) take 256 KiB:
their largest valid body, an activity with 100 variants and every text at its longest in
escaped JSON, is about 90 KB; a shop's real drop of 100 variants is ~6.5 KiB.
"""

from __future__ import annotations

PUBLIC_MAX_BODY = 4 * 1024
OPERATOR_MAX_BODY = 256 * 1024
OPERATOR_PREFIX = "/admin/"


def max_body(path: str, credentials: bool = True) -> int:
    """The largest body the route at ``path`` takes, in bytes. ``credentials``: the request
    carries an ``Authorization`` header; an operator route's larger limit is only for those,
    so that without nginx in front nobody may make a gateway read 256 KiB it will refuse
    anyway (a request without a token is answered 401 before its body is used)."""
    if path.startswith(OPERATOR_PREFIX) and credentials:
        return OPERATOR_MAX_BODY
    return PUBLIC_MAX_BODY


def size_words(limit: int) -> str:
    """``limit`` as the messages say it: ``4 KiB``, ``256 KiB``."""
    return f"{limit // 1024} KiB" if limit % 1024 == 0 else f"{limit} bytes"
