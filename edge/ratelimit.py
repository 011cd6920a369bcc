"""The per-user rate limit of the hot routes, keyed by the authenticated user id.

It is the last check of the chain: after identity (so it always has its key) and after every
check that needs no Redis (so the requests those refuse cost nothing here). The sale counts
(``Sale.over_rate``: fixed windows, ``SECKILL_USER_RATE``, one round trip for every rate) and
fails open when it cannot; the purchase counts the same limit inside its own script. The cold
routes are limited by flask-limiter instead (``seckill.web.limits``): why not here:
docs/architecture.md, "Dependencies, each with a job".
"""

from __future__ import annotations

from edge import RATE, Passage
from edge.sale import SaleFilter
from seckill.domain import errors


class UserRateLimit(SaleFilter):
    """The rate filter: 429 with Retry-After once a user is over the rate on an endpoint."""

    names = frozenset({RATE})

    def check(self, passage: Passage) -> None:
        """Count this request; refuse it when the user is over the rate."""
        wait_ms = self.sale.over_rate(passage.require_uid(), passage.endpoint)
        if wait_ms is not None:
            raise errors.RateLimited.after_ms(wait_ms)
