"""The sale window and the sold-out flag, decided from in-process activity metadata.

Before-start, after-end and unknown-activity requests are the bulk of a flash-sale crowd;
here they are answered from a cache that is at most ``SECKILL_META_TTL`` seconds old, with no
Redis round trip. The purchase script re-checks the window on Redis's clock, so a stale cache
or a gateway with a skewed clock can delay a rejection but never let a purchase through.
"""

from __future__ import annotations

from flask import Flask, current_app, g

from edge import IN_STOCK, SOLD_OUT, WINDOW, active_filters, current_uid, request_activity_id
from seckill import errors
from seckill.activities import iso_from_ms, now_ms


class SaleWindow:
    def init_app(self, app: Flask) -> None:
        app.extensions["edge.sale_window"] = self
        app.before_request(self._check)

    @staticmethod
    def _check() -> None:
        wanted = active_filters()
        if WINDOW not in wanted:
            return
        activity = current_app.extensions["seckill"].cache.require(request_activity_id())
        at = now_ms()
        if at < activity.starts_ms:
            raise errors.NotStarted(starts_at=iso_from_ms(activity.starts_ms), now_ms=at)
        if at >= activity.ends_ms:
            raise errors.Ended()
        board = current_app.extensions["seckill"].board
        if IN_STOCK in wanted and (activity.remaining == 0 or board.is_flagged(activity.id)):
            raise errors.SoldOut()
        if SOLD_OUT in wanted:
            board.reject(activity.id, current_uid())
        g.activity = activity
