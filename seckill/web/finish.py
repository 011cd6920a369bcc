"""The one finish of every answer: its outcome counted, and the instance and outcome headers.

Flask's ``after_request`` and the hot routes (``seckill.web.hot``) both end here.
"""

from __future__ import annotations

from seckill import metrics

PURCHASE = "user.purchase"


class Finish:
    """Counts an answer and names the headers it carries."""

    def __init__(self, instance: str) -> None:
        self.instance = instance

    def __call__(self, endpoint: str, outcome: str, seconds: float) -> tuple[tuple[str, str], ...]:
        """Count one answer (and time a purchase); the headers every answer carries."""
        metrics.answered(endpoint, outcome)
        if endpoint == PURCHASE:
            metrics.purchase_took(outcome, seconds)
        return (("X-Seckill-Instance", self.instance), ("X-Seckill-Outcome", outcome))
