"""Compare an activity's Redis state with the database, and (``repair``) rebuild Redis."""

from __future__ import annotations

from typing import Any

from seckill.domain.operators import Operator
from seckill.operator import trail
from seckill.services import Services
from seckill.store.audit.reconcile import reconcile as _reconcile


def reconcile(services: Services, aid: str, repair: bool = False, *,
              by: Operator) -> dict[str, Any]:
    """The reconciliation report of ``aid``; with ``repair``, Redis rebuilt from the database
    when it lost the activity or they differ (and no order waits), an action of ``by``'s in
    the audit trail. UnknownActivity if the database does not know it."""
    if not repair:  # reads only: nothing to audit
        found: dict[str, Any] = _reconcile(services.restorer, aid)
        return found
    with trail.action(by, "activity.repair", activity=aid):
        report: dict[str, Any] = _reconcile(services.restorer, aid, repair=True)
    return report
