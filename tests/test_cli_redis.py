"""Which Redis the ``seckill`` store commands use, and what the read-only ones leave behind.

Without ``REDIS_URL`` a command finds the running ``seckill up`` through the ``up.json`` in its
data folder, or exits 2 and says how to point it at one: it never falls back to
``redis://127.0.0.1:6379/0``. ``activity show`` and ``reconcile`` without ``--repair`` write
nothing, neither to Redis (counted with ``INFO commandstats`` on a Valkey of the test's own)
nor to the disk (no folder, no database file).

The commands run without ``REDIS_URL`` run in a network namespace of their own
(``unshare -rn``, its loopback down), so that even a command that did fall back could never
reach this machine's 127.0.0.1:6379; the test's Valkey is reached through its unix socket,
which a network namespace does not hide. Where ``unshare`` is not allowed, the commands that
could only read on a fallback run without it, the others are skipped.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.api import buy
from tests.support.cli import SECKILL, assert_one_line_error, clean_environ, seckill
from tests.support.tokens import user_headers

# Whatever refuses to fall back says how to point the command at a Redis.
HOW_TO_POINT = ("REDIS_URL is not set", "SECKILL_DATA_DIR", "seckill up")


@functools.cache
def _have_netns() -> bool:
    try:
        probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10,
                               check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def isolated(*args: str, env: dict[str, str], cwd: Path,
             may_write: bool = False) -> subprocess.CompletedProcess[str]:
    """``seckill *args`` in ``cwd`` with only ``env`` set, in a network namespace of its own.
    ``may_write``: the command would write if it fell back (skipped without ``unshare``)."""
    command = [str(SECKILL), *args]
    if _have_netns():
        command = ["unshare", "-rn", *command]
    elif may_write:
        pytest.skip("needs `unshare -rn` (user and network namespaces), so that a command "
                    "falling back to 127.0.0.1:6379 could never write to this machine's Redis")
    return subprocess.run(command, env=clean_environ(**env), cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture
def own_valkey() -> Iterator[EmbeddedValkey]:
    """A Valkey of this test's own (its command counts are this test's alone), on a free
    loopback port and on a unix socket (a short path: the limit is 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="skv-"))
    server = EmbeddedValkey(folder, appendfsync="everysec", extra_args=[
        "--unixsocket", str(folder / "v.sock"), "--unixsocketperm", "700"])
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def socket_url(server: EmbeddedValkey) -> str:
    return f"unix://{server.data_dir / 'v.sock'}?db=0"


@pytest.fixture
def probe(own_valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    """The test's one connection to its Valkey, open before any command runs."""
    client = redis.Redis.from_url(own_valkey.url, decode_responses=True)
    client.ping()
    yield client
    client.close()


def write_calls(client: redis.Redis) -> dict[str, int]:
    """Calls so far of every command that can change the data set (the server's ``@write``
    category, and the scripts, which may write)."""
    writes = {str(name) for name in client.command_list(category="write")}
    writes |= {"eval", "evalsha", "fcall"}
    stats: dict[str, Any] = client.info("commandstats")
    return {name: int(counts["calls"]) for key, counts in stats.items()
            if (name := key.removeprefix("cmdstat_")) in writes}


def connections(client: redis.Redis) -> int:
    return int(client.info("stats")["total_connections_received"])


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def write_up_file(data: Path, pid: int, redis_url: str, database_url: str,
                  key_prefix: str = "seckill") -> Path:
    """``<data>/up.json`` as a running ``seckill up`` writes it (see seckill/ops/stack/up.py)."""
    data.mkdir(parents=True, exist_ok=True)
    path = data / "up.json"
    path.write_text(json.dumps({"pid": pid, "redis_url": redis_url,
                                "database_url": database_url, "key_prefix": key_prefix}))
    return path


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# -- no REDIS_URL: a running `seckill up`, or exit 2 ----------------------------------------


@pytest.mark.parametrize(
    ("args", "may_write"),
    [
        (("activity", "show", "phone"), False),
        (("reconcile", "phone"), False),
        (("reconcile", "phone", "--repair"), True),
        (("activity", "restock", "phone", "5"), True),
        (("order", "cancel", "phone-1700000000000-000001"), True),
        (("activity", "create", "--id", "phone", "--name", "Phone", "--total", "1",
          "--duration", "60"), True),
    ],
)
def test_without_redis_url_or_a_running_up_a_command_exits_2_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...], may_write: bool
) -> None:
    empty = tmp_path / "anywhere"
    empty.mkdir()
    result = isolated(*args, env={}, cwd=empty, may_write=may_write)
    assert_one_line_error(result, 2, "no `seckill up` is running")
    for words in HOW_TO_POINT:
        assert words in result.stderr, result.stderr
    assert list(empty.iterdir()) == []  # no ./.seckill-data, no database file


