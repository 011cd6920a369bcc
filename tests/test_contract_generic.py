"""The contract's generic answers (404, 405, 413, 500) and its service endpoints (``/healthz``,
``/metrics``), through the Flask app and the session's real Valkey, every answer checked
against the OpenAPI document as in tests/test_contract.py."""

from __future__ import annotations

import io

import pytest

from seckill.domain.sizes import OPERATOR_MAX_BODY
from seckill.ops.stack.ports import free_listen_port
from seckill.web.body import MAX_BODY
from tests.support.api import buy, expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, METRICS, user_headers

# On one server and on a cluster, as the rest of the contract.
pytestmark = BOTH_BACKENDS


# --- generic errors: 404, 405, 413, 500 -------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/"),
    ("GET", "/nope"),
    ("GET", "/seckill"),
    ("GET", "/seckill/time/"),
    ("POST", "/seckill/x/y/z/buy"),
    ("GET", "/adminx"),
    ("GET", "/admin/activities/x/y"),
    ("DELETE", "/nope"),
])
def test_unknown_routes(client, method, path):
    expect(client.open(path, method=method, headers=ADMIN), 404, "not_found")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/seckill/time"),
    ("DELETE", "/seckill/activities/x"),
    ("PUT", "/seckill/url"),
    ("GET", "/seckill/x/token/buy"),
    ("POST", "/seckill/x/order"),
    ("DELETE", "/admin/activities"),
    ("GET", "/admin/activities/x/pause"),
    ("POST", "/admin/activities/x/stats"),
    ("POST", "/healthz"),
    ("PATCH", "/metrics"),
    ("OPTIONS", "/seckill/time"),
    ("OPTIONS", "/admin/activities"),
])
def test_wrong_method(client, method, path):
    response = client.open(path, method=method, headers=ADMIN)
    expect(response, 405, "method_not_allowed")
    assert response.headers.get("Allow")


BIG = b"{" + b" " * MAX_BODY + b"}"
HUGE = b"{" + b" " * OPERATOR_MAX_BODY + b"}"  # over the operator routes' limit


def test_too_large_bodies(app, client, make_activity, rds, prefix):
    activity = make_activity()
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    json_type = {"Content-Type": "application/json"}
    expect(client.post(url, data=BIG, headers=headers | json_type), 413, "too_large")
    expect(client.post("/admin/activities", data=HUGE, headers=ADMIN | json_type), 413,
           "too_large")
    # Over 4 KiB is an operator body like another (a drop of 100 variants is ~6.5 KiB).
    expect(client.post("/admin/activities", data=BIG, headers=ADMIN | json_type), 400,
           "bad_request")
    expect(client.get("/seckill/time", data=BIG), 413, "too_large")
    expect(client.get(f"/seckill/url?activity={activity['id']}", data=BIG, headers=headers), 413,
           "too_large")
    expect(client.get("/healthz", data=BIG), 413, "too_large")
    # The oversized purchase bought nothing.
    assert rds.hlen(f"{prefix}:{{{activity['id']}}}:buyers") == 0


def test_too_large_without_content_length(client, make_activity):
    """A streamed body with no Content-Length is cut at 4 KiB too."""
    activity = make_activity()
    headers = user_headers("alice")
    url = expect(client.get(f"/seckill/url?activity={activity['id']}", headers=headers),
                 200)["url"]
    response = client.post(url, input_stream=io.BytesIO(BIG), headers=headers)
    expect(response, 413, "too_large")
    response = client.post("/admin/activities", input_stream=io.BytesIO(HUGE), headers=ADMIN)
    expect(response, 413, "too_large")


def test_an_operator_body_of_exactly_the_limit_is_read(client):
    padded = b'{"id": "x"}'.ljust(OPERATOR_MAX_BODY, b" ")
    assert len(padded) == OPERATOR_MAX_BODY
    body = expect(client.post("/admin/activities", data=padded, headers=ADMIN), 400,
                  "bad_request")
    # The whole body was read and parsed: the id passed, the missing name did not.
    assert body["field"] == "name"


@pytest.mark.parametrize("testing", [True, False])
def test_unexpected_failure_is_json_500(make_app, testing):
    app = make_app()
    app.config["TESTING"] = testing

    @app.get("/boom")
    def boom() -> str:
        raise ZeroDivisionError("secret internals")

    response = app.test_client().get("/boom")
    expect(response, 500, "internal")
    text = response.get_data(as_text=True)
    assert "secret internals" not in text
    assert "Traceback" not in text
    assert response.headers["X-Seckill-Outcome"] == "internal"


# --- service endpoints ------------------------------------------------------------------------


def test_healthz_ok(client):
    assert expect(client.get("/healthz"), 200) == {"status": "ok"}


def test_healthz_redis_down(make_app):
    app = make_app(REDIS_URL=f"redis://127.0.0.1:{free_listen_port()}/0",
                   SECKILL_REDIS_TIMEOUT="0.5")
    body = expect(app.test_client().get("/healthz"), 503)
    assert body["status"] == "unavailable"
    assert "redis" in body["failing"]
    assert "database" not in body["failing"]


def test_healthz_database_down(make_app, tmp_path):
    # A folder is not an SQLite database: the database check fails, Redis is fine.
    app = make_app(DATABASE_URL=f"sqlite:///{tmp_path}")
    body = expect(app.test_client().get("/healthz"), 503)
    assert body["status"] == "unavailable"
    assert set(body["failing"]) == {"database"}


def _remade(client, kept: str) -> str | None:
    text: str = client.get("/metrics", headers=METRICS).get_data(as_text=True)
    return text if text != kept else None


def _sample(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        head, _, rest = metric.partition("{")
        if head != name:
            continue
        found = ",".join(sorted(p for p in rest.rstrip("}").split(",") if p))
        if found == wanted:
            return float(value)
    return 0.0


def test_metrics(client, make_activity):
    first = client.get("/metrics", headers=METRICS)
    assert first.status_code == 200
    assert first.mimetype == "text/plain"
    before = _sample(first.get_data(as_text=True), "seckill_requests_total",
                     endpoint="user.time_now", outcome="ok")
    activity = make_activity()
    for _ in range(3):
        client.get("/seckill/time")
    expect(buy(client, activity["id"], "alice"), 200)
    expect(buy(client, activity["id"], "alice"), 409, "already_purchased")
    # The body is kept for the metrics interval: wait for one made after these requests.
    text = wait_until(lambda: _remade(client, first.get_data(as_text=True)), 5,
                      what="a /metrics body made again")
    assert "seckill_requests_total" in text
    after = _sample(text, "seckill_requests_total", endpoint="user.time_now", outcome="ok")
    assert after == before + 3
    assert _sample(text, "seckill_requests_total", endpoint="user.purchase",
                   outcome="already_purchased") >= 1
    assert _sample(text, "seckill_purchase_seconds_count", outcome="ok") >= 1
