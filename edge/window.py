"""The sale window, decided from this process's copy of the activity: no Redis round trip.

Before-start, after-end and unknown-activity requests are the bulk of a flash-sale crowd. The
purchase script re-checks the window on Redis's clock, so a stale copy or a gateway with a
skewed clock can delay a refusal but never let a purchase through.
"""

from __future__ import annotations

from edge import WINDOW, Passage
from edge.sale import SaleFilter
from seckill.domain import errors
from seckill.domain.clock import iso_from_ms, now_ms


class SaleWindow(SaleFilter):
    """The window filter: 404 unknown activity, 403 not started, 410 ended, 503 paused."""

    names = frozenset({WINDOW})

    def check(self, passage: Passage) -> None:
        """Let the request through only inside the activity's sale window."""
        activity = self.sale.activity(passage.activity_id())
        at = now_ms()
        if at < activity.starts_ms:
            raise errors.NotStarted(starts_at=iso_from_ms(activity.starts_ms), now_ms=at)
        if at >= activity.ends_ms:
            raise errors.Ended()
        if activity.paused:
            raise errors.Paused()
        passage.activity = activity