def test_the_issue_case_database_url_set_redis_url_unset_exits_2(
    tmp_path: Path, database_url: str
) -> None:
    empty = tmp_path / "anywhere"
    empty.mkdir()
    result = isolated("activity", "show", "phone", env={"DATABASE_URL": database_url},
                      cwd=empty)
    assert_one_line_error(result, 2, "REDIS_URL is not set")
    assert list(empty.iterdir()) == []


def test_a_stale_up_file_is_refused_and_its_redis_never_contacted(
    tmp_path: Path, own_valkey: EmbeddedValkey, probe: redis.Redis
) -> None:
    data = tmp_path / "data"
    write_up_file(data, dead_pid(), socket_url(own_valkey), f"sqlite:///{tmp_path / 'o.db'}")
    before = connections(probe)
    result = isolated("activity", "show", "phone", env={"SECKILL_DATA_DIR": str(data)},
                      cwd=tmp_path)
    assert_one_line_error(result, 2, "is not running")
    for words in HOW_TO_POINT:
        assert words in result.stderr, result.stderr
    assert connections(probe) == before
    assert sorted(p.name for p in data.iterdir()) == ["up.json"]  # left as it was
    assert not (tmp_path / "o.db").exists()


def _cli_env(database_url: str, server: EmbeddedValkey, prefix: str) -> dict[str, str]:
    return {"REDIS_URL": socket_url(server), "DATABASE_URL": database_url,
            "SECKILL_KEY_PREFIX": prefix}


def test_the_cli_finds_a_running_up_through_its_data_folder(
    tmp_path: Path, own_valkey: EmbeddedValkey, probe: redis.Redis, prefix: str
) -> None:
    """up.json names the Redis, the database and the key prefix; the live pid is this test's.
    The default data folder is ./.seckill-data; SECKILL_DATA_DIR names another. (A SQLite
    file: in the command's network namespace a database server would be out of reach.)"""
    database_url = f"sqlite:///{tmp_path / 'orders.db'}"
    named = _cli_env(database_url, own_valkey, prefix)
    made = seckill("activity", "create", "--id", "phone", "--name", "Phone", "--total", "5",
                   "--duration", "600", env=named)
    assert made.returncode == 0, made.stderr
    home = tmp_path / "home"
    write_up_file(home / ".seckill-data", os.getpid(), named["REDIS_URL"], database_url, prefix)
    before = tree(home)

    shown = isolated("activity", "show", "phone", env={}, cwd=home)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["total"] == 5
    elsewhere = isolated("activity", "show", "phone", cwd=tmp_path,
                         env={"SECKILL_DATA_DIR": str(home / ".seckill-data")})
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert tree(home) == before

    restocked = isolated("activity", "restock", "phone", "2", env={}, cwd=home, may_write=True)
    assert restocked.returncode == 0, restocked.stderr
    assert probe.hget(f"{prefix}:{{phone}}:meta", "total") == "7"

    # A setting of one's own that contradicts the running up's: refused, not mixed.
    other = isolated("activity", "show", "phone", cwd=home,
                     env={"DATABASE_URL": f"sqlite:///{tmp_path / 'other.db'}"})
    assert_one_line_error(other, 2, "DATABASE_URL")
    assert "differs" in other.stderr
    assert not (tmp_path / "other.db").exists()


