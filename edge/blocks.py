"""The operator's blocks: a blocked buyer is refused on the purchase URL, the queue and the
purchase, whatever they already hold (a signed URL, a queue admission, a drawn place).

Right after the user filter, which names the account and the person behind it: the check is two
lookups in this process's copy of the blocks (``seckill.store.sale.admission.blocks``), no
Redis call, no database call. A block on a person covers every account whose token names that
person.
"""

from __future__ import annotations

from typing import Protocol

from edge import Filter, Passage
from edge.chain import NOT_BLOCKED
from seckill.domain.blocks import Blocked


class Blocklist(Protocol):
    """The blocks as the edge sees them."""

    # True only when it is known that no block at all is in force (every request passes
    # without a lookup); False while that is not known.
    none_in_force: bool

    def refuses(self, uid: str, person: str | None, activity: str | None) -> bool:
        """Whether a block covers the account ``uid`` or the person ``person`` on
        ``activity``."""


class NotBlocked(Filter):
    """The block filter: 403 ``blocked`` to a buyer the operator blocked."""

    names = frozenset({NOT_BLOCKED})

    def __init__(self, blocks: Blocklist) -> None:
        self.blocks = blocks

    def check(self, passage: Passage) -> None:
        """Refuse the request if its account or person is blocked here."""
        if self.blocks.none_in_force:  # the sale's usual state: nothing to look up
            return
        # The activity as the request names it (the window filter, later, looks it up): in
        # the path, or GET /seckill/url's query; a block on one activity matches its id.
        activity = passage.view_args.get("aid") or passage.args.get("activity")
        if self.blocks.refuses(passage.require_uid(), passage.person, activity):
            raise Blocked()
