"""The operator's levers on a live sale: pause, resume, end now, and a queue's admission
factor. Each is written to the database and Redis and heard by every process within a second
(``seckill.store.sale.controls``); each returns the activity as it is after the change."""

from __future__ import annotations

import dataclasses
from typing import Any

from seckill.domain import admission, errors
from seckill.domain.activities import Activity
from seckill.services import Services


def pause(services: Services, activity: Activity) -> Activity:
    """Pause the sale: no URL, no purchase until resumed."""
    return _changed(services, services.controls.set_paused(activity.id, True))


def resume(services: Services, activity: Activity) -> Activity:
    """Resume a paused sale."""
    return _changed(services, services.controls.set_paused(activity.id, False))


def end(services: Services, activity: Activity) -> Activity:
    """End the sale now; AlreadyEnded if its window is already over."""
    return _changed(services, services.controls.end(activity.id))


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


def set_admission_factor(services: Services, activity: Activity, factor: float) -> Activity:
    """Set a queue's admission factor live (admitted <= units left x factor)."""
    services.queue.set_factor(queued(activity).id, factor)
    return _changed(services, dataclasses.replace(activity, admission_factor=factor))


def _changed(services: Services, activity: Activity) -> Activity:
    services.cache.forget(activity.id)  # this process at once; the others on the announcement
    return activity
