"""The red team's findings in the gateway that need the wire: raw requests to a
real gunicorn (no nginx in front, a deployment the README documents).

* a chunked body over 4 KiB is a 413 ``too_large`` on every route, as with a Content-Length
  (it answered 401 on ``/seckill/url``, 200 on ``/seckill/time``, 201 on admin create);
* a doubled slash is a JSON 404 with no ``Location`` built from the client's ``Host``;
* ``POST /seckill/<aid>/%C2%B2.abc.def/buy`` is a 403, not a 500;
* ``GET /metrics`` on gunicorn alone (``seckill up --no-nginx``) answered every activity's
  numbers to anyone: it now wants the metrics token or the operator token (a 401 without);
* a local process without the password of ``seckill up``'s Valkey can neither read nor
  rewrite stock, and its data folder is private whatever the umask.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import psutil
import pytest
import redis

from edge.identity import mint_user_token
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.cli import call, seckill, seckill_up, stop_and_check_nothing_is_left
from tests.support.gateway import gateway_env
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, user_headers
from tests.support.upstack import up_env
from tests.support.wire import ADMIN_JSON, Answer, chunked, exchange, request, sale

BIG = b'{"quantity":1}' + b" " * 6000  # valid JSON, over 4 KiB
HUGE = b"{}" + b" " * 256 * 1024  # valid JSON, over the operator routes' 256 KiB


@pytest.fixture(scope="module")
def base(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("red-team-wire")
    env = gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", data,
                      f"sqlite:///{data / 'orders.db'}", "1000/second")
    with gunicorn_server(env, workers=1) as url:
        yield url


def chunked_to(method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """A chunked request of any method (``chunked`` of test_http_wire sends a POST)."""
    return chunked(path, headers, body).replace(b"POST ", f"{method} ".encode(), 1)


@pytest.mark.parametrize(("method", "path", "who"), [
    ("GET", "/seckill/time", "none"),
    ("GET", "/seckill/url?activity={aid}", "user"),
    ("GET", "/seckill/url?activity={aid}", "none"),
    ("POST", "/admin/activities", "admin"),
    ("POST", "/admin/activities", "none"),
    ("GET", "/seckill/activities/{aid}", "none"),
    ("GET", "/seckill/{aid}/order", "user"),
    ("POST", "/seckill/{aid}/queue", "user"),
    ("GET", "/admin/activities", "admin"),
    ("PATCH", "/admin/activities/{aid}", "admin"),
    ("GET", "/healthz", "none"),
    ("GET", "/no/such/route", "none"),
])
def test_a_chunked_body_over_4_kib_is_413_on_every_route(base: str, method: str, path: str,
                                                        who: str) -> None:
    aid = sale(base)
    headers = {"admin": ADMIN_JSON, "user": user_headers("chunky"), "none": {}}[who]
    # The operator routes take up to 256 KiB (a drop of 100 variants), the others 4 KiB.
    body = HUGE if path.startswith("/admin/") else BIG
    answer = exchange(base, chunked_to(method, path.format(aid=aid), headers, body))
    answer.json_error(413, "too_large")
    assert answer.closed  # the rest of the body is never read


def test_a_chunked_body_within_4_kib_still_works(base: str) -> None:
    aid = f"r{uuid.uuid4().hex[:10]}"
    body = orjson.dumps({"id": aid, "name": "Phone", "total": 10, "starts_at": iso(-60),
                         "ends_at": iso(3600)})
    made = exchange(base, chunked("/admin/activities", ADMIN_JSON, body, piece=7))
    assert made.status == 201, made.raw
    answer = exchange(base, chunked_to("GET", "/seckill/time", {}, b"x" * 4096))
    assert answer.status == 200, answer.raw


@pytest.mark.parametrize("path", ["/seckill//activities/{aid}", "/admin//activities",
                                  "//seckill/activities/{aid}", "/seckill/activities/{aid}/",
                                  "/admin/activities/", "/seckill//time"])
def test_a_doubled_slash_is_a_json_404_without_a_location(base: str, path: str) -> None:
    aid = sale(base)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Host": "evil.example"}
    raw = request("GET", path.format(aid=aid), headers).replace(b"Host: 127.0.0.1\r\n", b"", 1)
    answer: Answer = exchange(base, raw)
    answer.json_error(404, "not_found")
    assert "location" not in answer.headers, answer.raw
    assert answer.headers.get("x-seckill-outcome") == "not_found", answer.raw


def test_a_token_expiry_in_a_superscript_digit_is_403(base: str) -> None:
    aid = sale(base)
    answer = exchange(base, request("POST", f"/seckill/{aid}/%C2%B2.abc.def/buy",
                                    user_headers("mallory")))
    answer.json_error(403, "bad_signature")


def test_a_content_length_in_a_superscript_digit_is_a_4xx(base: str) -> None:
    aid = sale(base)
    raw = request("PATCH", f"/admin/activities/{aid}", ADMIN_JSON).replace(
        b"\r\n\r\n", b"\r\nContent-Length: \xb2\r\n\r\n{}", 1)
    answer = exchange(base, raw)
    assert answer.status is not None and 400 <= answer.status < 500, answer.raw


@pytest.mark.parametrize("chunks", [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n",
                                    b"5\r\n{}"])
def test_a_malformed_chunked_body_is_400_where_it_is_read(base: str, chunks: bytes) -> None:
    head = request("POST", "/admin/activities", ADMIN_JSON).replace(
        b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n", 1)
    answer = exchange(base, head + chunks, half_close=True)
    answer.json_error(400, "bad_request")


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer wrong-token", "Basic " + "YWRtaW46YWRtaW4=",
    f"Bearer {METRICS_TOKEN}x", f"Bearer {ADMIN_TOKEN[:-1]}", "user",
])
def test_metrics_without_a_token_reveals_nothing(base: str, authorization: str | None) -> None:
    aid = sale(base)  # an activity whose numbers a scrape would list
    headers = user_headers("mallory") if authorization == "user" else (
        {} if authorization is None else {"Authorization": authorization})
    answer = exchange(base, request("GET", "/metrics", headers))
    answer.json_error(401, "unauthenticated")
    assert b"seckill_" not in answer.raw and aid.encode() not in answer.raw, answer.raw


def test_metrics_answer_the_metrics_token_and_the_operator_token(base: str) -> None:
    aid = sale(base)
    for token in (METRICS_TOKEN, ADMIN_TOKEN):
        answer = exchange(base, request("GET", "/metrics", {"Authorization": f"Bearer {token}"}))
        assert answer.status == 200, answer.raw[:600]
        assert f'seckill_activity_remaining{{activity="{aid}"}}'.encode() in answer.raw or \
            b"seckill_requests_total" in answer.raw, answer.raw[:600]
    # The scrape-only token opens nothing else.
    refused = exchange(base, request("GET", "/admin/activities",
                                     {"Authorization": f"Bearer {METRICS_TOKEN}"}))
    refused.json_error(401, "unauthenticated")


# -- `seckill up`'s own store: a password, private files, no secret in a log ---------------


def _private(data: Path) -> list[str]:
    """What under ``data`` (itself included) another account could read, enter or write."""
    return [f"{path} {path.stat().st_mode & 0o777:o}"
            for path in [data, *data.rglob("*")]
            if not path.is_symlink() and path.stat().st_mode & 0o077]


def _in_use(up: subprocess.Popen[bytes], port: int, log: Path, seen: list[psutil.Process],
            data: Path) -> str:
    """A sale on the running up, the attempts of a stranger and of the owner; stops up and
    returns the password it printed."""
    url = re.search(r"export REDIS_URL=(\S+)", log.read_text())
    assert url is not None, log.read_text()
    parts = urlsplit(url.group(1))
    password = parts.password
    assert password is not None and len(password) >= 32, url.group(1)

    admin = ADMIN_TOKEN
    body = {"id": "locked", "name": "Phone", "total": 10, "starts_at": iso(-5),
            "ends_at": iso(600)}
    assert call(port, "POST", "/admin/activities", admin, body)[0] == 201
    token = mint_user_token("alice", JWT_SECRET)
    status, issued = call(port, "GET", "/seckill/url?activity=locked", token)
    assert status == 200, issued
    assert call(port, "POST", issued["url"], token)[0] == 200

    meta = "seckill:{locked}:meta"
    assert parts.hostname is not None and parts.port is not None
    stranger = redis.Redis(host=parts.hostname, port=parts.port, decode_responses=True,
                           socket_timeout=2)
    with contextlib.closing(stranger):
        for attempt in (lambda: stranger.hset(meta, "remaining", 1_000_000),
                        lambda: stranger.hgetall(meta), lambda: stranger.flushall(),
                        lambda: stranger.config_set("requirepass", "")):
            with pytest.raises(redis.AuthenticationError):
                attempt()
        with pytest.raises(redis.AuthenticationError):
            stranger.execute_command("AUTH", "default", "not-the-password")
    for child in psutil.Process(up.pid).children(recursive=True):  # `ps` shows every account
        with contextlib.suppress(psutil.Error):
            assert password not in " ".join(child.cmdline()), child.cmdline()
    owner = redis.Redis.from_url(url.group(1), decode_responses=True, socket_timeout=2)
    with contextlib.closing(owner):
        assert owner.hget(meta, "total") == "10"
    # The operator's commands still find the store through the data folder alone.
    shown = seckill("activity", "show", "locked", env={"SECKILL_DATA_DIR": str(data)})
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["remaining"] == 9

    assert (data / "seckill.db-wal").exists() or (data / "seckill.db").stat().st_size
    assert _private(data) == []
    stop_and_check_nothing_is_left(up, log, seen)
    return password


def test_a_local_process_without_the_password_cannot_rewrite_stock(tmp_path: Path) -> None:
    """``seckill up``'s embedded Valkey asks for the password it printed: another local process
    (any account can reach 127.0.0.1) can neither read nor rewrite a stock counter. Under
    umask 022, over a folder an earlier run left open, the data folder ends 0700 and every
    file in it 0600; the password is in no log line but the one that prints REDIS_URL."""
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "seckill.db").touch(mode=0o644)  # an earlier run's database, left readable
    data.chmod(0o755)
    (data / "seckill.db").chmod(0o644)
    before = os.umask(0o022)  # up and its children inherit it
    try:
        with seckill_up(tmp_path, up_env(data, SECKILL_USER_RATE="1000/second"),
                        "--workers", "1", "--no-nginx") as (up, port, log, seen):
            password = _in_use(up, port, log, seen, data)
    finally:
        os.umask(before)
    assert _private(data) == []

    # The password: once in up's output (the REDIS_URL it prints for the operator), in no
    # log file, in no other file of the data folder but the one that keeps it.
    said = log.read_text()
    assert said.count(password) == 1, said
    assert next(line for line in said.splitlines() if password in line).startswith(
        "  export REDIS_URL=")
    holders = sorted(str(path.relative_to(data)) for path in data.rglob("*")
                     if path.is_file() and password.encode() in path.read_bytes())
    assert holders == ["valkey.password", "valkey/auth.conf"], holders
