"""Blocks: the operator's refusal of a buyer, an account (``user``) or the verified person behind
any number of accounts (``person``, the ``SECKILL_PERSON_CLAIM`` of their tokens), on one
activity or on every activity.

What a block is and what may be asked of the operator's API about it, validated here once for
both doors (the admin API and the ``seckill`` command). Where blocks are kept and how every
process hears of them: ``seckill.sql.blocks`` and ``seckill.store.sale.admission.blocks``; the
refusal itself: ``edge.blocks``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from seckill.domain import bodies, errors
from seckill.domain.activities import USER_ID, is_activity_id
from seckill.domain.clock import iso_from_ms
from seckill.domain.people import PERSON_ID, canonical_person

USER = "user"
PERSON = "person"
KINDS = (USER, PERSON)
_IDS = {USER: USER_ID, PERSON: PERSON_ID}
_ID_RULES = {USER: "[A-Za-z0-9_.@-]{1,64}", PERSON: "[A-Za-z0-9_.:@-]{1,128}"}
MAX_REASON = 200
# Printable text: no control character at all (NUL, new lines, escapes) in a reason that the
# console and the command print.
_REASON = re.compile(r"[^\x00-\x1f\x7f-\x9f]*")
_FIELDS = frozenset({USER, PERSON, "activity", "reason"})
# Where a block on every activity is kept: no activity id is empty.
EVERY = ""


class Blocked(errors.SeckillError):
    """403: the operator blocked this buyer (the account, or the person behind it)."""

    status = 403
    code = "blocked"
    default_message = "the operator has blocked this buyer"


class UnknownBlock(errors.SeckillError):
    """404: no such block."""

    status = 404
    code = "unknown_block"
    default_message = "no such block"


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """One block: who (``kind`` ``user`` or ``person``, and their id), where (an activity id,
    or None for every activity), why, when it was made and its place in the list."""

    kind: str
    subject: str
    activity: str | None = None
    reason: str | None = None
    created_ms: int = 0
    seq: int = 0  # the list's order (and cursor): blocks in the order they were first made

    def body(self) -> dict[str, Any]:
        """The contract's view of the block."""
        return {self.kind: self.subject, "activity": self.activity, "reason": self.reason,
                "created_at": iso_from_ms(self.created_ms)}

    def key(self) -> dict[str, str | None]:
        """What names the block, for a 404 and the command's messages."""
        return {self.kind: self.subject, "activity": self.activity}


def checked_kind(kind: object) -> str:
    """``kind`` if it is ``user`` or ``person``; BadRequest naming ``kind`` otherwise."""
    if kind not in KINDS:
        raise errors.BadRequest("a block is on a 'user' or a 'person' "
                                "(/admin/blocks/user/<uid>, /admin/blocks/person/<pid>)",
                                field="kind")
    assert isinstance(kind, str)
    return kind


def checked_subject(kind: str, subject: object, person_canon: str) -> str:
    """The user or person id, if well formed; BadRequest naming the field otherwise. A person
    id is first put in the ``person_canon`` form (``SECKILL_PERSON_CANON``), the one a token's
    claim is put in, so that a block of ``Person-Z`` covers the claim ``person-z`` when folded."""
    if kind == PERSON and isinstance(subject, str):
        subject = canonical_person(subject, person_canon)
    if not isinstance(subject, str) or _IDS[kind].fullmatch(subject) is None:
        raise errors.BadRequest(f"{kind} must match {_ID_RULES[kind]}", field=kind)
    return subject


def checked_activity(activity: object) -> str | None:
    """An activity id, or None (every activity); BadRequest naming ``activity`` otherwise."""
    if activity is None:
        return None
    if not is_activity_id(activity):
        raise errors.BadRequest("activity must be an activity id ([A-Za-z0-9_-]{1,64}), or "
                                "absent for every activity", field="activity")
    assert isinstance(activity, str)
    return activity


def checked_reason(reason: object) -> str | None:
    """A reason of at most ``MAX_REASON`` printable characters (None, or empty: none)."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON \
            or _REASON.fullmatch(reason) is None:
        raise errors.BadRequest(f"reason must be a string of at most {MAX_REASON} characters, "
                                "without control characters", field="reason")
    return reason or None


def parse_block(body: Any, person_canon: str) -> Block:
    """The block an operator's ``POST /admin/blocks`` body asks for: exactly one of ``user``
    and ``person``, and optionally ``activity`` and ``reason``; BadRequest naming the field."""
    body = bodies.known_fields(bodies.json_object(
        body, '{"user": <uid>} or {"person": <pid>}, optionally "activity" and "reason"'),
        _FIELDS)
    named = [kind for kind in KINDS if kind in body]
    if len(named) != 1:
        raise errors.BadRequest("name exactly one of user and person"
                                + (" (not both)" if named else ""), fields=list(KINDS))
    kind = named[0]
    return Block(kind=kind, subject=checked_subject(kind, body[kind], person_canon),
                 activity=checked_activity(body.get("activity")),
                 reason=checked_reason(body.get("reason")))
