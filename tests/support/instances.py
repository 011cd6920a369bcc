"""Several gateway instances watched until their answers settle: one question asked of every
instance in turn, on a new connection each time so that it spreads over each instance's
workers, and the moment after which every process gave the expected answer."""

from __future__ import annotations

import time
from typing import Any

import orjson
import urllib3

TIMEOUT = urllib3.Timeout(connect=5.0, read=10.0)
WITHIN = 1.0  # seconds: the contract's "in every process within one second"


def call(http: urllib3.PoolManager, method: str, url: str, headers: dict[str, str],
         body: Any = None) -> tuple[int, Any]:
    """One request on a new connection (``Connection: close``): its status and JSON body."""
    response = http.request(method, url, headers={**headers, "Connection": "close"},
                            body=None if body is None else orjson.dumps(body),
                            timeout=TIMEOUT, retries=False)
    return response.status, orjson.loads(response.data)


def watch(http: urllib3.PoolManager, urls: list[str], headers: dict[str, str], since: float,
          seconds: float) -> list[tuple[float, int, int]]:
    """GET each of ``urls`` (one per instance) in turn for ``seconds`` from ``since``:
    (seconds after ``since``, instance, status) of each answer."""
    seen = []
    while time.monotonic() - since < seconds:
        for n, url in enumerate(urls):
            status, _ = call(http, "GET", url, headers)
            seen.append((time.monotonic() - since, n, status))
    return seen


def settled(seen: list[tuple[float, int, int]], expected: int, instances: int = 2) -> float:
    """When the answers settled on ``expected`` (the time of the last other answer, 0.0 if
    none), checking that it was within :data:`WITHIN` and that from then on every instance
    answered it, many times each."""
    other = [t for t, _, status in seen if status != expected]
    last = max(other, default=0.0)
    assert last < WITHIN, (last, seen)
    after = [(n, status) for t, n, status in seen if t > WITHIN]
    for n in range(instances):
        statuses = [status for i, status in after if i == n]
        assert len(statuses) >= 5 and set(statuses) == {expected}, (n, statuses)
    return last
