"""The red team's findings in the gateway, each with the exact request that broke
it, in-process (the wire's: ``tests/test_red_team_wire.py``):

* numbers parsed from outside take ASCII digits only: ``²`` or an Arabic-Indic digit is a
  4xx, never a 500 and never a number;
* a NUL in any text of a body or a query is a 400 ``bad_request`` on every database
  (PostgreSQL refused it with a 500);
* a queue admission's purchase URL ends with the admission, without the clock-skew grace;
* doubled or trailing slashes are a JSON 404, never werkzeug's redirect;
* a user token may live at most ``SECKILL_JWT_MAX_TTL`` seconds;
* a provider's payment of 0 for a priced order does not pay it;
* no path or query (hypothesis) makes a 500;
* a flood of scrapes of ``/metrics`` reads the sale's numbers (Redis), the webhooks' (the
  database) and the storage at most once a second per process, however many scrapers;
* a copy of the database (``seckill.db``) gives away no webhook secret, person salt or seed.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import jwt
import pytest
import redis
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.admission import join, poll, queued_activity, wait_for_start
from tests.support.api import buy, create_activity, expect, order_status
from tests.support.orders import built_worker, drain
from tests.support.timing import iso
from tests.support.tokens import ADMIN, JWT_SECRET, METRICS, user_headers


# Characters str.isdigit() (or isdecimal()) takes and int() may or may not: superscript two,
# Arabic-Indic one, a fullwidth one, a mathematical bold one.
def raw_get(client: FlaskClient, target: str, headers: dict[str, str], method: str = "GET",
            data: bytes | None = None) -> Any:
    """``method target`` with the path exactly as a server would hand it to WSGI (the test
    client would read a leading ``//`` as a host)."""
    path, _, query = target.partition("?")
    environ = {"PATH_INFO": unquote_to_bytes(path).decode("latin-1"), "QUERY_STRING": query,
               "RAW_URI": target, "REQUEST_URI": target}
    return client.open("/", method=method, headers=headers, data=data,
                       environ_overrides=environ)


ODD_DIGITS = ["\u00b2", "\u0661", "\uff11", "\U0001d7cf", "\u0661\u0662"]


# -- 1. non-ASCII digits --------------------------------------------------------------------


@pytest.mark.parametrize("digit", ODD_DIGITS)
def test_a_token_expiry_in_non_ascii_digits_is_403_not_500(client: FlaskClient,
                                                           digit: str) -> None:
    aid = create_activity(client)["id"]
    token = quote(f"{digit}.abc.def")  # POST /seckill/p1/%C2%B2.abc.def/buy
    expect(client.post(f"/seckill/{aid}/{token}/buy", headers=user_headers("mallory")), 403,
           "bad_signature")


@pytest.mark.parametrize("limit", [*ODD_DIGITS, "1\u0661", "+5", " 5", "5 ", "0x5", "5.0"])
def test_a_list_limit_in_anything_but_ascii_digits_is_400(client: FlaskClient,
                                                           limit: str) -> None:
    body = expect(client.get(f"/admin/activities?limit={quote(limit)}", headers=ADMIN), 400,
                  "bad_request")
    assert body.get("field") == "limit", body


def test_an_ascii_limit_still_lists(client: FlaskClient) -> None:
    create_activity(client)
    assert len(expect(client.get("/admin/activities?limit=1", headers=ADMIN), 200)
               ["activities"]) == 1


# -- 2. NUL in text -------------------------------------------------------------------------


NUL_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("name", {"name": "Phone\u0000"}),
    ("description", {"description": "a\u0000b"}),
    ("image_url", {"image_url": "/img/\u0000.png"}),
    ("currency", {"price": {"amount": 100, "currency": "EUR\u0000"}}),
    ("id", {"id": "a\u0000"}),
    ("a field's name", {"name\u0000": "x"}),
]


