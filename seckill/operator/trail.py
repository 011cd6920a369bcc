"""The audit trail: one log line per operator action, naming who did it, with what role, the
action, its target and how it ended.

Logger ``seckill.audit``, in the stack's one log format (``seckill.logs``): in text
``audit: alice (operator) activity.pause activity=a1: ok``; with ``SECKILL_LOG_FORMAT=json``
the same line with ``fields``: ``{"operator", "role", "action", "target": {...}, "outcome"}``.
The outcome is ``ok``, the refusal's error code (``already_ended``, ``unavailable``, ...), or
``failed: <exception>``; a call refused for its role is ``forbidden`` (:func:`refused`).
Never a token, a secret or an operator's free text (a block's reason): names and ids only.
Each line is one action: never collapsed with a repeat (``seckill.logs.CollapseRepeats``).

Who the command line is: ``cli:<SECKILL_OPERATOR>``, or ``cli:<login>`` without it
(``seckill.config.cli_operator``), an admin: it holds the database's credentials.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from seckill.domain import errors
from seckill.domain.operators import Operator

log = logging.getLogger("seckill.audit")
OK = "ok"
FORBIDDEN = "forbidden"
_PLAIN = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,200}")


@contextmanager
def action(by: Operator, name: str, **target: Any) -> Iterator[dict[str, Any]]:
    """Write the audit line of the action ``name`` on ``target`` done in the ``with`` block,
    once it ended; the block may add to the target it is given (an id made by the action)."""
    noted = dict(target)
    try:
        yield noted
    except errors.SeckillError as exc:
        write(by, name, noted, exc.code)
        raise
    except BaseException as exc:
        write(by, name, noted, f"failed: {type(exc).__name__}")
        raise
    write(by, name, noted, OK)


def refused(by: Operator, endpoint: str, needed: str) -> None:
    """The line of a call refused for the operator's role (403 ``forbidden``)."""
    write(by, endpoint, {"role_needed": needed}, FORBIDDEN)


def write(by: Operator, name: str, target: dict[str, Any], outcome: str) -> None:
    """One line of the trail."""
    named = " ".join(f"{key}={_shown(value)}" for key, value in target.items())
    fields = {"operator": by.name, "role": by.role, "action": name, "target": target,
              "outcome": outcome}
    log.info("audit: %s (%s) %s %s: %s", by.name, by.role, name, named or "-", outcome,
             extra={"fields": fields, "never_collapse": True})


def _shown(value: Any) -> str:
    """A target's value as the text line shows it: as is when plain, else quoted as JSON."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text, ensure_ascii=False)
