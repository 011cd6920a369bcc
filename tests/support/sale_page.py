"""The sale page's stack, and a purchase made beside the page, for the sale page's tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.cli import call
from tests.support.upstack import UpStack, running_up, user_token


@contextlib.contextmanager
def running_page_stack(folder: Path) -> Iterator[UpStack]:
    """``seckill up`` with two instances of one worker each behind nginx, at the default per-IP
    rate (20r/s): the page must live within it."""
    with running_up(folder, "--instances", "2", "--workers", "1") as running:
        yield running


def buy_over_http(stack: UpStack, aid: str, uid: str) -> dict[str, Any]:
    """``uid`` buys in ``aid`` through nginx, as a script would (not through the page)."""
    token = user_token(uid)
    status, issued = call(stack.port, "GET", f"/seckill/url?activity={aid}", token)
    assert status == 200, issued
    status, bought = call(stack.port, "POST", issued["url"], token)
    assert status == 200, bought
    return dict(bought)