@pytest.mark.parametrize(("what", "fields"), NUL_BODIES, ids=[w for w, _ in NUL_BODIES])
def test_a_nul_in_any_text_of_a_new_activity_is_400(client: FlaskClient, what: str,
                                                    fields: dict[str, Any]) -> None:
    body: dict[str, Any] = {"id": f"n{uuid.uuid4().hex[:10]}", "name": "Phone", "total": 3,
                            "starts_at": iso(-60), "ends_at": iso(3600), **fields}
    expect(client.post("/admin/activities", json=body, headers=ADMIN), 400, "bad_request")
    # Nothing was made.
    expect(client.get(f"/seckill/activities/{body['id']}"), 404, "unknown_activity")


def test_a_nul_in_an_edit_or_other_bodies_is_400(client: FlaskClient) -> None:
    aid = create_activity(client)["id"]
    expect(client.patch(f"/admin/activities/{aid}", json={"name": "x\u0000y"}, headers=ADMIN),
           400, "bad_request")
    assert expect(client.get(f"/admin/activities/{aid}", headers=ADMIN), 200)["name"] \
        == "Test phone"
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 1, "\u0000": 1},
                       headers=ADMIN), 400, "bad_request")
    expect(client.post("/admin/orders/x-1-1/pay", json={"payment_ref": "r\u0000"},
                       headers=ADMIN), 400, "bad_request")


@pytest.mark.parametrize("path", [
    "/seckill/time?x=%00", "/admin/activities?cursor=a%00", "/admin/activities?state=open%00",
    "/seckill/url?activity=a%00", "/seckill/url?activity=a&x=%00",
])
def test_a_nul_in_a_query_is_400(client: FlaskClient, path: str) -> None:
    headers = ADMIN if path.startswith("/admin") else user_headers("mallory")
    expect(client.get(path, headers=headers), 400, "bad_request")


# -- 3. a lapsed admission buys nothing -----------------------------------------------------


def test_a_lapsed_admission_cannot_buy_in_the_clock_skew_grace(make_app: Any) -> None:
    app: Flask = make_app(SECKILL_URL_TTL="1")  # SECKILL_CLOCK_SKEW stays 5
    client = app.test_client()
    activity = queued_activity(client, total=1, starts_in=0.3)
    aid = activity["id"]
    expect(join(client, aid, "first"), 200)
    wait_for_start(activity)
    admitted = poll(client, aid, "first")
    assert admitted["status"] == "admitted", admitted
    deadline = time.monotonic() + 5
    while time.time() * 1000 <= admitted["expires_at"] * 1000 + 1100:  # past its end
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Nobody polled since: Redis still lists the admission until the queue next moves.
    late = client.post(admitted["url"], headers=user_headers("first"))
    expect(late, 403, "bad_signature")
    expect(join(client, aid, "second"), 200)
    status = poll(client, aid, "second")
    assert status["status"] == "admitted", status
    bought = expect(client.post(status["url"], headers=user_headers("second")), 200)
    assert bought["status"] == "ok"


def test_an_admission_url_never_outlives_the_admission(make_app: Any, rds: Any) -> None:
    app: Flask = make_app(SECKILL_URL_TTL="3")
    client = app.test_client()
    activity = queued_activity(client, total=1, starts_in=0.3)
    expect(join(client, activity["id"], "ann"), 200)
    wait_for_start(activity)
    asked = time.time()
    admitted = poll(client, activity["id"], "ann")
    assert admitted["status"] == "admitted"
    token_expiry = int(admitted["url"].split("/")[3].split(".")[0])
    ends_ms = rds.zscore(app.extensions["seckill"].keys.admitted(activity["id"]), "ann")
    assert token_expiry * 1000 == ends_ms == admitted["expires_at"] * 1000  # ends together
    assert asked + 3 <= token_expiry <= time.time() + 3 + 1  # the TTL, up to a whole second


