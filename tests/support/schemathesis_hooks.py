"""schemathesis hooks of tests/test_schemathesis.py (loaded by ``st run`` from its config).

The document states every rule of a body that JSON Schema can state. docs/API.md states the
others: a count is a JSON integer literal (``3``; JSON Schema also counts ``3.0`` as an integer,
the gateway refuses it), and a new activity's rules that tie two fields together or a field to
the clock. A request schemathesis generates as valid ("positive") that breaks one of them is not
valid, so it is not sent as such: the gateway must accept every positive body that remains.
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from typing import Any

import schemathesis
from schemathesis import GenerationMode

LAST_SECOND = 253_402_300_799.999  # 9999-12-31T23:59:59.999Z
# The environment variable naming the one activity the operator's pause and end act on.
LEVER_TARGET = "SECKILL_TEST_LEVER_TARGET"
LEVERS = frozenset({"pauseActivity", "endActivity"})
CONSOLE_FILE = "operatorConsoleFile"  # GET /admin/console/{name}
ACTIVITY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _epoch(value: Any) -> float | None:
    """Epoch seconds of a time the gateway takes (1970..9999 in UTC), else None."""
    try:
        stamp = datetime.fromisoformat(str(value)).timestamp()
    except (ValueError, OverflowError):  # not a day of the calendar (e.g. 2026-02-30)
        return None
    return stamp if 0 <= stamp <= LAST_SECOND else None


def breaks_a_cross_field_rule(body: Any) -> bool:
    """Whether a new activity's body breaks a rule the document's JSON Schema cannot state."""
    if not isinstance(body, dict):
        return False
    starts, ends = _epoch(body.get("starts_at")), _epoch(body.get("ends_at"))
    if starts is None or ends is None or ends <= starts or ends <= time.time() + 60:
        return True
    amount, count = body.get("amount"), body.get("count")
    if isinstance(amount, int) and isinstance(count, int) and amount < count:
        return True
    return breaks_an_admission_rule(body, starts) or breaks_a_variant_rule(body)


def breaks_a_variant_rule(body: dict[str, Any]) -> bool:
    """Variants: their ids unique, their totals at most 10⁹ together, and not
    with more than one shard."""
    variants = body.get("variants")
    if not isinstance(variants, list):
        return False
    ids = [v.get("id") for v in variants if isinstance(v, dict)]
    totals = [v.get("total") for v in variants if isinstance(v, dict)]
    shards = body.get("shards", 1)
    return (len(set(map(str, ids))) != len(ids)
            or sum(t for t in totals if isinstance(t, int)) > 1_000_000_000
            or (isinstance(shards, int) and shards > 1))


# Bodies that name variants, valid only on an activity that has them (or not, for a plain
# one): schemathesis cannot know which kind the activity it picked is.
VARIANT_FIELDS = {"restock": {"variant"}, "purchase": {"variant", "items"}}


def breaks_an_admission_rule(body: dict[str, Any], starts: float) -> bool:
    """A queue or draw needs queue_opens_at before starts_at and no shards; first_come takes
    neither queue_opens_at nor a challenge."""
    if body.get("admission", "first_come") == "first_come":
        return "queue_opens_at" in body or body.get("challenge") is True
    opens = _epoch(body.get("queue_opens_at"))
    shards = body.get("shards", 1)
    return opens is None or opens >= starts or (isinstance(shards, int) and shards > 1)


def breaks_an_endpoint_rule(body: Any) -> bool:
    """A webhook endpoint's URL needs a host (and a port that is one) and no user:password@;
    its secret's base64 must decode to at least 16 bytes: the gateway's own validation says."""
    from seckill.domain.errors import BadRequest
    from seckill.operator.webhooks import new_endpoint

    try:
        new_endpoint(body)
    except BadRequest:
        return True
    return False


def breaks_a_replay_rule(body: Any) -> bool:
    """A replay's ``since`` is any ISO 8601 time with an offset Python reads (basic format,
    week dates ...), which no pattern states: the gateway's own validation says."""
    from seckill.domain.errors import BadRequest
    from seckill.operator.webhooks import since_of

    try:
        since_of(body)
    except BadRequest:
        return True
    return False


def has_a_float(value: Any) -> bool:
    """Whether a body holds a JSON number with a fraction or an exponent anywhere (the
    document's schemas have no number that is not an integer, but the admission factor)."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_a_float(item) for item in value.values())
    if isinstance(value, list):
        return any(has_a_float(item) for item in value)
    return False


@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    """Keep every case but a positive one that breaks a rule JSON Schema cannot state, and a
    console file named ``state``: ``GET /admin/console/state`` is an operation of its own
    (OpenAPI matches a concrete path before a templated one), never this one's."""
    if (case.operation.definition.raw.get("operationId") == CONSOLE_FILE
            and (case.path_parameters or {}).get("name") == "state"):
        return False
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return True
    if has_a_float(case.body) and case.operation.definition.raw.get(
            "operationId") != "setAdmissionFactor":  # the one number that is not a count
        return False
    operation = case.operation.definition.raw.get("operationId")
    if operation == "createActivity":
        return not breaks_a_cross_field_rule(case.body)
    if operation == "createWebhook":
        return not breaks_an_endpoint_rule(case.body)
    if operation == "replayWebhook":
        return not breaks_a_replay_rule(case.body)
    if operation in VARIANT_FIELDS and isinstance(case.body, dict):
        return not VARIANT_FIELDS[operation] & set(case.body)
    return True


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, **kwargs: Any
                ) -> None:
    """Pause and end act on the one activity set aside for them: paused or ended, any other
    activity would answer every later call with 503 paused or 410 ended. (A malformed id is
    left as it is: that case is about the id.)"""
    target = os.environ.get(LEVER_TARGET)
    aid = (case.path_parameters or {}).get("aid")
    if (target and case.operation.definition.raw.get("operationId") in LEVERS
            and isinstance(aid, str) and ACTIVITY_ID.fullmatch(aid)):
        case.path_parameters = {**(case.path_parameters or {}), "aid": target}
