"""The gateway's Prometheus metrics as the tests read them: every sample of a scrape
(:func:`scrape`), and one sample by name and labels (:func:`of`)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.tokens import METRICS


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``GET /metrics``: (name, sorted labels) -> value."""
    response = client.get("/metrics", headers=METRICS)
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for s in family.samples}


def of(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    """The sample ``name`` with ``labels`` in ``samples``, or None."""
    return samples.get((name, tuple(sorted(labels.items()))))
