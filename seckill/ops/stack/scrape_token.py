"""The scraper's token of ``GET /metrics`` under ``seckill up``.

``SECKILL_METRICS_TOKEN`` when set (development makes one up, and prints it with the other
secrets), else one made up for this run: every instance gets it in its environment, and
``<data>/metrics-token`` holds it (0600) for Prometheus's ``credentials_file``, which
Prometheus reads again at each scrape, so a restart's new token needs no reload.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from seckill.config import Settings

TOKEN_FILE = "metrics-token"


def scrape_token(settings: Settings) -> str:
    """The token this run's gateways accept on ``/metrics`` beside the operator's."""
    return settings.metrics_token or secrets.token_urlsafe(32)


def write_token_file(data_dir: Path, token: str) -> Path:
    """Write ``token`` to ``<data>/metrics-token`` (mode 0600, atomically); its path."""
    path = data_dir / TOKEN_FILE
    partial = path.with_name(TOKEN_FILE + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(token + "\n")
    os.replace(partial, path)
    return path
