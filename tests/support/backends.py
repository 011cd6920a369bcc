"""One server or the session's cluster, for a whole module:

* ``pytestmark = BOTH_BACKENDS``: every test of a module whose every test uses Redis runs on
  one server and on the session's cluster (ids ``[single]``, ``[cluster]``);
* ``from tests.support.backends import redis_backend`` in a test module: each of its tests
  that takes its Redis from ``redis_url``/``env``/``rds`` runs on both; its other tests run
  once (the import overrides conftest's ``redis_backend`` in that module only)."""

from __future__ import annotations

import pytest

BOTH_BACKENDS = pytest.mark.parametrize("redis_backend", ["single", "cluster"], indirect=True)


@pytest.fixture(params=["single", "cluster"])
def redis_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this run of the test."""
    return str(request.param)
