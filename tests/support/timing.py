"""Time in the tests: a moment from now as the API writes it, and waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def iso(delta_seconds: float) -> str:
    """An ISO 8601 time ``delta_seconds`` from now, with an offset."""
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)
