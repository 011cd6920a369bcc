"""``from tests.support.backends import redis_backend`` in a test module: each of its tests
that takes its Redis from ``redis_url``/``env``/``rds`` runs on one server and on the
session's cluster (ids ``[single]``, ``[cluster]``); its other tests run once.
(``BOTH_BACKENDS`` in conftest does the same for a module whose every test uses Redis.)"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["single", "cluster"])
def redis_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this run of the test."""
    return str(request.param)
