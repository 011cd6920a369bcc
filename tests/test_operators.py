"""Named operators: made, listed and revoked by an admin (``/admin/operators``) and by the
command (``seckill operators``); a token shown once and kept only as its hash; a revoked one
refused at once; who is calling (``GET /admin/whoami``); the audit line of every operator
action, naming the operator; the levers still answering a named operator while the database
cannot be read. Real Valkey, a real database, the command in-process through its entry point.
Which role may call what: ``tests/test_operator_roles.py``; across gateway processes:
``tests/test_operators_instances.py``."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seckill import logs
from seckill.domain.operators import ADMIN as ADMIN_ROLE
from seckill.domain.operators import OPERATOR, VIEWER, Operator
from seckill.operator import trail
from tests.support.api import create_activity, expect
from tests.support.cli import seckill
from tests.support.database_faults import sqlite_away
from tests.support.operators import bearer, make_operator
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, METRICS, user_headers

TOKEN = re.compile(r"sko_[A-Za-z0-9_-]{43}")


def _add(client: Any, name: str, role: str, headers: dict[str, str] = ADMIN) -> Any:
    return client.post("/admin/operators", json={"name": name, "role": role}, headers=headers)


def _audit(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The structured fields of every audit line captured so far."""
    return [getattr(r, "fields") for r in caplog.records  # noqa: B009 (set by extra=)
            if r.name == "seckill.audit"]


def test_an_admin_makes_an_operator_whose_token_is_shown_once_and_kept_as_its_hash(
        client, database_url) -> None:
    made = expect(_add(client, "alice", OPERATOR), 201)
    token = made.pop("token")
    assert TOKEN.fullmatch(token), token
    assert made == {"name": "alice", "role": OPERATOR, "created_at": made["created_at"],
                    "created_by": "admin", "revoked_at": None, "revoked_by": None}
    assert expect(client.get("/admin/whoami", headers=bearer(token)), 200) == {
        "name": "alice", "role": OPERATOR}
    assert expect(client.get("/admin/whoami", headers=ADMIN), 200) == {
        "name": "admin", "role": ADMIN_ROLE}
    listed = expect(client.get("/admin/operators", headers=ADMIN), 200)["operators"]
    assert listed == [made]  # never the token, nor its hash

    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, token_hash FROM seckill_operators")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [("alice", hashlib.sha256(token.encode()).hexdigest())]
    if database_url.startswith("sqlite:///"):  # nowhere in the file, its journal included
        for suffix in ("", "-wal"):
            path = Path(database_url.removeprefix("sqlite:///") + suffix)
            if path.exists():
                assert token.encode() not in path.read_bytes()


def test_names_are_given_once_for_good(client) -> None:
    expect(_add(client, "bob", VIEWER), 201)
    taken = expect(_add(client, "bob", ADMIN_ROLE), 409, "operator_exists")
    assert taken["name"] == "bob"
    expect(client.delete("/admin/operators/bob", headers=ADMIN), 200)
    # Revoked, the name stays taken: the audit names one person by it.
    expect(_add(client, "bob", VIEWER), 409, "operator_exists")
    bootstrap = expect(_add(client, "admin", VIEWER), 409, "operator_exists")
    assert "SECKILL_ADMIN_TOKEN" in bootstrap["message"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x y", "role": VIEWER}, "name"),
    ({"name": "", "role": VIEWER}, "name"),
    ({"name": "a" * 65, "role": VIEWER}, "name"),
    ({"name": 7, "role": VIEWER}, "name"),
    ({"name": "cli:bob", "role": VIEWER}, "name"),  # the command's names cannot be taken
    ({"name": "carol", "role": "root"}, "role"),
    ({"name": "carol", "role": None}, "role"),
    ({"role": VIEWER}, "name"),
    ({"name": "carol"}, "role"),
])
def test_a_bad_operator_is_a_400_naming_the_field_and_nothing_is_made(client, body,
                                                                      field) -> None:
    refused = expect(client.post("/admin/operators", json=body, headers=ADMIN), 400,
                     "bad_request")
    assert refused["field"] == field, refused
    assert expect(client.get("/admin/operators", headers=ADMIN), 200)["operators"] == []


