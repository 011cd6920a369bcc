"""What nginx may repeat for a second: the activity-level refusals of the two hot routes.

Almost every request of a flash sale is a refusal that does not depend on who asks: the
activity is sold out, over, not open yet, paused or unknown. The gateway marks exactly those
answers with ``X-Accel-Expires`` and nginx's edge cache (``nginx/nginx.conf.template``, zone
``edge``, keyed by the canonical activity id) repeats them until the end of the current second;
every other answer carries no such header and nginx never stores it. The gateway stays the
only source of these answers: nginx repeats what it said a moment ago, it never decides.

- ``GET /seckill/url``: ``sold_out``, ``ended``, ``not_started``, ``paused``,
  ``unknown_activity``.
- The purchase: the same but ``sold_out``: a winner who repeats a purchase must still get the
  gateway's 409 ``already_purchased`` with the order id (the sold-out flag answers the losers
  in-process, without Redis).

The header is absolute (``@<unix second>``): nginx keeps the entry while its clock reads that
second, so an answer lives at most one second (on average half), never the up-to-two that a
relative ``X-Accel-Expires: 1`` allows (nginx's cache validity is in whole seconds). A
``not_started`` answer is not marked when the sale starts before that second is over, so no
copy outlives ``starts_at``; its ``now_ms`` is rewritten by nginx when it is served
(``X-Seckill-Now-Ms`` names the value to replace), so a client's countdown is set by the time
the answer is sent.
"""

from __future__ import annotations

from seckill.domain import errors
from seckill.domain.clock import ms_from_iso

EXPIRES = "X-Accel-Expires"  # read by nginx, never passed on to the client
NOW_MS = "X-Seckill-Now-Ms"  # the now_ms in a not_started body; nginx replaces it when serving

URL_REFUSALS = frozenset({"sold_out", "ended", "not_started", "paused", "unknown_activity"})
PURCHASE_REFUSALS = URL_REFUSALS - {"sold_out"}


def cache_headers(refusals: frozenset[str], failure: errors.SeckillError, at_ms: int
                  ) -> list[tuple[str, str]]:
    """The headers that let nginx repeat ``failure`` until the end of the second of
    ``at_ms``; none when it is not an activity-level refusal of the route (``refusals``)."""
    if failure.code not in refusals:
        return []
    second = at_ms // 1000
    if isinstance(failure, errors.NotStarted):
        starts_ms = ms_from_iso(failure.extra.get("starts_at"), "starts_at")
        if (second + 1) * 1000 > starts_ms:
            return []  # the copy would still be served after the sale opened
        return [(EXPIRES, f"@{second}"), (NOW_MS, str(failure.extra.get("now_ms")))]
    return [(EXPIRES, f"@{second}")]
