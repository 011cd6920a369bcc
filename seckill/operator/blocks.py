"""The operator's blocks: block a buyer (an account, or the person behind accounts) on one
activity or on all, lift a block, list them. Kept in the database; every gateway process
refuses the blocked within a second (``seckill.store.sale.admission.blocks``), this one at once."""

from __future__ import annotations

import re
from typing import Any

from seckill.domain import errors
from seckill.domain.blocks import (
    Block,
    checked_activity,
    checked_kind,
    checked_subject,
    parse_block,
)
from seckill.domain.operators import Operator
from seckill.operator import trail
from seckill.services import Services

MAX_PAGE = 200  # as the list of activities
# A cursor is the "next" of an earlier page: a block's place in the list. ASCII digits only.
_CURSOR = re.compile(r"[0-9]{1,18}", re.ASCII)

__all__ = ["MAX_PAGE", "block", "checked_cursor", "new_block", "page", "target", "unblock"]


def new_block(body: Any, person_canon: str) -> Block:
    """The block an operator's body asks for (the admin API's validation: a BadRequest naming
    the field otherwise), a person in the ``person_canon`` form. Writes nothing."""
    return parse_block(body, person_canon)


def target(kind: Any, subject: Any, activity: Any,
           person_canon: str) -> tuple[str, str, str | None]:
    """The block a lift names: ``user`` or ``person``, their id (a person in the
    ``person_canon`` form), and the activity (None: the block on every activity); BadRequest
    naming the field otherwise."""
    found = checked_kind(kind)
    return found, checked_subject(found, subject, person_canon), checked_activity(activity)


def checked_cursor(cursor: str | None) -> int:
    """The place after which a page starts (0: the first page); BadRequest naming ``cursor``."""
    if cursor is None:
        return 0
    if _CURSOR.fullmatch(cursor) is None:
        raise errors.BadRequest("cursor must be the 'next' of an earlier page", field="cursor")
    return int(cursor)


def block(services: Services, wanted: Block, *, by: Operator) -> Block:
    """Block a buyer; blocking again what is blocked replaces the reason. UnknownActivity if
    the block names an activity the database does not know. Returns the block as stored."""
    with trail.action(by, "block.add", **wanted.key()):  # never the reason: free text
        return services.blocks.block(wanted)


def unblock(services: Services, kind: str, subject: str, activity: str | None, *,
            by: Operator) -> Block:
    """Lift a block (on ``activity``; None: the block on every activity, not the others);
    UnknownBlock if there is none. Returns the block lifted."""
    with trail.action(by, "block.lift", **{kind: subject, "activity": activity}):
        return services.blocks.unblock(kind, subject, activity)


def page(services: Services, after: int, limit: int) -> tuple[list[Block], int | None]:
    """A page of the blocks in force (at most ``limit``, in the order they were made, after
    place ``after``) and the cursor of the next page (None: the last)."""
    return services.blocks.page(after, limit)
