"""The ``seckill`` command: token, activity and nginx render run in this process
(``tests.support.cli.seckill``); the installed script's smoke tests and the whole ``up`` stack
run as real processes (``seckill_process``, ``seckill_up``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import psutil
import pytest

from edge.identity import mint_user_token, user_from_jwt
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.ops.stack.ports import free_listen_port
from tests.support.api import buy
from tests.support.cli import (
    assert_one_line_error,
    call,
    clean_environ,
    seckill,
    seckill_process,
    seckill_up,
    stop_and_check_nothing_is_left,
    wait_healthy,
)
from tests.support.timing import iso
from tests.support.tokens import ADMIN, ADMIN_TOKEN, JWT_SECRET, URL_KEY

# -- the installed script, as a process -------------------------------------------------


def test_the_script_prints_its_help_and_exits_0() -> None:
    result = seckill_process("--help", env={})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: seckill "), result.stdout
    assert "activity" in result.stdout and result.stderr == ""


def test_python_dash_m_runs_the_same_command() -> None:
    result = subprocess.run([sys.executable, "-m", "seckill.ops.cli", "--help"],
                            env=clean_environ(), stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: seckill "), result.stdout


def test_the_script_refuses_an_unknown_command_with_exit_2() -> None:
    result = seckill_process("no-such-command", env={})
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "seckill: error: argument COMMAND: invalid choice: 'no-such-command'"), result.stderr


def test_the_script_says_a_missing_secret_in_one_line() -> None:
    assert_one_line_error(seckill_process("token", "alice", env={}), 2,
                          "SECKILL_JWT_SECRET is not set")


# -- the in-process runner is a process's equal ----------------------------------------


def test_the_runner_answers_as_the_process_does() -> None:
    """The same command through both: the same code, output and one-line error."""
    for args in (("no-such-command",), ("token", "alice"), ("nginx", "render", "--backend",
                                                            "nowhere")):
        here, there = seckill(*args, env={}), seckill_process(*args, env={})
        assert (here.returncode, here.stdout, here.stderr) == (
            there.returncode, there.stdout, there.stderr), args


def test_the_runner_puts_the_process_state_back(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """The environment, standard streams and logging are as they were after a command, even
    one that changes them; an exception escaping main() is raised, never taken for an exit
    code; SystemExit's codes read as a process's."""
    import logging

    import seckill.ops.cli as cli

    monkeypatch.setenv("SECKILL_SOMETHING", "kept")
    environ, streams = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def meddles(args: Any) -> int:
        assert "SECKILL_SOMETHING" not in os.environ and os.environ["SECKILL_JWT_SECRET"] == "s"
        assert sys.stdin.read() == ""
        os.environ["SECKILL_LOG_FORMAT"] = "json"
        logging.getLogger("seckill.meddling").addHandler(logging.StreamHandler(sys.stderr))
        logging.getLogger("seckill.meddling").warning("said on standard error")
        logging.getLogger("seckill.meddling").info("not said: a process's root is at WARNING")
        if args.uid == "boom":
            raise RuntimeError("unexpected")
        raise SystemExit(int(args.uid) if args.uid.isdigit() else args.uid)

    monkeypatch.setattr(cli, "cmd_token", meddles)
    said = seckill("token", "3", env={"SECKILL_JWT_SECRET": "s"})
    assert (said.returncode, said.stdout) == (3, "")
    assert said.stderr == "said on standard error\n" * 2  # its own handler, and the root's
    assert seckill("token", "a-message", env={"SECKILL_JWT_SECRET": "s"}).stderr.endswith(
        "a-message\n")
    with pytest.raises(RuntimeError, match="unexpected") as raised:
        seckill("token", "boom", env={"SECKILL_JWT_SECRET": "s"})
    assert "said on standard error" in "".join(raised.value.__notes__)
    assert dict(os.environ) == environ
    assert (sys.stdin, sys.stdout, sys.stderr) == streams
    assert (root.handlers, root.level) == (handlers, level)
    assert logging.getLogger("seckill.meddling").handlers == []
    with pytest.raises(AssertionError, match="seckill_process"):
        seckill("up", "--port", "1", env={})


# -- seckill token ---------------------------------------------------------------------


def test_token_verifies_with_the_jwt_secret() -> None:
    result = seckill("token", "alice@example.com", "--ttl", "120",
                     env={"SECKILL_JWT_SECRET": JWT_SECRET})
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    claims = jwt.decode(token, JWT_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "alice@example.com"
    assert claims["exp"] - claims["iat"] == 120
    assert abs(claims["iat"] - time.time()) < 30
    assert user_from_jwt(token, JWT_SECRET) == "alice@example.com"  # what the gateway runs
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, "another-secret-0123456789abcdef0123456789", algorithms=["HS256"])


def test_token_refuses_a_bad_user_id_and_a_missing_secret() -> None:
    bad = seckill("token", "not a user{}", env={"SECKILL_JWT_SECRET": JWT_SECRET})
    assert_one_line_error(bad, 2, "user id must match")
    assert bad.stdout == ""
    missing = seckill("token", "alice", env={})
    assert_one_line_error(missing, 2, "SECKILL_JWT_SECRET is not set")
    short = seckill("token", "alice", env={"SECKILL_JWT_SECRET": "short"})
    assert_one_line_error(short, 2, "at least 32 bytes")


# -- seckill activity ------------------------------------------------------------------


def test_activity_create_is_visible_through_the_app(env, client) -> None:
    created = seckill(
        "activity", "create", "--id", "cli-phone", "--name", "CLI phone", "--total", "3",
        "--starts-in", "-5", "--duration", "600", "--per-user-limit", "2", env=env,
    )
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert body["id"] == "cli-phone"
    assert (body["total"], body["remaining"], body["per_user_limit"]) == (3, 3, 2)
    assert body["state"] == "open"

    seen = client.get("/seckill/activities/cli-phone")
    assert seen.status_code == 200
    assert seen.get_json()["total"] == 3
    assert seen.get_json()["starts_at"] == body["starts_at"]
    bought = buy(client, "cli-phone", "bob", {"quantity": 2})
    assert bought.status_code == 200, bought.get_json()

    shown = seckill("activity", "show", "cli-phone", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["remaining"] == 1

    again = seckill("activity", "create", "--id", "cli-phone", "--name", "Again", "--total", "1",
                    "--duration", "60", env=env)
    assert_one_line_error(again, 1, "already exists")


def test_activity_create_unlimited_with_iso_times(env, client) -> None:
    starts, ends = iso(-60), iso(3600)
    created = seckill("activity", "create", "--id", "cli-free", "--name", "Free sample",
                      "--total", "unlimited", "--starts-at", starts, "--ends-at", ends, env=env)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["total"] is None
    seen = client.get("/seckill/activities/cli-free").get_json()
    assert seen["total"] is None and seen["remaining"] is None and seen["state"] == "open"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "neg", "--total", "-1", "--duration", "60"], "total must be between"),
        (["--id", "lots", "--total", "lots", "--duration", "60"], "integer or 'unlimited'"),
        (["--id", "a b", "--total", "1", "--duration", "60"], "id must match"),
        (["--id", "past", "--total", "1", "--starts-in", "-7200", "--duration", "60"],
         "ends_at is in the past"),
        (["--id", "naive", "--total", "1", "--starts-at", "2030-01-01T00:00:00",
          "--duration", "60"], "needs an offset"),
        (["--id", "greedy", "--total", "1", "--duration", "60", "--per-user-limit", "0"],
         "per_user_limit must be between"),
    ],
)
def test_activity_create_rejects_bad_input(env, args: list[str], message: str) -> None:
    result = seckill("activity", "create", "--name", "Bad", *args, env=env)
    assert_one_line_error(result, 2, message)
    assert result.stdout == ""
    aid = args[1]
    if re.fullmatch(r"[A-Za-z0-9_-]+", aid):
        shown = seckill("activity", "show", aid, env=env)
        # Not created: no such activity, or no database at all (the first write makes the
        # SQLite file; a read-only command never does).
        assert shown.returncode in (1, 2), shown.stdout
        assert "no activity" in shown.stderr or "no database at" in shown.stderr, shown.stderr


def test_activity_show_says_when_redis_is_unreachable(env, make_activity) -> None:
    make_activity()  # the database exists (a read-only command on a missing one says so)
    nowhere = {**env, "REDIS_URL": f"redis://127.0.0.1:{free_listen_port()}/0"}
    result = seckill("activity", "show", "anything", env=nowhere)
    assert_one_line_error(result, 1, "cannot reach Redis")


# -- seckill nginx render --------------------------------------------------------------


def test_nginx_render_writes_a_config_nginx_accepts(tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    result = seckill("nginx", "render", "--backend", "127.0.0.1:9001", "--backend",
                     "127.0.0.1:9002", "--port", "18080", "--admin-port", "18081",
                     "--run-dir", str(tmp_path / "run"), "-o", str(conf), env={})
    assert result.returncode == 0, result.stderr
    text = conf.read_text()
    assert "server 127.0.0.1:9001" in text and "server 127.0.0.1:9002" in text
    assert "127.0.0.1:18081" in text
    binary = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None
    )
    if binary is not None:  # the nginx tests proper need it; here it is a bonus check
        checked = subprocess.run([binary, "-t", "-c", str(conf)], capture_output=True,
                                 text=True, timeout=30, check=False)
        assert checked.returncode == 0, checked.stderr
    bad = seckill("nginx", "render", "--backend", "not-a-backend", env={})
    assert_one_line_error(bad, 2, "is not host:port")

    static = tmp_path / "static"
    static.mkdir()
    tuned = seckill("nginx", "render", "--backend", "127.0.0.1:9001", "--listen", "127.0.0.2",
                    "--ip-rate", "5r/s", "--ip-burst", "7", "--ip-connections", "3",
                    "--read-timeout", "4", "--static-root", str(static), "--access-log",
                    "--run-dir", str(tmp_path / "run"), env={})
    assert tuned.returncode == 0, tuned.stderr
    for line in ("listen 127.0.0.2:8080;", "rate=5r/s;", "limit_req zone=per_ip burst=7 nodelay;",
                 "limit_conn per_ip_conn 3;", "proxy_read_timeout 4s;", f"root {static};",
                 f"access_log {tmp_path / 'run'}/access.log seckill buffer=64k flush=1s;"):
        assert line in tuned.stdout, line


# -- seckill up ------------------------------------------------------------------------


def children_by_role(up: subprocess.Popen[bytes]) -> dict[str, psutil.Process]:
    roles: dict[str, psutil.Process] = {}
    for child in psutil.Process(up.pid).children():
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:  # gone, or a zombie not reaped yet
            continue
        if "valkey-server" in cmdline:
            roles["valkey"] = child
        elif "gunicorn" in cmdline:
            roles["gunicorn"] = child
        elif "seckill.worker" in cmdline:
            roles["worker"] = child
    return roles


def test_up_serves_a_purchase_restarts_a_dead_child_and_stops_clean(tmp_path: Path) -> None:
    env = {
        "SECKILL_ENV": "development",
        "SECKILL_DATA_DIR": str(tmp_path / "data"),
        "SECKILL_SECRET_KEY": URL_KEY,
        "SECKILL_JWT_SECRET": JWT_SECRET,
        "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
        "SECKILL_USER_RATE": "1000/second",
    }
    with seckill_up(tmp_path, env, "--workers", "1", "--no-nginx") as (up, port, log, seen):
        roles = children_by_role(up)
        assert set(roles) == {"valkey", "gunicorn", "worker"}, roles
        seen.extend(psutil.Process(up.pid).children(recursive=True))
        assert (tmp_path / "data" / "valkey" / "aof").is_dir()  # embedded, AOF, in the data dir

        admin = ADMIN["Authorization"].removeprefix("Bearer ")
        activity = {"id": "up-phone", "name": "Phone", "total": 10,
                    "starts_at": iso(-5), "ends_at": iso(600)}
        assert call(port, "POST", "/admin/activities", admin, activity)[0] == 201
        token = mint_user_token("alice", JWT_SECRET)
        status, issued = call(port, "GET", "/seckill/url?activity=up-phone", token)
        assert status == 200, issued
        status, bought = call(port, "POST", issued["url"], token)
        assert status == 200, bought
        deadline = time.monotonic() + 20  # the orders worker stores it in the database
        while time.monotonic() < deadline:
            status, order = call(port, "GET", "/seckill/up-phone/order", token)
            if order == {"status": "confirmed", "order_id": bought["order_id"]}:
                break
            time.sleep(0.2)
        assert order == {"status": "confirmed", "order_id": bought["order_id"]}

        # The CLI finds this up through its data folder: <data>/up.json, no secret in it.
        # (Checked first: a CLI that did not find it would fall back to 127.0.0.1:6379.)
        up_file = tmp_path / "data" / "up.json"
        assert up_file.is_file(), log.read_text()
        assert up_file.stat().st_mode & 0o777 == 0o600
        found = json.loads(up_file.read_text())
        assert found["pid"] == up.pid
        # The embedded Valkey's password is not in it: the CLI reads it from the data folder.
        assert found["redis_url"].startswith("redis://:***@127.0.0.1:")
        assert found["embedded"] is True
        assert found["database_url"] == f"sqlite:///{tmp_path / 'data' / 'seckill.db'}"
        shown = seckill("activity", "show", "up-phone",
                        env={"SECKILL_DATA_DIR": str(tmp_path / "data")})
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["remaining"] == 9

        # kill -9 the gunicorn instance: the supervisor says so and starts a new one.
        dead = roles["gunicorn"]
        dead.kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            fresh = children_by_role(up).get("gunicorn")
            if fresh is not None and fresh.pid != dead.pid:
                break
            time.sleep(0.1)
        assert fresh is not None and fresh.pid != dead.pid, log.read_text()
        wait_healthy(port, up, log, timeout=30)
        restarted = r"gunicorn-1 \(pid \d+\) exited with code -9 .*restarting"
        assert re.search(restarted, log.read_text()), log.read_text()
        assert call(port, "GET", "/seckill/activities/up-phone", token)[1]["remaining"] == 9

        stop_and_check_nothing_is_left(up, log, seen)
        assert not up_file.exists()  # removed on exit: no CLI takes a stopped up's Redis
        text = log.read_text()
        assert text.index("gunicorn-1 stopped") < text.index("orders-worker stopped") < text.index(
            "valkey stopped"
        )


def test_up_on_an_outside_redis_shares_printed_development_secrets(tmp_path: Path) -> None:
    """REDIS_URL given: no embedded Valkey. No secret given: ``up`` makes them up once and
    prints them, and every worker uses those (a URL signed by one worker is accepted by the
    other)."""
    outside = EmbeddedValkey(tmp_path / "outside-valkey")  # appendfsync always, like up's own
    env = {
        "SECKILL_ENV": "development",
        "SECKILL_DATA_DIR": str(tmp_path / "data"),
        "REDIS_URL": outside.url,
        "SECKILL_USER_RATE": "1000/second",
    }
    # --no-nginx: this is about secrets and an outside Redis; operator calls go to --port.
    # (Through nginx, with several instances: tests/test_up_nginx.py.)
    with outside, seckill_up(tmp_path, env, "--workers", "2", "--no-nginx") as (
        up, port, log, seen
    ):
        assert set(children_by_role(up)) == {"gunicorn", "worker"}  # no embedded Valkey
        exports = re.search(r"^  export (.*)$", log.read_text(), re.MULTILINE)
        assert exports is not None, log.read_text()
        printed = dict(pair.split("=", 1) for pair in exports.group(1).split())
        assert "REDIS_URL" not in printed  # the caller's own; only an embedded one is printed
        admin, secret = printed["SECKILL_ADMIN_TOKEN"], printed["SECKILL_JWT_SECRET"]
        assert len(secret) >= 32

        activity = {"id": "up-shared", "name": "Phone", "total": 20,
                    "starts_at": iso(-5), "ends_at": iso(600)}
        assert call(port, "POST", "/admin/activities", admin, activity)[0] == 201
        # Each urllib call is a new connection; two workers share the accepts.
        for i in range(12):
            token = mint_user_token(f"user{i}", secret)
            status, issued = call(port, "GET", "/seckill/url?activity=up-shared", token)
            assert status == 200, issued
            status, bought = call(port, "POST", issued["url"], token)
            assert status == 200, bought
        stop_and_check_nothing_is_left(up, log, seen)


def test_up_refuses_to_start_without_production_secrets(tmp_path: Path) -> None:
    result = seckill_process("up", "--port", str(free_listen_port()),
                             env={"SECKILL_DATA_DIR": str(tmp_path / "data")})
    assert_one_line_error(result, 2, "SECKILL_SECRET_KEY is not set")


def test_activity_create_with_shards_and_show_the_whole(env, client) -> None:
    created = seckill(
        "activity", "create", "--id", "cli-hot", "--name", "Hot", "--total", "8",
        "--duration", "600", "--shards", "4", env=env,
    )
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert (body["total"], body["remaining"], body["shards"]) == (8, 8, 4)
    for uid in ("a", "b", "c"):
        assert buy(client, "cli-hot", uid).status_code == 200
    shown = seckill("activity", "show", "cli-hot", env=env)
    assert shown.returncode == 0, shown.stderr
    assert (json.loads(shown.stdout)["total"], json.loads(shown.stdout)["remaining"]) == (8, 5)
    restocked = seckill("activity", "restock", "cli-hot", "4", env=env)
    assert restocked.returncode == 0, restocked.stderr
    assert json.loads(restocked.stdout)["remaining"] == 9
    refused = seckill("activity", "create", "--id", "cli-bad", "--name", "Bad", "--total", "8",
                      "--duration", "600", "--shards", "65", env=env)
    assert_one_line_error(refused, 2, "shards")