def test_unknown_fields_and_a_body_that_is_no_object_are_400(client) -> None:
    refused = expect(client.post("/admin/operators", json={"name": "d", "role": VIEWER,
                                                            "token": "mine"}, headers=ADMIN),
                     400, "bad_request")
    assert refused["fields"] == ["token"]  # nobody chooses their own token
    expect(client.post("/admin/operators", json=["d", VIEWER], headers=ADMIN), 400,
           "bad_request")


def test_a_revoked_token_is_refused_here_at_once(client) -> None:
    headers = make_operator(client, OPERATOR, "dave")
    aid = create_activity(client)["id"]
    expect(client.post(f"/admin/activities/{aid}/pause", headers=headers), 200)
    revoked = expect(client.delete("/admin/operators/dave", headers=ADMIN), 200)
    assert revoked["revoked_by"] == "admin" and revoked["revoked_at"] is not None
    for path in ("/admin/whoami", f"/admin/activities/{aid}"):
        expect(client.get(path, headers=headers), 401, "unauthenticated")
    expect(client.post(f"/admin/activities/{aid}/resume", headers=headers), 401,
           "unauthenticated")
    expect(client.delete("/admin/operators/dave", headers=ADMIN), 404, "unknown_operator")
    listed = expect(client.get("/admin/operators", headers=ADMIN), 200)["operators"]
    assert [(o["name"], o["revoked_by"]) for o in listed] == [("dave", "admin")]


def test_tokens_no_operator_holds_are_401(client) -> None:
    make_operator(client, ADMIN_ROLE, "erin")
    for token in ("sko_" + "A" * 43, "sko_", "sko_" + "A" * 200, "admin", "erin"):
        expect(client.get("/admin/whoami", headers=bearer(token)), 401, "unauthenticated")
    # The bootstrap admin is no named operator: its name cannot be revoked here.
    refused = expect(client.delete("/admin/operators/admin", headers=ADMIN), 404,
                     "unknown_operator")
    assert "SECKILL_ADMIN_TOKEN" in refused["message"]
    expect(client.delete("/admin/operators/not%20a%20name", headers=ADMIN), 400,
           "bad_request")


def test_any_operator_may_scrape_the_metrics_and_a_revoked_one_may_not(client) -> None:
    viewer = make_operator(client, VIEWER, "scrape-viewer")
    for headers in (viewer, ADMIN, METRICS):
        assert client.get("/metrics", headers=headers).status_code == 200
    expect(client.delete("/admin/operators/scrape-viewer", headers=ADMIN), 200)
    expect(client.get("/metrics", headers=viewer), 401, "unauthenticated")


def test_every_operator_action_writes_one_audit_line_naming_the_operator(
        client, caplog) -> None:
    caplog.set_level(logging.INFO, logger="seckill.audit")
    operator = make_operator(client, OPERATOR, "frank")
    viewer = make_operator(client, VIEWER, "grace")
    aid = create_activity(client)["id"]
    caplog.clear()
    expect(client.post(f"/admin/activities/{aid}/pause", headers=operator), 200)
    expect(client.post(f"/admin/activities/{aid}/stock", json={"add": 2}, headers=operator),
           200)
    expect(client.post(f"/admin/activities/{aid}/resume", headers=viewer), 403, "forbidden")
    expect(client.post("/admin/blocks", json={"user": "mallory", "reason": "secret words"},
                       headers=operator), 201)
    expect(client.post("/admin/orders/nosuch-1-1/cancel", headers=operator), 404,
           "unknown_order")
    expect(client.post(f"/admin/activities/{aid}/end", headers=ADMIN), 200)
    assert _audit(caplog) == [
        {"operator": "frank", "role": OPERATOR, "action": "activity.pause",
         "target": {"activity": aid}, "outcome": "ok"},
        {"operator": "frank", "role": OPERATOR, "action": "activity.restock",
         "target": {"activity": aid, "add": 2}, "outcome": "ok"},
        {"operator": "grace", "role": VIEWER, "action": "activities.resume",
         "target": {"role_needed": OPERATOR}, "outcome": "forbidden"},
        {"operator": "frank", "role": OPERATOR, "action": "block.add",
         "target": {"user": "mallory", "activity": None}, "outcome": "ok"},
        {"operator": "frank", "role": OPERATOR, "action": "order.cancel",
         "target": {"order": "nosuch-1-1"}, "outcome": "unknown_order"},
        {"operator": "admin", "role": ADMIN_ROLE, "action": "activity.end",
         "target": {"activity": aid}, "outcome": "ok"},
    ]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"audit: frank (operator) activity.pause activity={aid}: ok" in text
    assert "secret words" not in text and "sko_" not in text  # no free text, no token


