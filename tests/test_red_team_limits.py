"""The red team's findings on sizes and on the wire's words, gunicorn alone (``seckill
up --no-nginx``) and behind a real nginx, both listeners:

* a drop of 100 variants with the names a shop writes (``"EU 41 / Navy leather"``, ~6.5 KiB of
  JSON) was 413: the operator routes take bodies up to 256 KiB on every layer, sized or
  chunked, and the public ones keep 4 KiB;
* nginx answered a too-large header 400 (the contract says 431), and its 413 without the
  ``X-Seckill-*`` headers the document marks required;
* the 414 of a very long ``/admin/activities`` URL was not in the document;
* gunicorn's 408 and 400 said ``Connection: keep-alive`` and then closed the connection.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import orjson
import pytest

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.servers import NginxFront, gunicorn_server, nginx_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN, user_headers
from tests.support.wire import ADMIN_JSON, Answer, chunked, exchange, request, sale

OPERATOR_LIMIT = 256 * 1024  # the contract's (Hardening)
PUBLIC_LIMIT = 4096
DEADLINE = 2  # seconds: gunicorn's header and body deadlines here
COLOURS = ("Navy leather", "Black suede", "White canvas", "Sand nubuck", "Olive knit")


@pytest.fixture(scope="module")
def base(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("red-team-limits")
    env = gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", data,
                      f"sqlite:///{data / 'orders.db'}", "1000/second")
    env.update(GUNICORN_HEADER_TIMEOUT=str(DEADLINE), GUNICORN_BODY_TIMEOUT=str(DEADLINE))
    with gunicorn_server(env, workers=1) as url:
        yield url


@pytest.fixture(scope="module")
def proxy(base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxFront]:
    run_dir = tmp_path_factory.mktemp("red-team-limits-nginx")
    with nginx_server([base.removeprefix("http://")], run_dir, ip_rate="off") as front:
        yield front


def send(how: str, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The raw request: the body with a Content-Length (``sized``) or in chunks."""
    if how == "sized":
        return request(method, path, headers, body)
    return chunked(path, headers, body, piece=4000).replace(b"POST ", f"{method} ".encode(), 1)


def drop() -> bytes:
    """A real drop: 100 sizes and colours named as a shop names them (~6.5 KiB)."""
    return orjson.dumps({
        "id": f"drop{uuid.uuid4().hex[:10]}", "name": "Court Classic", "starts_at": iso(-60),
        "ends_at": iso(3600),
        "variants": [{"id": f"eu{36 + n // 5}-{COLOURS[n % 5].split()[0].lower()}",
                      "name": f"EU {36 + n // 5} / {COLOURS[n % 5]}", "total": 5}
                     for n in range(100)]})


def largest_drop() -> bytes:
    """About the largest body the document calls a valid activity: every text at its maximum
    length, each character a six-byte JSON escape, 100 variants (~79 KB)."""
    return json.dumps({
        "id": f"max{uuid.uuid4().hex[:10]}", "name": "\u00e9" * 200,
        "description": "\u00e9" * 2000, "starts_at": iso(-60), "ends_at": iso(3600),
        "variants": [{"id": f"v{n:02d}" + "x" * 29, "name": f"{n:02d}" + "\u00e9" * 98,
                      "total": 5} for n in range(100)]}, ensure_ascii=True).encode()


def carries_the_headers(answer: Answer) -> None:
    """What the document marks required on every answer (X-Seckill-Instance, -Outcome)."""
    assert answer.headers.get("x-seckill-instance"), answer.raw[:600]
    assert answer.headers.get("x-seckill-outcome") == answer.body["error"], answer.raw[:600]


# -- the operator's body limit ------------------------------------------------------------


@pytest.mark.parametrize("how", ["sized", "chunked"])
@pytest.mark.parametrize("front", ["gunicorn", "nginx"])
def test_a_drop_of_100_variants_is_created(base: str, proxy: NginxFront, front: str,
                                           how: str) -> None:
    where = base if front == "gunicorn" else proxy.admin_base
    body = drop()
    assert 6000 < len(body) < 8000, len(body)
    made = exchange(where, send(how, "POST", "/admin/activities", ADMIN_JSON, body))
    assert made.status == 201, made.raw[:600]
    assert len(made.body["variants"]) == 100
    largest = largest_drop()
    assert 75_000 < len(largest) < OPERATOR_LIMIT // 2, len(largest)  # room to spare
    made = exchange(where, send(how, "POST", "/admin/activities", ADMIN_JSON, largest))
    assert made.status == 201, made.raw[:600]


