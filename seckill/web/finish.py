"""The one finish of every answer: its outcome counted, and the instance and outcome headers.

Flask's ``after_request`` and the hot routes (``seckill.web.hot``) both end here.
"""

from __future__ import annotations

from collections.abc import Callable

from seckill import metrics

PURCHASE = "user.purchase"


class Finish:
    """Counts an answer and names the headers it carries."""

    def __init__(self, instance: str, known: Callable[[str], bool] | None = None) -> None:
        self.instance = instance
        # Whether an activity id is one this process knows: only those get their own series.
        self.known = known

    def __call__(self, endpoint: str, outcome: str, seconds: float,
                 activity: str | None = None) -> tuple[tuple[str, str], ...]:
        """Count one answer (per ``activity`` too, if known; and time a purchase); the headers
        every answer carries."""
        metrics.answered(endpoint, outcome)
        if activity and self.known is not None and self.known(activity):
            metrics.activity_answered(activity, outcome)
        if endpoint == PURCHASE:
            metrics.purchase_took(outcome, seconds)
        return (("X-Seckill-Instance", self.instance), ("X-Seckill-Outcome", outcome))
