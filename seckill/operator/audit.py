"""Compare an activity's Redis state with the database, and (``repair``) rebuild Redis."""

from __future__ import annotations

from typing import Any

from seckill.services import Services
from seckill.store.audit.reconcile import reconcile as _reconcile


def reconcile(services: Services, aid: str, repair: bool = False) -> dict[str, Any]:
    """The reconciliation report of ``aid``; with ``repair``, Redis rebuilt from the database
    when it lost the activity or they differ (and no order waits). UnknownActivity if the
    database does not know it."""
    report: dict[str, Any] = _reconcile(services.restorer, aid, repair=repair)
    return report