def test_the_up_file_keeps_no_password(tmp_path: Path) -> None:
    """``seckill up`` on a REDIS_URL with a password: up.json says where, not the password, and
    a command that finds it asks for REDIS_URL instead of guessing."""
    from seckill.ops.stack.up import find_running_up, write_up_file

    data = tmp_path / "data"
    data.mkdir()
    settings = Settings.from_env({
        "SECKILL_ENV": "development", "SECKILL_DATA_DIR": str(data),
        "DATABASE_URL": "postgresql://app:db-secret@db.internal/sales"})
    path = write_up_file(data, "redis://:redis-secret@cache.internal:6380/0", settings)
    assert path.stat().st_mode & 0o777 == 0o600
    assert "secret" not in path.read_text()
    running, _ = find_running_up(data)
    assert running is not None and running.pid == os.getpid()
    assert running.redis_url == "redis://:***@cache.internal:6380/0"

    result = isolated("activity", "show", "phone", env={"SECKILL_DATA_DIR": str(data)},
                      cwd=tmp_path)
    assert_one_line_error(result, 2, "set REDIS_URL")
    assert "keeps no password" in result.stderr


# -- read-only commands write nothing -------------------------------------------------------


@pytest.fixture
def sold(make_app: Any, own_valkey: EmbeddedValkey, env: dict[str, str]) -> dict[str, Any]:
    """An activity of 5 units on the test's own Valkey, 2 of them bought and stored in the
    database; returns the CLI's environment and the activity id."""
    from tests.support.orders import built_worker

    app = make_app(REDIS_URL=own_valkey.url)
    client = app.test_client()
    aid = f"a{uuid.uuid4().hex[:8]}"
    cli_env = {**env, "REDIS_URL": own_valkey.url}
    made = seckill("activity", "create", "--id", aid, "--name", "Phone", "--total", "5",
                   "--starts-in", "-5", "--duration", "600", env=cli_env)
    assert made.returncode == 0, made.stderr
    for uid in ("alice", "bob"):
        assert buy(client, aid, uid).status_code == 200
    with built_worker(Settings.from_env(cli_env), block_ms=50) as worker:
        for _ in range(50):
            worker.step()
            statuses = [client.get(f"/seckill/{aid}/order", headers=user_headers(uid))
                        .get_json()["status"] for uid in ("alice", "bob")]
            if statuses == ["confirmed", "confirmed"]:
                break
        assert statuses == ["confirmed", "confirmed"]
    return {"env": cli_env, "aid": aid}


def _lose_redis_copy(client: redis.Redis, prefix: str, aid: str) -> None:
    client.delete(*(f"{prefix}:{{{aid}}}:{part}"
                    for part in ("meta", "buyers", "cancelled", "orders")))


