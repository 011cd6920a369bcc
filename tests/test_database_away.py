"""The database away or hung: every route that needs it answers within a bound, 503
``unavailable`` with ``"detail": "database"`` (never 500, never a hang); ``/healthz`` names the
part that is unhealthy; the routes answer again once the database is back.

PostgreSQL (``SECKILL_TEST_POSTGRES``): a relay of the test's own between the gateway and the
server plays a stopped server (``down``) or a frozen one (``hung``). SQLite: another connection
holds the write lock longer than the bound (``locked``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support.api import buy, create_activity
from tests.support.database_faults import DatabaseRelay, SqliteWriteLock, is_sqlite
from tests.support.tokens import ADMIN, METRICS, user_headers

pytestmark = pytest.mark.database

TIMEOUT = 1.0  # SECKILL_DATABASE_TIMEOUT of the gateway under test
# The bound a route answers within, with the timeout above: a pooled connection's check (a
# statement's bound), a new connection's (libpq's connect_timeout counts whole seconds, 2 at
# least), and the test client's own overhead.
BOUND = 6.0


def answer(client: FlaskClient, method: str, path: str, *, wait: float = BOUND + 10,
           **kwargs: Any) -> tuple[int, dict[str, Any], float]:
    """The route's status, JSON body and seconds taken; fails the test if no answer came within
    ``wait`` seconds (the request is left to finish in its thread once the fault is over)."""
    got: dict[str, Any] = {}

    def ask() -> None:
        started = time.monotonic()
        response = client.open(path, method=method, **kwargs)
        got["answer"] = (response.status_code, response.get_json(silent=True) or {},
                         time.monotonic() - started)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(wait)
    assert "answer" in got, f"{method} {path}: no answer within {wait} s (hung)"
    status, body, took = got["answer"]
    return status, body, took


def check_away(client: FlaskClient, method: str, path: str, *, allowed: tuple[int, ...] = (),
               **kwargs: Any) -> dict[str, Any]:
    """``method path`` answers within the bound with 503 ``unavailable``/``database`` (or one
    of the ``allowed`` statuses: a route that can answer from Redis alone)."""
    status, body, took = answer(client, method, path, **kwargs)
    assert took < BOUND, f"{method} {path}: {status} after {took:.1f} s, bound {BOUND} s"
    if status in allowed:
        return body
    assert status == 503, f"{method} {path}: {status} {body}"
    assert body.get("error") == "unavailable", (method, path, body)
    assert body.get("detail") == "database", (method, path, body)
    assert "database" in body.get("message", ""), (method, path, body)
    return body


@pytest.fixture
def sale(client: FlaskClient) -> dict[str, str]:
    """An activity, created through the test's direct app, with one buyer."""
    aid = create_activity(client, total=5)["id"]
    bought = buy(client, aid, "u-bought")
    assert bought.status_code == 200, bought.get_json()
    endpoint = client.post("/admin/webhooks", headers=ADMIN,
                           json={"url": "http://127.0.0.1:9/hook", "events": ["order.created"]})
    assert endpoint.status_code == 201, endpoint.get_json()
    # A named operator: the levers must answer them too while the database is away (each
    # process checks their token in its own copy of the operators).
    made = client.post("/admin/operators", headers=ADMIN,
                       json={"name": f"op-{uuid.uuid4().hex[:8]}", "role": "operator"})
    assert made.status_code == 201, made.get_json()
    return {"aid": aid, "order_id": bought.get_json()["order_id"],
            "endpoint": endpoint.get_json()["id"], "operator": made.get_json()["token"]}


def named(sale: dict[str, str]) -> dict[str, str]:
    """The headers of the sale's named operator."""
    return {"Authorization": f"Bearer {sale['operator']}"}


def operators_read(client: FlaskClient, sale: dict[str, str]) -> None:
    """The process has read the operators (before the fault)."""
    assert client.get("/admin/whoami", headers=named(sale)).status_code == 200


