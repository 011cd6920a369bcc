"""What the edge reads from the sale: the one door between the edge and the domain.

The edge never computes stock: it asks questions whose answers the sale keeps in the
process (``seckill.store.sale.state.SaleState`` implements them), and the purchase script
re-checks everything that matters, so a stale answer can delay a refusal, never sell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from edge import Filter

if TYPE_CHECKING:
    from seckill.domain.activities import Activity
    from seckill.domain.errors import SeckillError


class Sale(Protocol):
    """The sale as the edge sees it."""

    def activity(self, aid: str) -> Activity:
        """This process's copy of the activity; raise UnknownActivity if there is none."""

    def sold_out(self, aid: str) -> bool:
        """Whether new buyers of the activity are to be refused as sold out."""

    def purchase_refusal(self, aid: str, uid: str) -> SeckillError | None:
        """The answer to this buyer's purchase when the sale already knows it (a sold-out
        activity: 409 to a winner, 410 to the rest), else None: the script decides."""

    def over_rate(self, uid: str, endpoint: str) -> int | None:
        """Count one request of ``uid`` on ``endpoint``; milliseconds until the user may ask
        again when over the per-user rate, else None (also when it cannot be counted)."""


class SaleFilter(Filter):
    """A filter that asks the sale its question."""

    def __init__(self, sale: Sale) -> None:
        self.sale = sale