def test_activity_show_writes_nothing_even_when_redis_lost_the_activity(
    sold: dict[str, Any], probe: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    cli_env, aid = sold["env"], sold["aid"]
    files = tree(tmp_path)
    writes = write_calls(probe)
    shown = seckill("activity", "show", aid, env=cli_env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["remaining"] == 3
    assert write_calls(probe) == writes

    _lose_redis_copy(probe, prefix, aid)
    writes = write_calls(probe)
    lost = seckill("activity", "show", aid, env=cli_env)
    assert lost.returncode == 0, lost.stderr
    body = json.loads(lost.stdout)
    assert (body["id"], body["total"], body["remaining"]) == (aid, 5, 3)  # from the database
    assert "no copy" in lost.stderr and "--repair" in lost.stderr, lost.stderr
    assert write_calls(probe) == writes
    assert probe.exists(f"{prefix}:{{{aid}}}:meta") == 0  # still lost: nothing rebuilt
    assert tree(tmp_path) == files


def test_reconcile_without_repair_writes_nothing(
    sold: dict[str, Any], probe: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    cli_env, aid = sold["env"], sold["aid"]
    meta = f"{prefix}:{{{aid}}}:meta"
    probe.hset(meta, "remaining", 4)  # drift: one unit too many
    files = tree(tmp_path)
    writes = write_calls(probe)
    report = seckill("reconcile", aid, env=cli_env)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["differences"] == {
        "remaining": {"redis": 4, "database": 3}}
    assert write_calls(probe) == writes

    _lose_redis_copy(probe, prefix, aid)
    writes = write_calls(probe)
    lost = seckill("reconcile", aid, env=cli_env)
    assert "--repair" in lost.stdout + lost.stderr, (lost.stdout, lost.stderr)
    assert "Traceback" not in lost.stderr
    assert write_calls(probe) == writes
    assert probe.exists(meta) == 0
    assert tree(tmp_path) == files

    repaired = seckill("reconcile", aid, "--repair", env=cli_env)
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["action"] == "rebuilt"
    assert probe.hget(meta, "remaining") == "3"


@pytest.mark.parametrize("args", [("activity", "show", "phone"), ("reconcile", "phone")])
def test_a_read_only_command_on_a_missing_database_says_so_and_creates_nothing(
    tmp_path: Path, own_valkey: EmbeddedValkey, probe: redis.Redis, args: tuple[str, ...]
) -> None:
    writes = write_calls(probe)
    default = seckill(*args, env={"REDIS_URL": own_valkey.url,
                                  "SECKILL_DATA_DIR": str(tmp_path / "nothing")})
    assert_one_line_error(default, 2, "no database at")
    assert str(tmp_path / "nothing" / "seckill.db") in default.stderr
    named = seckill(*args, env={"REDIS_URL": own_valkey.url,
                                "DATABASE_URL": f"sqlite:///{tmp_path / 'no' / 'such.db'}"})
    assert_one_line_error(named, 2, "no database at")
    assert list(tmp_path.iterdir()) == []
    assert write_calls(probe) == writes


def test_read_only_services_refuse_every_write(
    own_valkey: EmbeddedValkey, probe: redis.Redis, database_url: str, prefix: str
) -> None:
    """The guard under the read-only commands: a write command never leaves the process, alone
    or in a pipeline; the database refuses writes too. And every command the guard lets
    through is one the server itself calls read-only."""
    import sqlalchemy as sa

    from seckill.services import Services
    from seckill.store.plumbing.readonly import (
        HANDSHAKE_COMMANDS,
        READ_COMMANDS,
        TOPOLOGY_COMMANDS,
        ReadOnlyRefused,
    )

    settings = Settings.from_env({"SECKILL_ENV": "development", "REDIS_URL": own_valkey.url,
                                  "DATABASE_URL": database_url, "SECKILL_KEY_PREFIX": prefix})
    writable = Services.build(settings)
    try:
        writable.book.activity_ids()  # the schema, made by a command that may write
    finally:
        writable.close()
    services = Services.build(settings, read_only=True)
    try:
        writes = write_calls(probe)
        assert services.client.exists(f"{prefix}:x") == 0
        assert services.book.activity_ids() == set()
        with pytest.raises(ReadOnlyRefused, match="SET"):
            services.client.set(f"{prefix}:x", 1)
        pipe = services.client.pipeline(transaction=False)
        pipe.hget(f"{prefix}:h", "a")
        pipe.hset(f"{prefix}:h", "a", "1")
        with pytest.raises(ReadOnlyRefused, match="HSET"):
            pipe.execute()
        with pytest.raises(ReadOnlyRefused, match="EVALSHA"):
            services.scripts.unlock(keys=[f"{prefix}:lock"], args=["t"])
        assert write_calls(probe) == writes
        with pytest.raises(sa.exc.DBAPIError), services.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM seckill_activities"))
    finally:
        services.close()
    reads = sorted(name.lower().replace(" ", "|") for name in READ_COMMANDS)
    info = probe.execute_command("COMMAND", "INFO", *reads)
    for name in reads:
        assert name in info, name
        flags, categories = info[name]["flags"], info[name]["acl_categories"]
        assert "write" not in flags, name
        assert "readonly" in flags or "@connection" in categories, (name, flags, categories)
    known = {str(name) for name in probe.command_list(pattern="*")}
    handshake = sorted(name.lower().replace(" ", "|") for name in HANDSHAKE_COMMANDS)
    assert len(set(handshake) & known) >= 4, known  # this server need not know every one
    info = probe.execute_command("COMMAND", "INFO", *(set(handshake) & known))
    for name, found in info.items():
        assert "write" not in found["flags"] and "@connection" in found["acl_categories"], name
    topology = sorted(name.lower().replace(" ", "|") for name in TOPOLOGY_COMMANDS)
    info = probe.execute_command("COMMAND", "INFO", *topology)
    for name in topology:
        categories = info[name]["acl_categories"]
        assert "write" not in info[name]["flags"], name
        assert not {"@write", "@dangerous", "@admin"} & set(categories), (name, categories)
