"""``seckill webhooks add|list|remove|deliveries|replay``: the operator's endpoints
from the command line, the admin API's own actions, on a running gateway's stores.

Real servers: the session's Valkey, a SQLite file per test (a PostgreSQL schema when
``SECKILL_TEST_POSTGRES`` names a server), the ``seckill`` command as a process.
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
from typing import Any

import pytest
from standardwebhooks import Webhook

from seckill.domain.clock import iso_from_ms, now_ms
from tests.support.api import expect
from tests.support.cli import SECKILL, assert_one_line_error, clean_environ, seckill
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN
from tests.support.webhook_rows import deliveries_of, delivery, engine_of, event

pytestmark = pytest.mark.database

SHOP = "https://orders.shop.internal/hooks/seckill"


def test_endpoints_from_the_command_line_are_the_admin_apis(client, app, env):
    engine = engine_of(app)  # the running gateway's database
    made = seckill("webhooks", "add", SHOP, "--events", "order.created", "order.paid", env=env)
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert (shown["url"], shown["events"]) == (SHOP, ["order.created", "order.paid"])
    assert shown["secret"].startswith("whsec_")
    every = json.loads(seckill("webhooks", "add", "http://10.1.2.3:8080/h", env=env).stdout)
    assert every["events"] == ["*"]
    listed = expect(client.get("/admin/webhooks", headers=ADMIN), 200)["webhooks"]
    assert [e["id"] for e in listed] == [shown["id"], every["id"]]

    table = seckill("webhooks", "list", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["id", "url", "events", "backlog", "failed", "last_attempt"]
    assert lines[1].split()[:3] == [shown["id"], SHOP, "order.created,order.paid"]
    assert lines[2].split()[:4] == [every["id"], "http://10.1.2.3:8080/h", "*", "0"]
    rows = [json.loads(line) for line in
            seckill("webhooks", "list", "--json", env=env).stdout.splitlines()]
    assert rows == listed and "secret" not in rows[0]

    at = now_ms() - 60_000
    sent, sent_id = event(engine, "order.created", "o1", at)
    lost, lost_id = event(engine, "order.paid", "o1", at + 1)
    delivery(engine, shown["id"], sent, "order:o1", "delivered", attempts=1, last_ms=at + 5,
             last_code=200, done_ms=at + 5)
    delivery(engine, shown["id"], lost, "order:o1", "failed", attempts=30, last_ms=at + 9,
             last_code=502, done_ms=at + 9)
    failed = seckill("webhooks", "deliveries", shown["id"], "--status", "failed", env=env)
    assert failed.returncode == 0, failed.stderr
    out = failed.stdout.splitlines()
    assert out[0].split() == ["event_id", "type", "subject", "status", "attempts",
                              "last_attempt_at", "last_code", "next_attempt_at"]
    assert out[1].split()[:5] == [lost_id, "order.paid", "order:o1", "failed", "30"]
    assert len(out) == 2
    both = [json.loads(line)["event_id"] for line in seckill(
        "webhooks", "deliveries", shown["id"], "--json", env=env).stdout.splitlines()]
    assert both == [sent_id, lost_id]

    replayed = seckill("webhooks", "replay", shown["id"], "--since", iso_from_ms(at), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["replayed"] == 2
    assert [r["status"] for r in deliveries_of(engine, shown["id"])] == ["pending", "pending"]

    removed = seckill("webhooks", "remove", shown["id"], env=env)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["id"] == shown["id"]
    assert deliveries_of(engine, shown["id"]) == []
    assert_one_line_error(seckill("webhooks", "remove", shown["id"], env=env), 1,
                          "unknown_webhook")
    assert_one_line_error(seckill("webhooks", "deliveries", shown["id"], env=env), 1,
                          "unknown_webhook")
    assert_one_line_error(seckill("webhooks", "add", "ftp://x/y", env=env), 2, "url")
    assert_one_line_error(seckill("webhooks", "add", "https://u:p@x/y", env=env), 2, "url")
    assert_one_line_error(seckill("webhooks", "add", SHOP, "--events", "order.shipped",
                                  env=env), 2, "events")
    assert_one_line_error(seckill("webhooks", "add", SHOP, "--secret", "whsec_c2hvcnQ=",
                                  env=env), 2, "secret")
    assert_one_line_error(seckill("webhooks", "replay", every["id"], "--since", "yesterday",
                                  env=env), 2, "since")
    bad = seckill("webhooks", "deliveries", every["id"], "--status", "lost", env=env)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_the_read_commands_on_a_database_without_the_tables_list_nothing(env, tmp_path):
    import sqlite3

    bare = tmp_path / "old.db"
    sqlite3.connect(bare).close()  # a database of an older version: no webhook tables
    old = {**env, "DATABASE_URL": f"sqlite:///{bare}"}
    listed = seckill("webhooks", "list", env=old)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1:] == [] and "(no webhook endpoint)" in listed.stderr
    assert_one_line_error(seckill("webhooks", "deliveries", "ep_0123456789abcdef0123",
                                  env=old), 1, "unknown_webhook")


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A shop's endpoint: verifies each call with the endpoint's secret, records it, 204."""

    got: list[tuple[str, Any]] = []
    secret = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        verified = Webhook(self.secret).verify(body, dict(self.headers))
        self.got.append((self.headers["webhook-id"], verified))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def test_webhooks_run_sends_the_events_to_the_registered_endpoint_until_stopped(app, env):
    engine = engine_of(app)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
        made = json.loads(seckill("webhooks", "add", url, "--events", "order.paid",
                                  env=env).stdout)
        _Receiver.secret, _Receiver.got = made["secret"], []
        event(engine, "order.created", "o1", now_ms(), fanned=False)  # not subscribed
        _, paid_id = event(engine, "order.paid", "o1", now_ms(), fanned=False)
        dispatcher = subprocess.Popen([str(SECKILL), "webhooks", "run"],
                                      env=clean_environ(**env), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _Receiver.got, 20, what="the paid event at the endpoint")
            wait_until(lambda: deliveries_of(engine, made["id"])[0]["status"] == "delivered",
                       10, what="the delivery marked delivered")
        finally:
            dispatcher.send_signal(signal.SIGTERM)
            output, _ = dispatcher.communicate(timeout=30)
        assert dispatcher.returncode == 0, output.decode()[-2000:]
        assert [(i, b["type"]) for i, b in _Receiver.got] == [(paid_id, "order.paid")]
    finally:
        server.shutdown()
        server.server_close()