def test_an_admission_given_late_in_a_second_still_lasts_the_whole_ttl(make_app: Any) -> None:
    """The URL counts whole seconds. An admission that ended TTL after a moment late in a
    second, its URL rounded down, left the buyer as little as a few ms of a 1 s TTL (CI's red
    run: a winner's URL had expired before the purchase). It ends on a whole second, at least
    TTL after it was given."""
    app: Flask = make_app(SECKILL_URL_TTL="1")
    client = app.test_client()
    activity = queued_activity(client, total=1, starts_in=0.3)
    expect(join(client, activity["id"], "ann"), 200)
    wait_for_start(activity)
    deadline = time.monotonic() + 3
    while time.time() % 1 < 0.85:  # the first poll of the sale admits: late in a second
        assert time.monotonic() < deadline
        time.sleep(0.01)
    asked = time.time()
    admitted = poll(client, activity["id"], "ann")
    assert admitted["status"] == "admitted", admitted
    assert asked + 1 <= admitted["expires_at"] <= time.time() + 2, (asked, admitted)
    bought = expect(client.post(admitted["url"], headers=user_headers("ann")), 200)
    assert bought["status"] == "ok"


# -- 4. slashes -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/seckill//activities/{aid}", "//seckill/activities/{aid}", "/seckill/activities//{aid}",
    "/seckill/activities/{aid}/", "/seckill//time", "/seckill/time/", "/admin//activities",
    "/admin/activities/", "/admin//activities/{aid}/stats", "/seckill//url",
    "/seckill/url/", "/seckill/{aid}//order", "/seckill//{aid}/queue/state", "//healthz",
])
def test_doubled_and_trailing_slashes_are_a_json_404(client: FlaskClient, path: str) -> None:
    aid = create_activity(client)["id"]
    headers = {**ADMIN, "Host": "evil.example"} if "/admin" in path else {
        **user_headers("ann"), "Host": "evil.example"}
    response = raw_get(client, path.format(aid=aid), headers)
    expect(response, 404, "not_found")
    assert "Location" not in response.headers
    assert response.headers.get("X-Seckill-Outcome") == "not_found", response.headers


# -- 6. a maximum token lifetime ------------------------------------------------------------


def _token(**claims: Any) -> dict[str, str]:
    return {"Authorization": "Bearer " + jwt.encode({"sub": "ann", **claims}, JWT_SECRET,
                                                     algorithm="HS256")}


def test_a_token_living_longer_than_the_maximum_is_401(make_app: Any) -> None:
    client = make_app(SECKILL_JWT_MAX_TTL="3600").test_client()
    aid = create_activity(client)["id"]
    now = int(time.time())
    url = f"/seckill/url?activity={aid}"
    expect(client.get(url, headers=_token(exp=now + 3000)), 200)
    expect(client.get(url, headers=_token(iat=now, exp=now + 3600)), 200)
    expect(client.get(url, headers=_token(exp=now + 3600 + 60)), 401, "unauthenticated")
    # iat says how long it was minted for: a day-long token is refused even near its end.
    expect(client.get(url, headers=_token(iat=now - 86_000, exp=now + 400)), 401,
           "unauthenticated")


def test_the_default_maximum_refuses_a_token_for_ever_and_zero_turns_it_off(
        make_app: Any) -> None:
    forever = _token(exp=2**53)
    client = make_app().test_client()
    aid = create_activity(client)["id"]
    expect(client.get(f"/seckill/url?activity={aid}", headers=forever), 401, "unauthenticated")
    expect(client.get(f"/seckill/url?activity={aid}",
                      headers=_token(exp=int(time.time()) + 7 * 86_400)), 200)
    off = make_app(SECKILL_JWT_MAX_TTL="0").test_client()
    expect(off.get(f"/seckill/url?activity={aid}", headers=forever), 200)


# -- 7. no path or query makes a 500 --------------------------------------------------------


