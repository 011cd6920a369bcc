"""The operator's levers on a live sale: pause, resume, end now, and a queue's admission
factor. Each takes effect in Redis first, in the order the operator sent them, then in the
database, and is heard by every process within a second (``seckill.store.sale.activity.controls``);
each returns the activity as it is after the change. ``sent_ms``: when the operator's command
arrived (default: now); of two commands, the one sent later stands."""

from __future__ import annotations

import dataclasses
from typing import Any

from seckill.domain import admission, errors
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.domain.operators import Operator
from seckill.operator import trail
from seckill.services import Services


def pause(services: Services, activity: Activity, sent_ms: int | None = None, *,
          by: Operator) -> Activity:
    """Pause the sale: no URL, no purchase until resumed."""
    with trail.action(by, "activity.pause", activity=activity.id):
        return _changed(services, services.controls.set_paused(activity.id, True,
                                                               _version(sent_ms)))


def resume(services: Services, activity: Activity, sent_ms: int | None = None, *,
           by: Operator) -> Activity:
    """Resume a paused sale."""
    with trail.action(by, "activity.resume", activity=activity.id):
        return _changed(services, services.controls.set_paused(activity.id, False,
                                                               _version(sent_ms)))


def end(services: Services, activity: Activity, sent_ms: int | None = None, *,
        by: Operator) -> Activity:
    """End the sale now; AlreadyEnded if its window is already over."""
    with trail.action(by, "activity.end", activity=activity.id):
        return _changed(services, services.controls.end(activity.id, _version(sent_ms)))


def _version(sent_ms: int | None) -> int:
    """A lever's version: when it was sent, in µs (lua/lever.lua)."""
    return (now_ms() if sent_ms is None else sent_ms) * 1000


def queued(activity: Activity) -> Activity:
    """``activity`` if it has a queue; BadRequest (field ``admission``) otherwise."""
    if not activity.queued:
        raise errors.BadRequest("this activity has no queue (admission first_come)",
                                field="admission")
    return activity


def parse_factor(body: Any) -> float:
    """The admission factor of an operator's ``{"factor": x}`` (0 < x <= 100); BadRequest
    naming ``factor`` otherwise."""
    return admission.parse_factor(body)


def set_admission_factor(services: Services, activity: Activity, factor: float, *,
                         by: Operator) -> Activity:
    """Set a queue's admission factor live (admitted <= units left x factor)."""
    with trail.action(by, "activity.admission", activity=activity.id, factor=factor):
        services.queue.set_factor(queued(activity).id, factor)
    return _changed(services, dataclasses.replace(activity, admission_factor=factor))


def _changed(services: Services, activity: Activity) -> Activity:
    services.cache.forget(activity.id)  # this process at once; the others on the announcement
    return activity
