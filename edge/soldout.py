"""The sold-out flag: most of a flash-sale crowd arrives after the last unit went.

The sale tells the edge "refuse this activity" (``Sale.sold_out``) or "this is the buyer's
answer" (``Sale.purchase_refusal``); the edge never looks at stock itself. Both answers are
kept in the process, so a refusal here costs no Redis call.
"""

from __future__ import annotations

from edge import IN_STOCK, SOLD_OUT, Passage
from edge.sale import SaleFilter
from seckill.domain import errors
from seckill.domain.people import buyer


class SoldOutFlag(SaleFilter):
    """The sold-out filter: after the window filter, before the signed URL is checked."""

    names = frozenset({IN_STOCK, SOLD_OUT})

    def check(self, passage: Passage) -> None:
        """410 to new buyers of a sold-out activity; a purchase gets the sale's own answer
        (the winners are buyers: on a person-limited activity, people)."""
        activity = passage.require_activity()
        aid = activity.id
        if IN_STOCK in passage.wanted and self.sale.sold_out(aid):
            raise errors.SoldOut()
        if SOLD_OUT in passage.wanted:
            who = buyer(activity, passage.require_uid(), passage.person)
            refusal = self.sale.purchase_refusal(aid, who)
            if refusal is not None:
                raise refusal