# The routes (but end and pause, which would close the shared activity), with each
# placeholder filled from _VALUES; or a random path of _SEGMENTS.
_ROUTES = [
    ("GET", "/seckill/time"), ("GET", "/seckill/activities/{}"), ("GET", "/seckill/url"),
    ("POST", "/seckill/{}/{}/buy"), ("POST", "/seckill/{}/queue"), ("GET", "/seckill/{}/queue"),
    ("GET", "/seckill/{}/queue/state"), ("GET", "/seckill/{}/challenge"),
    ("GET", "/seckill/{}/order"), ("GET", "/admin/activities"), ("POST", "/admin/activities"),
    ("GET", "/admin/activities/{}"), ("PATCH", "/admin/activities/{}"),
    ("POST", "/admin/activities/{}/stock"), ("POST", "/admin/activities/{}/admission"),
    ("POST", "/admin/activities/{}/resume"), ("GET", "/admin/activities/{}/stats"),
    ("POST", "/admin/orders/{}/cancel"), ("POST", "/admin/orders/{}/pay"),
    ("GET", "/admin/console/state"), ("GET", "/admin/console/{}"), ("GET", "/admin"),
    ("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
]
_VALUES = st.sampled_from([
    "{aid}", "{aid}", "%C2%B2", "%D9%A1", "%00", "%2F", "%FF", "..", ".", "%C2%B2.abc.def",
    "1.abc.def", "9" * 20, "{aid}-1-%C2%B2", "{aid}-%D9%A1-1", "{aid}-1-1", "%E2%80%AE", "~",
    "a" * 100, "%20", "{aid}%00",
])
_SEGMENTS = st.sampled_from([
    "", "seckill", "admin", "activities", "url", "time", "buy", "order", "queue", "state",
    "stats", "orders", "console", "%C2%B2", "%00", "%FF", "..", "{aid}",
])
_QUERIES = st.sampled_from([
    "", "activity={aid}", "activity=%C2%B2", "limit=%C2%B2", "limit=%D9%A1", "limit=99999999999",
    "limit=-1", "state=%00", "cursor=%FF", "activity=", "activity=%00", "a=%00",
    "activity={aid}&activity=x", "state=paused&limit=1&cursor={aid}", "limit=%EF%BC%91",
])


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str]:
    if draw(st.integers(0, 4)) == 0:
        path = "/" + "/".join(draw(st.lists(_SEGMENTS, min_size=1, max_size=5)))
        method = draw(st.sampled_from(["GET", "POST", "PATCH", "HEAD"]))
    else:
        method, template = draw(st.sampled_from(_ROUTES))
        path = template.format(*(draw(_VALUES) for _ in range(template.count("{}"))))
        if draw(st.integers(0, 5)) == 0:
            method = draw(st.sampled_from(["GET", "POST", "PATCH", "HEAD", "DELETE"]))
        mangle = draw(st.integers(0, 7))
        if mangle == 0:
            path = path.replace("/", "//", 1 + draw(st.integers(0, 3)))
        elif mangle == 1:
            path += "/"
    query = draw(_QUERIES)
    return method, path + ("?" + query if query else "")


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(call=_requests(), who=st.sampled_from(["admin", "user", "none"]))
def test_no_path_or_query_answers_500(client: FlaskClient, call: tuple[str, str],
                                      who: str) -> None:
    aid = _shared_activity(client)
    method, path = call[0], call[1].replace("{aid}", aid)
    headers = {"admin": ADMIN, "user": user_headers("fuzz"), "none": {}}[who]
    response = raw_get(client, path, headers, method,
                       b"{}" if method in ("POST", "PATCH") else None)
    assert response.status_code < 500 or response.status_code == 503, (
        method, path, response.status_code, response.get_data()[:300])
    if method != "HEAD" and response.status_code >= 400:  # every refusal is the contract's
        assert response.mimetype == "application/json", (path, response.headers)


def _shared_activity(client: FlaskClient) -> str:
    """One activity per client: hypothesis runs all its examples on one test's fixtures."""
    aid: str | None = getattr(client, "red_team_aid", None)
    if aid is None:
        aid = create_activity(client, total=1000)["id"]
        client.red_team_aid = aid  # type: ignore[attr-defined]
    return aid


@pytest.mark.parametrize("order_id", ["{aid}-1-\u00b2", "{aid}-\u00b2-1", "{aid}-1-\u0661",
                                      "{aid}-\uff11-1"])
def test_an_order_id_in_non_ascii_digits_is_an_unknown_order(client: FlaskClient,
                                                             order_id: str) -> None:
    aid = create_activity(client, shards=2, payment_window=60)["id"]
    target = quote(order_id.format(aid=aid))
    expect(client.post(f"/admin/orders/{target}/pay", json={"payment_ref": "r1"},
                       headers=ADMIN), 404, "unknown_order")
    expect(client.post(f"/admin/orders/{target}/cancel", headers=ADMIN), 404, "unknown_order")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=20)
    | st.sampled_from(["\u00b2", "\u0661", "2026-11-21T12:00:00Z", "queue", "draw", "packets",
                       "EUR", "/img/a.png", "https://x.example/a.png", "a\u0000"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=3),
    max_leaves=6)
