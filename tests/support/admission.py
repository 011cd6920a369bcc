"""Helpers of the fair-admission suites: queue and draw activities, joins, polls, buys, and
an independent recomputation of the draw (written from docs/clients.md's recipe, not from
``seckill.domain.admission``)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from flask.testing import FlaskClient

from tests.support.api import create_activity, expect
from tests.support.timing import iso
from tests.support.tokens import user_headers


def queued_activity(client: FlaskClient, admission: str = "queue", total: int = 5,
                    starts_in: float = 1.5, **fields: Any) -> dict[str, Any]:
    """A queue (or draw) activity whose queue is open now and whose sale starts in
    ``starts_in`` seconds; the activity view, with ``starts_ms`` added."""
    made = create_activity(client, admission=admission, total=total, starts_at=iso(starts_in),
                           queue_opens_at=fields.pop("queue_opens_at", iso(-1)), **fields)
    made["starts_ms"] = time.time() * 1000 + starts_in * 1000
    return made


def wait_for_start(activity: dict[str, Any], margin: float = 0.05) -> None:
    """Sleep until the activity's sale has started (by this machine's clock, which Redis's
    shares)."""
    time.sleep(max(0.0, (activity["starts_ms"] - time.time() * 1000) / 1000 + margin))


def wait_past(expires_at: float, margin: float = 0.05) -> None:
    """Sleep until an admission's ``expires_at`` (epoch seconds) has passed (on this machine's
    clock, which Redis's shares)."""
    time.sleep(max(0.0, expires_at - time.time() + margin))


def join(client: FlaskClient, aid: str, uid: str, body: Any = None) -> Any:
    """``POST /seckill/<aid>/queue`` for ``uid``; the response."""
    return client.post(f"/seckill/{aid}/queue", json={} if body is None else body,
                       headers=user_headers(uid))


def poll(client: FlaskClient, aid: str, uid: str) -> dict[str, Any]:
    """``GET /seckill/<aid>/queue`` for ``uid``: must answer 200."""
    return expect(client.get(f"/seckill/{aid}/queue", headers=user_headers(uid)), 200)


def state(client: FlaskClient, aid: str) -> dict[str, Any]:
    """The public ``GET /seckill/<aid>/queue/state``."""
    return expect(client.get(f"/seckill/{aid}/queue/state"), 200)


def buy_admitted(client: FlaskClient, aid: str, uid: str) -> Any:
    """Poll, and buy through the URL of the admission; None when not admitted."""
    status = poll(client, aid, uid)
    if status["status"] != "admitted":
        return None
    return client.post(status["url"], headers=user_headers(uid))


def independent_order(seed: str, entries: list[str]) -> list[str]:
    """docs/clients.md's recipe: each entry's key is the first 52 bits of SHA-256 of
    "<seed>:<user id>" (UTF-8), read as a big-endian integer; ascending key, then user id."""
    def key(uid: str) -> tuple[int, str]:
        digest = hashlib.sha256(f"{seed}:{uid}".encode()).hexdigest()
        return int(digest[:13], 16), uid  # 13 hex digits = 52 bits

    return sorted(entries, key=key)


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation of two equally long lists without ties."""
    def ranks(values: list[float]) -> list[int]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0] * len(values)
        for r, i in enumerate(order):
            out[i] = r
        return out

    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))
