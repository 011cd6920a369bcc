"""The operator's actions on activities: find, list and show them; create, edit, restock."""

from __future__ import annotations

import dataclasses
from typing import Any

from seckill.domain import errors
from seckill.domain.activities import MAX_TOTAL, Activity, parse_edit, parse_new_activity
from seckill.domain.operators import Operator
from seckill.domain.packets import Progress
from seckill.domain.people import BY_PERSON
from seckill.operator import trail
from seckill.services import Services
from seckill.store.sale.activity import catalog
from seckill.store.sale.activity.controls import MAX_PAGE

__all__ = ["MAX_PAGE", "checked_add", "create", "current", "edit", "find", "new_activity",
           "page", "restock", "restock_variant"]


def find(services: Services, aid: str) -> Activity:
    """This process's copy of the activity (loaded, or rebuilt from the database, if it has
    none); UnknownActivity if the id is malformed or unknown."""
    found: Activity = services.cache.require(aid)
    return found


def current(services: Services, aid: str) -> Activity:
    """The activity as Redis holds it now, with its sales (not this process's copy)."""
    find(services, aid)
    return services.controls.current(aid)


def page(services: Services, cursor: str | None, limit: int, state: str | None,
         rebuild: bool = True) -> tuple[list[Activity], str | None]:
    """A page of activities in id order (at most ``limit``, in ``state`` if given) and the
    cursor of the next page (None: the last). ``rebuild=False``: an activity Redis lost is
    shown from the database and not rebuilt (a command that only reads)."""
    found, following = services.controls.page(cursor, limit, state, rebuild=rebuild)
    return list(found), following


def new_activity(body: Any) -> Activity:
    """The activity an operator's create body describes (the admin API's validation: a
    BadRequest naming the field otherwise). Writes nothing."""
    return parse_new_activity(body)


def create(services: Services, activity: Activity, progress: Progress | None = None, *,
           by: Operator) -> Activity:
    """Store a new activity (database, then Redis) and tell every process; ActivityExists if
    the id is taken. ``progress`` follows the push of a red-envelope split."""
    with trail.action(by, "activity.create", activity=activity.id):
        return _create(services, activity, progress)


def _create(services: Services, activity: Activity, progress: Progress | None) -> Activity:
    if activity.limit_by == BY_PERSON and services.settings.person_claim is None:
        # Every buyer would be refused (no token could name a person): say so now instead.
        raise errors.BadRequest("limit_by 'person' needs SECKILL_PERSON_CLAIM: the gateway "
                                "must know which token claim names the person",
                                field="limit_by")
    catalog.create_activity(services.book, services.activities, activity, progress)
    services.cache.forget(activity.id)
    # Every other process that was asked for this id remembers it as unknown: the message
    # makes them forget it now (their refresh would find it within SECKILL_META_TTL).
    services.restocks.announce_stock_returned(activity.id)
    return activity


def edit(services: Services, activity: Activity, body: Any, *, by: Operator) -> Activity:
    """Change what the sale page shows (:func:`parse_edit`'s fields, nothing a sale decision
    reads); every process follows. Returns the activity as it is now."""
    changes = parse_edit(body)
    with trail.action(by, "activity.edit", activity=activity.id,
                      fields=",".join(sorted(changes))):
        changed = services.controls.edit(activity.id, changes)
    services.cache.forget(activity.id)  # this process at once; the others on the announcement
    return changed


def checked_add(add: Any) -> int:
    """``add``, the units a restock adds (negative: removes unsold ones), if it is an integer
    within what an activity may hold; BadRequest otherwise (the same words from either door)."""
    if not isinstance(add, int) or isinstance(add, bool) or abs(add) > MAX_TOTAL:
        raise errors.BadRequest(f"add must be an integer in -{MAX_TOTAL}..{MAX_TOTAL} (the units "
                                "to add; negative removes unsold units)", field="add")
    return add


def restock_variant(services: Services, activity: Activity, add: Any, vid: Any, *,
                    by: Operator) -> Activity:
    """Add ``add`` units to one variant of an activity with variants (negative: remove
    unsold ones); ``vid`` is required there and only there (400 naming ``variant``), and must
    be one of its variants (404 ``unknown_variant``). Returns the activity as Redis holds it
    now, its variants' numbers included."""
    if not activity.variants:
        raise errors.BadRequest("this activity has no variants: restock it with {\"add\": n}",
                                field="variant")
    if vid is None:
        raise errors.BadRequest("this activity has variants: say which to restock, "
                                "{\"add\": n, \"variant\": \"<id>\"}", field="variant")
    if not isinstance(vid, str):
        raise errors.BadRequest("variant must be a variant id (a string)", field="variant")
    if vid not in {v.id for v in activity.variants}:
        raise errors.UnknownVariant(variant=vid[:40])
    units = checked_add(add)
    with trail.action(by, "activity.restock", activity=activity.id, variant=vid, add=units):
        services.restocks.restock_variant(activity.id, vid, units)
    services.sale.returned(activity.id)
    return services.controls.current(activity.id)


def restock(services: Services, activity: Activity, add: Any, *, by: Operator) -> Activity:
    """Add ``add`` units to the activity's stock (negative: remove unsold units); Redis decides
    the bounds (InsufficientStock, BadRequest for packets or unlimited stock). Every process
    drops its sold-out flag. Returns the activity with its new numbers."""
    units = checked_add(add)
    with trail.action(by, "activity.restock", activity=activity.id, add=units):
        total, remaining = services.restocks.restock(activity.id, units)
    services.sale.returned(activity.id)
    return dataclasses.replace(activity, total=total, remaining=remaining)