_FIELDS = st.sampled_from(["id", "name", "total", "per_user_limit", "starts_at", "ends_at",
                           "kind", "amount", "count", "shards", "payment_window", "admission",
                           "queue_opens_at", "challenge", "description", "image_url", "price",
                           "quantity", "add", "payment_ref", "factor", "altcha"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=st.dictionaries(_FIELDS, _JSON, max_size=6) | _JSON,
       target=st.sampled_from(["create", "edit", "stock", "pay", "admission", "buy", "queue"]))
def test_no_body_answers_500(client: FlaskClient, body: Any, target: str) -> None:
    aid = _shared_activity(client)
    path = {"create": "/admin/activities", "edit": f"/admin/activities/{aid}",
            "stock": f"/admin/activities/{aid}/stock", "pay": "/admin/orders/x-1-1/pay",
            "admission": f"/admin/activities/{aid}/admission", "buy": f"/seckill/{aid}/x/buy",
            "queue": f"/seckill/{aid}/queue"}[target]
    if target == "stock" and isinstance(body, dict) and isinstance(body.get("add"), int):
        body["add"] = 0  # the shared activity keeps its stock
    headers = user_headers("fuzz") if target in ("buy", "queue") else ADMIN
    method = "PATCH" if target == "edit" else "POST"
    response = client.open(path, method=method, data=json.dumps(body), headers=headers,
                           content_type="application/json")
    assert response.status_code < 500, (target, body, response.get_data()[:300])
    if response.status_code >= 400:
        assert response.mimetype == "application/json", response.headers


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(changes=st.dictionaries(_FIELDS, _JSON | st.fixed_dictionaries(
           {"amount": _JSON, "currency": _JSON}), min_size=1, max_size=3),
       edit=st.booleans())
def test_no_near_valid_activity_body_answers_500(client: FlaskClient, changes: dict[str, Any],
                                                 edit: bool) -> None:
    """A valid body with a field or three changed: the validators' deeper branches."""
    if edit:
        aid = _shared_activity(client)
        changes = {k: v for k, v in changes.items()
                   if k in ("name", "description", "image_url", "price")} or {"name": None}
        response = client.open(f"/admin/activities/{aid}", method="PATCH",
                               data=json.dumps(changes), headers=ADMIN,
                               content_type="application/json")
    else:
        body = {"id": f"f{uuid.uuid4().hex[:10]}", "name": "Phone", "total": 3,
                "starts_at": iso(-60), "ends_at": iso(3600), "queue_opens_at": iso(-120),
                **changes}
        response = client.post("/admin/activities", data=json.dumps(body), headers=ADMIN,
                               content_type="application/json")
    assert response.status_code < 500, (changes, response.get_data()[:300])


# -- a payment for the wrong amount ------------------------------------------------------


def test_a_payment_of_0_for_a_priced_order_does_not_pay_it(make_app: Any,
                                                           env: dict[str, str]) -> None:
    """A signed ``payment.succeeded`` with ``"amount": 0`` paid any held order."""
    secret = "whsec_" + base64.b64encode(b"red-team-payments-secret-32bytes").decode()
    client = make_app(SECKILL_PAYMENT_WEBHOOK_SECRET=secret).test_client()
    aid = create_activity(client, total=5, payment_window=60,
                          price={"amount": 49_999, "currency": "EUR"})["id"]
    oid = expect(buy(client, aid, "mallory"), 200)["order_id"]
    with built_worker(Settings.from_env(env)) as worker:
        drain(worker)  # the order in the database: the shop's event can be written
    body = json.dumps({"type": "payment.succeeded",
                       "data": {"order_id": oid, "payment_ref": "pi_0", "amount": 0}})
    when = datetime.now(UTC)
    headers = {"webhook-id": "msg_red_team", "webhook-timestamp": str(int(when.timestamp())),
               "webhook-signature": Webhook(secret).sign("msg_red_team", when, body),
               "Content-Type": "application/json"}
    answer = expect(client.post("/payments/webhook", data=body, headers=headers), 200)
    assert (answer["status"], answer["amount"]) == ("payment_mismatch", 49_999)
    assert order_status(client, aid, "mallory")["payment"] == "due"


def test_a_scrape_flood_reads_the_store_at_most_once_a_second(
        make_app: Any, private_valkey: EmbeddedValkey) -> None:
    app = make_app(REDIS_URL=private_valkey.url)  # a Valkey of its own: its commands counted
    client = app.test_client()
    for _ in range(3):
        create_activity(client, total=5)
    statements: list[str] = []
    sa.event.listen(app.extensions["seckill"].engine, "before_cursor_execute",
                    lambda _conn, _cursor, statement, *_: statements.append(statement))
    store = redis.Redis.from_url(private_valkey.url)

    def counted(scrapers: int, each: int) -> tuple[int, int, float]:
        """Redis commands and SQL statements of ``scrapers`` threads scraping ``each`` times,
        and the seconds they took."""
        store.config_resetstat()
        statements.clear()
        started = time.monotonic()

        def scrape() -> None:
            own = app.test_client()
            for _ in range(each):
                assert own.get("/metrics", headers=METRICS).status_code == 200

        threads = [threading.Thread(target=scrape) for _ in range(scrapers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        took = time.monotonic() - started
        commands = sum(int(stat["calls"]) for stat in store.info("commandstats").values())
        return commands, len(statements), took

    time.sleep(1.1)
    one_commands, one_statements, _ = counted(1, 1)  # one scrape: every read, once
    assert one_commands > 0 and one_statements > 0
    commands, sql, took = counted(8, 8)  # 64 scrapes at once, right after that one
    rounds = int(took) + 1  # the readings a second's cache allows in that time
    assert commands <= rounds * one_commands, (commands, one_commands, took)
    assert sql <= rounds * one_statements, (sql, one_statements, took)
    store.close()


@pytest.mark.database
def test_a_copy_of_seckill_db_reveals_no_webhook_secret_salt_or_seed(
        make_app: Any, database_url: str) -> None:
    """A copy of the database (a backup; ``seckill.db`` read by another local user) gives away
    no webhook signing secret, person salt, draw seed or red-envelope seed: they are stored
    sealed under SECKILL_DATA_KEY (or a key derived from SECKILL_SECRET_KEY)."""
    app = make_app(SECKILL_PERSON_CLAIM="https://shop.example/person")
    client = app.test_client()
    secret = "whsec_" + base64.b64encode(b"red-team: the shop's signing key!").decode()
    expect(client.post("/admin/webhooks", headers=ADMIN, json={
        "url": "http://10.0.0.7:8000/hooks", "events": ["*"], "secret": secret}), 201)
    draw = create_activity(client, admission="draw", queue_opens_at=iso(60),
                           starts_at=iso(120), ends_at=iso(3600), limit_by="person")
    packets = create_activity(client, kind="packets", amount=1000, count=10)
    book = app.extensions["seckill"].book
    found = book.load_activity(draw["id"])
    seed = book.load_activity(packets["id"]).seed
    wanted = [secret, secret.removeprefix("whsec_"), found.draw_seed, found.person_salt,
              str(seed)]
    assert None not in (found.draw_seed, found.person_salt, seed)
    with book.engine.connect() as conn:
        stored = [str(value) for table in ("seckill_activities", "seckill_webhook_endpoints")
                  for row in conn.execute(sa.text(f"SELECT * FROM {table}")) for value in row]
    assert not [s for s in wanted if any(s in value for value in stored)]
    url = sa.engine.make_url(database_url)
    if url.get_backend_name() == "sqlite":  # the file's bytes, and its WAL's
        raw = b"".join(path.read_bytes() for path in (Path(f"{url.database}"),
                                                      Path(f"{url.database}-wal"))
                       if path.exists())
        assert not [s for s in wanted if s.encode() in raw]
