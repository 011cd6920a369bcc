"""What a scrape costs between two readings: the census' text is rendered by
``seckill.metrics.text_of``, byte for byte what prometheus_client's ``generate_latest`` makes
(checked on any family, label and value hypothesis finds, and on a real census), and the body
goes out gzipped when the scraper asks for it, as Prometheus does."""

from __future__ import annotations

import gzip
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from seckill.metrics import text_of
from seckill.web.census import CensusCollector
from tests.support.api import buy, create_activity
from tests.support.tokens import METRICS

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABELS = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(
    lambda name: not name.startswith("__"))
VALUES = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**12, 10**12)
TEXT = st.text(max_size=30)  # quotes, backslashes, new lines and any Unicode among them


class Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


@st.composite
def family(draw: Any) -> Metric:
    kind = draw(st.sampled_from(["gauge", "counter", "unknown", "histogram"]))
    name = draw(NAMES)
    doc = draw(TEXT)
    labels = draw(st.lists(LABELS, max_size=3, unique=True))
    made: Any
    if kind == "histogram":
        made = HistogramMetricFamily(name, doc, labels=labels)
        for values in draw(st.lists(st.tuples(*[TEXT] * len(labels)), max_size=3)):
            made.add_metric(list(values), buckets=[("1.0", 1), ("+Inf", 2)], sum_value=3)
        return made
    made = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily,
            "unknown": UnknownMetricFamily}[kind](name, doc, labels=labels)
    for values in draw(st.lists(st.tuples(*[TEXT] * len(labels)), max_size=5)):
        made.add_metric(list(values), draw(VALUES))
    return made


@settings(max_examples=300, deadline=None)
@given(st.lists(family(), max_size=5))
def test_the_text_is_what_prometheus_client_makes(families: list[Metric]) -> None:
    registry = Families(families)
    assert text_of(registry) == generate_latest(registry)  # type: ignore[arg-type]


def test_the_text_of_a_real_census_is_what_prometheus_client_makes(app: Any, client: Any) -> None:
    for n in range(3):
        aid = create_activity(client, total=5 + n, name='Shoe "42" \\ new')["id"]
        buy(client, aid, f"u{n}")
    census = app.extensions["seckill"].census
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CensusCollector(census))
    families = list(registry.collect())
    assert sum(len(f.samples) for f in families) > 30
    listed = Families(families)
    assert text_of(listed) == generate_latest(listed)  # type: ignore[arg-type]


def test_a_scraper_that_asks_for_gzip_gets_the_same_body_gzipped(client: Any) -> None:
    create_activity(client, total=5)
    plain = client.get("/metrics", headers=METRICS)
    assert plain.status_code == 200
    assert "Content-Encoding" not in plain.headers
    assert "Accept-Encoding" in plain.headers["Vary"]
    packed = client.get("/metrics", headers={**METRICS, "Accept-Encoding": "gzip"})
    assert packed.status_code == 200
    assert packed.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed.headers["Vary"]
    assert gzip.decompress(packed.get_data()) == plain.get_data()  # one body, kept
    assert len(packed.get_data()) < len(plain.get_data()) / 3
    refused = client.get("/metrics", headers={**METRICS, "Accept-Encoding": "gzip;q=0"})
    assert "Content-Encoding" not in refused.headers
