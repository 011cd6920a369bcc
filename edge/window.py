"""The sale window and the sold-out flag, decided from in-process activity metadata.

Before-start, after-end and unknown-activity requests are the bulk of a flash-sale crowd;
here they are answered from this process's copy of the activity, with no Redis round trip (a
background thread reloads the copies in use every ``SECKILL_META_TTL`` seconds; see
``seckill.activity_cache.ActivityCache``). The purchase script re-checks the window on Redis's
clock, so a stale copy or a gateway with a skewed clock can delay a rejection but never let
a purchase through.
"""

from __future__ import annotations

from flask import Flask

from edge import IN_STOCK, SOLD_OUT, WINDOW, Edge, Passage
from seckill.domain import errors
from seckill.domain.activities import iso_from_ms, now_ms


class SaleWindow:
    def init_app(self, app: Flask) -> None:
        app.extensions["edge.sale_window"] = self
        Edge.of(app).add({WINDOW}, self.check)

    @staticmethod
    def check(passage: Passage) -> None:
        services = passage.services
        activity = services.cache.require(passage.activity_id())
        at = now_ms()
        if at < activity.starts_ms:
            raise errors.NotStarted(starts_at=iso_from_ms(activity.starts_ms), now_ms=at)
        if at >= activity.ends_ms:
            raise errors.Ended()
        wanted = passage.wanted
        if IN_STOCK in wanted and (
            activity.remaining == 0 or services.board.is_flagged(activity.id)
        ):
            raise errors.SoldOut()
        if SOLD_OUT in wanted:
            services.board.reject(activity.id, passage.require_uid())
        passage.activity = activity