@pytest.fixture
def relay(database_url: str) -> Iterator[DatabaseRelay]:
    if is_sqlite(database_url):
        pytest.skip("PostgreSQL only (SECKILL_TEST_POSTGRES): a relay in front of the server")
    with DatabaseRelay(database_url) as found:
        yield found


@pytest.fixture
def relayed_app(make_app: Callable[..., Flask], relay: DatabaseRelay) -> Flask:
    """A second gateway process on the same Redis and database, through the relay, that has
    seen none of the activities yet (nothing of them cached)."""
    return make_app(DATABASE_URL=relay.database_url, SECKILL_DATABASE_TIMEOUT=str(TIMEOUT))


def check_routes(client: FlaskClient, sale: dict[str, str]) -> None:
    """Every route of the sale that needs the database, away."""
    aid, order_id = sale["aid"], sale["order_id"]
    check_away(client, "GET", f"/admin/activities/{aid}/stats", headers=ADMIN)
    # A buyer's order status: answered from Redis where it can be, else 503 database.
    check_away(client, "GET", f"/seckill/{aid}/order", headers=user_headers("u-bought"),
               allowed=(200,))
    check_away(client, "GET", f"/seckill/{aid}/order", headers=user_headers("u-other"),
               allowed=(200,))
    check_away(client, "GET", "/admin/webhooks", headers=ADMIN)
    check_away(client, "POST", "/admin/webhooks", headers=ADMIN,
               json={"url": "http://127.0.0.1:9/other", "events": ["order.created"]})
    check_away(client, "GET", f"/admin/webhooks/{sale['endpoint']}/deliveries", headers=ADMIN)
    check_away(client, "POST", f"/admin/orders/{order_id}/cancel", headers=ADMIN)
    check_away(client, "POST", "/admin/activities", headers=ADMIN,
               json={"id": f"a{uuid.uuid4().hex[:10]}", "name": "x", "total": 1,
                     "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"})
    # /metrics keeps serving the sale's own numbers (Redis) without the database's.
    check_away(client, "GET", "/metrics", allowed=(200,), headers=METRICS)
    check_health(client)
    # The console says so (this process alone: no SECKILL_INSTANCES).
    state = check_away(client, "GET", "/admin/console/state", headers=ADMIN, allowed=(200,))
    (instance,) = state["instances"]
    assert not instance["ok"] and "database away" in instance["error"], instance


def check_health(client: FlaskClient) -> None:
    """``/healthz`` names the database, and only it, within the database's bound (a probe
    still running that long is "no answer"); each answer comes within the console's half
    second (the probe runs in the background)."""
    deadline = time.monotonic() + TIMEOUT + 2
    while True:
        status, body, took = answer(client, "GET", "/healthz")
        assert took < 0.5, (took, body)
        if status == 503:
            assert set(body["failing"]) == {"database"}, body
            return
        assert time.monotonic() < deadline, f"/healthz still {status} {body}"
        time.sleep(0.1)


def check_lever(client: FlaskClient, sale: dict[str, str]) -> None:
    """A lever answers within the bound: applied (200), or 503 unavailable; never 500, and
    never a 401 to the named operator the process knew before."""
    for headers in (ADMIN, named(sale)):
        status, body, took = answer(client, "POST", f"/admin/activities/{sale['aid']}/pause",
                                    headers=headers)
        assert took < BOUND, f"pause: {status} after {took:.1f} s"
        assert status in (200, 503), (status, body)
        if status == 503:
            assert body["error"] == "unavailable", body
            if headers is not ADMIN:  # the named operator was let through: the lever ran
                assert body.get("applied") == "sale", body


def check_back(client: FlaskClient, sale: dict[str, str], within: float = 15.0) -> None:
    """Once the database is back, its routes answer 200 again (polled, bounded)."""
    deadline = time.monotonic() + within
    while True:
        statuses = [answer(client, "GET", path, headers=ADMIN)[0] for path in (
            "/healthz", f"/admin/activities/{sale['aid']}/stats", "/admin/webhooks")]
        if statuses == [200, 200, 200]:
            return
        assert time.monotonic() < deadline, f"still {statuses} {within} s after the return"
        time.sleep(0.2)


