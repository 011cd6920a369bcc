"""Screenshots of the browser tests: always into ``test-artifacts/`` (for a failing run's
reader), into ``docs/`` only with ``SECKILL_DOCS_SCREENSHOTS=1`` (the pictures the docs show
are refreshed on purpose, never as a side effect of running the suite)."""

from __future__ import annotations

import os
from typing import Any

from tests.support.servers import REPO_ROOT

ARTIFACTS = REPO_ROOT / "test-artifacts"
DOCS = REPO_ROOT / "docs"


def shoot(page: Any, name: str, full_page: bool = True) -> None:
    """``page``'s screenshot as ``name``: in test-artifacts/, and in docs/ when asked."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)
    if os.environ.get("SECKILL_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / name), full_page=full_page)