def test_the_making_and_revoking_of_operators_is_in_the_trail_without_the_token(
        client, caplog) -> None:
    caplog.set_level(logging.INFO, logger="seckill.audit")
    admin = make_operator(client, ADMIN_ROLE, "heidi")
    caplog.clear()
    made = expect(_add(client, "ivan", VIEWER, admin), 201)
    expect(client.delete("/admin/operators/ivan", headers=admin), 200)
    assert [(f["operator"], f["action"], f["target"], f["outcome"]) for f in _audit(caplog)] == [
        ("heidi", "operator.add", {"operator": "ivan", "new_role": VIEWER}, "ok"),
        ("heidi", "operator.revoke", {"operator": "ivan"}, "ok")]
    assert made["token"] not in "\n".join(r.getMessage() for r in caplog.records)


def test_an_audit_line_in_json_carries_its_fields_and_is_never_collapsed() -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    keep = Keep()
    keep.setFormatter(logs.Formatter("gunicorn-1", as_json=True))
    collapse = logs.CollapseRepeats(keep, window=60, clock=lambda: 0.0)
    keep.addFilter(collapse)
    log = logging.getLogger("seckill.audit")
    log.addHandler(keep)
    try:
        for _ in range(2):  # the same action twice: two actions, two lines
            trail.write(Operator("judy", OPERATOR), "activity.pause", {"activity": "a1"}, "ok")
    finally:
        log.removeHandler(keep)
    assert len(lines) == 2, lines
    parsed = json.loads(lines[0])
    assert parsed["logger"] == "seckill.audit"
    assert parsed["message"] == "audit: judy (operator) activity.pause activity=a1: ok"
    assert parsed["fields"] == {"operator": "judy", "role": OPERATOR,
                                "action": "activity.pause", "target": {"activity": "a1"},
                                "outcome": "ok"}