@pytest.mark.parametrize("how", ["sized", "chunked"])
@pytest.mark.parametrize("front", ["gunicorn", "nginx"])
def test_over_the_operator_limit_is_413_on_admin(base: str, proxy: NginxFront, front: str,
                                                 how: str) -> None:
    where = base if front == "gunicorn" else proxy.admin_base
    path = f"/admin/activities/{sale(where)}"
    fits = b"{}" + b" " * (OPERATOR_LIMIT - 2)
    answer = exchange(where, send(how, "PATCH", path, ADMIN_JSON, fits))
    # Read whole and judged as JSON: an edit that changes nothing is the contract's 400.
    answer.json_error(400, "bad_request")
    answer = exchange(where, send(how, "PATCH", path, ADMIN_JSON, fits + b" "))
    answer.json_error(413, "too_large")
    carries_the_headers(answer)


@pytest.mark.parametrize("how", ["sized", "chunked"])
@pytest.mark.parametrize(("method", "path"), [("GET", "/seckill/time"), ("POST", "/healthz"),
                                              ("POST", "/payments/webhook"),
                                              ("POST", "/seckill/{aid}/queue")])
@pytest.mark.parametrize("front", ["gunicorn", "nginx"])
def test_4_kib_and_one_byte_is_still_413_on_public_routes(
        base: str, proxy: NginxFront, front: str, method: str, path: str, how: str) -> None:
    aid = sale(base)
    where = base if front == "gunicorn" else proxy.base
    body = b"{}" + b" " * (PUBLIC_LIMIT - 1)
    answer = exchange(where, send(how, method, path.format(aid=aid), user_headers("big"), body))
    answer.json_error(413, "too_large")
    carries_the_headers(answer)


@pytest.mark.parametrize("how", ["sized", "chunked"])
def test_an_operator_route_without_a_token_takes_only_4_kib(base: str, how: str) -> None:
    # Without nginx in front, the operator's routes face the crowd: a request that carries no
    # credentials at all is held to the public limit, not made to read 256 KiB for a 401.
    body = b"{}" + b" " * (PUBLIC_LIMIT - 1)
    headers = {"Content-Type": "application/json"}
    answer = exchange(base, send(how, "POST", "/admin/activities", headers, body))
    answer.json_error(413, "too_large")
    carries_the_headers(answer)
    answer = exchange(base, send(how, "POST", "/admin/activities", headers, b"{}"))
    answer.json_error(401, "unauthenticated")


# -- the contract's statuses and headers --------------------------------------------------


@pytest.mark.parametrize("front", ["gunicorn", "nginx", "nginx-admin"])
def test_a_too_large_header_is_431(base: str, proxy: NginxFront, front: str) -> None:
    where = {"gunicorn": base, "nginx": proxy.base, "nginx-admin": proxy.admin_base}[front]
    answer = exchange(where, request("GET", "/seckill/time", {"X-Big": "a" * 9000}))
    answer.json_error(431, "too_large")
    carries_the_headers(answer)
    if front != "gunicorn":  # any other malformed request is still nginx's 400
        exchange(where, b"GET /seckill/time HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
                 ).json_error(400, "bad_request")


@pytest.mark.parametrize("front", ["gunicorn", "nginx-admin"])
def test_a_very_long_admin_url_is_the_documented_414(base: str, proxy: NginxFront,
                                                     front: str) -> None:
    where = base if front == "gunicorn" else proxy.admin_base
    answer = exchange(where, request("GET", "/admin/activities?state=" + "a" * 9000,
                                     {"Authorization": f"Bearer {ADMIN_TOKEN}"}))
    answer.json_error(414, "too_large")
    carries_the_headers(answer)
    document = exchange(base, request("GET", "/openapi.json")).body
    assert document["paths"]["/admin/activities"]["get"]["responses"]["414"] == {
        "$ref": "#/components/responses/UriTooLong"}


def test_a_408_on_a_stalled_body_says_connection_close(base: str) -> None:
    path = f"/admin/activities/{sale(base)}"
    answer = exchange(base, request("PATCH", path, ADMIN_JSON, b"{}", length=100),
                      wait=DEADLINE + 10)
    answer.json_error(408, "timeout")
    assert answer.closed
    assert answer.headers.get("connection") == "close", answer.raw[:600]


@pytest.mark.parametrize("cut", ["sized", "chunked"])
def test_a_400_on_a_cut_body_says_connection_close(base: str, cut: str) -> None:
    path = f"/admin/activities/{sale(base)}"
    if cut == "sized":  # fewer bytes than the Content-Length said
        raw = request("PATCH", path, ADMIN_JSON, b"{}", length=100)
    else:  # a chunk cut short
        raw = request("PATCH", path, ADMIN_JSON).replace(
            b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}", 1)
    answer = exchange(base, raw, half_close=True)
    answer.json_error(400, "bad_request")
    assert answer.closed
    assert answer.headers.get("connection") == "close", answer.raw[:600]


def test_a_chunked_413_says_connection_close(base: str) -> None:
    body = b"{}" + b" " * PUBLIC_LIMIT
    answer = exchange(base, send("chunked", "GET", "/seckill/time", {}, body))
    answer.json_error(413, "too_large")
    assert answer.closed
    assert answer.headers.get("connection") == "close", answer.raw[:600]