def test_postgresql_down_every_route_answers_503_database(
        relayed_app: Flask, relay: DatabaseRelay, sale: dict[str, str]) -> None:
    client = relayed_app.test_client()
    # The process has connections in its pool (a stopped server cuts them too).
    assert client.get("/healthz").status_code == 200
    operators_read(client, sale)
    relay.down()
    check_routes(client, sale)
    check_lever(client, sale)
    relay.up()
    check_back(client, sale)


def test_postgresql_hung_every_route_answers_503_database_within_the_bound(
        relayed_app: Flask, relay: DatabaseRelay, sale: dict[str, str]) -> None:
    client = relayed_app.test_client()
    assert client.get("/healthz").status_code == 200
    operators_read(client, sale)
    relay.hang()
    try:
        check_routes(client, sale)
        check_lever(client, sale)
    finally:
        relay.up()
    check_back(client, sale)


def test_postgresql_hung_before_the_first_connection(
        relayed_app: Flask, relay: DatabaseRelay, sale: dict[str, str]) -> None:
    """A process started while the database hangs: its first connections are bounded too."""
    relay.hang()
    try:
        client = relayed_app.test_client()
        check_away(client, "GET", f"/admin/activities/{sale['aid']}/stats", headers=ADMIN)
        # It never read the operators: a named one's token is 503, never a hang or a 401.
        check_away(client, "GET", "/admin/whoami", headers=named(sale))
        status, body, took = answer(client, "GET", "/healthz")
        assert status == 503 and set(body["failing"]) == {"database"}, body
        assert took < BOUND, took
    finally:
        relay.up()
    check_back(relayed_app.test_client(), sale)


def test_sqlite_locked_longer_than_the_bound_writes_answer_503_database(
        make_app: Callable[..., Flask], database_url: str, sale: dict[str, str]) -> None:
    if not is_sqlite(database_url):
        pytest.skip("SQLite only: another connection holding its write lock")
    client = make_app(SECKILL_DATABASE_TIMEOUT=str(TIMEOUT)).test_client()
    operators_read(client, sale)
    lock = SqliteWriteLock(database_url)
    lock.hold()
    try:
        check_away(client, "POST", "/admin/webhooks", headers=ADMIN,
                   json={"url": "http://127.0.0.1:9/other", "events": ["order.created"]})
        check_away(client, "POST", f"/admin/orders/{sale['order_id']}/cancel", headers=ADMIN)
        # Readers are not blocked by a writer (WAL): they answer.
        check_away(client, "GET", f"/admin/activities/{sale['aid']}/stats", headers=ADMIN,
                   allowed=(200,))
        check_away(client, "GET", "/admin/webhooks", headers=ADMIN, allowed=(200,))
        check_lever(client, sale)
    finally:
        lock.close()
    check_back(client, sale)


def test_postgresql_hung_a_pooled_connection_costs_one_bound_not_two(
        make_app: Callable[..., Flask], relay: DatabaseRelay, sale: dict[str, str]) -> None:
    """With the default 3 s timeout: the pool's check of its connection to a hung server
    gives up after a second, so checking it and opening another take the bound once (with
    the check), not twice."""
    timeout = 3.0
    client = make_app(DATABASE_URL=relay.database_url,
                      SECKILL_DATABASE_TIMEOUT=str(timeout)).test_client()
    stats = f"/admin/activities/{sale['aid']}/stats"
    assert answer(client, "GET", stats, headers=ADMIN)[0] == 200  # a pooled connection
    relay.hang()
    try:
        status, body, took = answer(client, "GET", stats, headers=ADMIN)
        assert (status, body.get("detail")) == (503, "database"), (status, body)
        assert took < timeout + 1.5, took
    finally:
        relay.up()