def test_the_command_adds_lists_and_revokes_operators_and_the_gateway_follows(
        env, client) -> None:
    me = {**env, "SECKILL_OPERATOR": "ops-kim"}
    added = seckill("operators", "add", "kim", "--role", "operator", env=me)
    assert added.returncode == 0, added.stderr
    made = json.loads(added.stdout)
    assert (made["name"], made["role"], made["created_by"]) == ("kim", OPERATOR, "cli:ops-kim")
    assert TOKEN.fullmatch(made["token"])
    assert "shown this once" in added.stderr
    assert re.search(r" seckill-cli INFO audit: cli:ops-kim \(admin\) operator.add "
                     r"operator=kim new_role=operator: ok$", added.stderr, re.M), added.stderr
    assert made["token"] not in added.stderr
    kim = bearer(made["token"])
    # This process follows the database: the token works within a second.
    wait_until(lambda: client.get("/admin/whoami", headers=kim).status_code == 200, 1.0,
               what="the command's operator known here")

    listed = seckill("operators", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["name"], r["role"], r["revoked_at"]) for r in rows] == [("kim", OPERATOR, None)]
    assert made["token"] not in listed.stdout
    table = seckill("operators", "list", env=env).stdout.splitlines()
    assert table[0].split() == ["name", "role", "created_at", "created_by", "revoked_at",
                                "revoked_by"] and table[1].startswith("kim ")

    revoked = seckill("operators", "revoke", "kim", env=me)
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["revoked_by"] == "cli:ops-kim"
    wait_until(lambda: client.get("/admin/whoami", headers=kim).status_code == 401, 1.0,
               what="the revoked token refused here")

    again = seckill("operators", "revoke", "kim", env=env)
    assert again.returncode == 1 and again.stderr.startswith("seckill: unknown_operator: ")
    taken = seckill("operators", "add", "kim", "--role", "viewer", env=env)
    assert taken.returncode == 1 and taken.stderr.startswith("seckill: operator_exists: ")
    bad = seckill("operators", "add", "kim!", "--role", "viewer", env=env)
    assert bad.returncode == 2 and "name must match" in bad.stderr
    wrong = seckill("operators", "add", "x", "--role", "root", env=env)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
    who = seckill("operators", "add", "y", "--role", "viewer",
                  env={**env, "SECKILL_OPERATOR": "not a name"})
    assert who.returncode == 2 and "SECKILL_OPERATOR must match" in who.stderr


def test_a_named_operator_still_pulls_the_levers_while_the_database_cannot_be_read(
        make_app, private_valkey, tmp_path) -> None:
    """The operators' database away: the process keeps the operators it last read (the
    levers take effect in Redis first), and says so in its log."""
    database = tmp_path / "orders.db"
    app = make_app(REDIS_URL=private_valkey.url, DATABASE_URL=f"sqlite:///{database}")
    client = app.test_client()
    aid = create_activity(client)["id"]
    operator = make_operator(client, OPERATOR, "leo")
    expect(client.get("/admin/whoami", headers=operator), 200)  # this process has read them
    expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers("u1")), 200)
    watch = app.extensions["seckill"].operators
    with sqlite_away(database, watch.book.engine):
        wait_until(lambda: watch.failing, 3, what="the failing reading")
        assert expect(client.get("/admin/whoami", headers=operator), 200)["name"] == "leo"
        paused = client.post(f"/admin/activities/{aid}/pause", headers=operator)
        # Taken in the sale; the database's record of it may be what could not be written.
        assert paused.status_code in (200, 503), paused.get_json()
        if paused.status_code == 503:
            assert paused.get_json()["detail"] == "database", paused.get_json()
        # Paused in the sale: every process follows within a second, this one too.
        wait_until(lambda: client.get(f"/seckill/url?activity={aid}",
                                      headers=user_headers("u1")).status_code == 503, 1.0,
                   what="the pause heard here")
    wait_until(lambda: not watch.failing, 3, what="the database again")


def test_a_process_that_never_read_the_operators_answers_503_not_401(
        make_app, private_valkey, tmp_path) -> None:
    """Started while the database is away, a process cannot tell a named operator's token
    from a forged one: 503 ``unavailable`` (database), never a 401 that tells an operator
    their token is wrong; the bootstrap admin needs no reading at all."""
    database = tmp_path / "orders.db"
    first = make_app(REDIS_URL=private_valkey.url, DATABASE_URL=f"sqlite:///{database}")
    operator = make_operator(first.test_client(), OPERATOR, "mia")
    app = make_app(REDIS_URL=private_valkey.url, DATABASE_URL=f"sqlite:///{database}")
    client = app.test_client()
    watch = app.extensions["seckill"].operators
    with sqlite_away(database, watch.book.engine):
        refused = expect(client.get("/admin/whoami", headers=operator), 503, "unavailable")
        assert refused["detail"] == "database"
        expect(client.get("/admin/whoami", headers=ADMIN), 200)
    wait_until(lambda: client.get("/admin/whoami", headers=operator).status_code == 200, 3,
               what="the operators read once the database is back")
