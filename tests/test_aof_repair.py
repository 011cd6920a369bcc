"""An AOF holding an incomplete transaction is never loaded.

A purchase script's writes reach the AOF as ``MULTI ... EXEC``. A crash can tear the last
``EXEC``; Valkey 8.1.8 then cuts only the partial command and leaves the open ``MULTI``, so the
*next* restart replays the torn transaction together with the next one (a stock counter
decremented twice). Real valkey-server from the wheel, real files; no mocks.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from seckill.ops.stack import aof
from seckill.ops.stack.cluster import up_cluster
from seckill.ops.stack.embedded import EmbeddedValkey, valkey_binary

# Several writes from one script: propagated to the AOF as MULTI ... EXEC.
BUY = """
redis.call('hincrby', KEYS[1], 'remaining', -1)
redis.call('hincrby', KEYS[1], 'sold', 1)
redis.call('sadd', KEYS[2], ARGV[1])
return 1
"""
EXEC = b"*1\r\n$4\r\nEXEC\r\n"


def buy(server: EmbeddedValkey, user: str) -> None:
    with redis.Redis.from_url(server.url) as conn:
        conn.eval(BUY, 2, "act", "buyers", user)


def state(server: EmbeddedValkey) -> tuple[dict[str, str], set[str], str | None]:
    with redis.Redis.from_url(server.url, decode_responses=True) as conn:
        return conn.hgetall("act"), conn.smembers("buyers"), conn.get("marker")


def sale(server: EmbeddedValkey, users: int) -> None:
    """An activity of 500 and ``users`` purchases, each one script (one transaction)."""
    with redis.Redis.from_url(server.url) as conn:
        conn.hset("act", mapping={"total": 500, "remaining": 500, "sold": 0})
    for number in range(users):
        buy(server, f"u{number}")


def last_incr(data_dir: Path) -> Path:
    """The last INCR file of the folder's manifest (the one a server appends to)."""
    manifest = data_dir / "aof" / "appendonly.aof.manifest"
    names = [line.split()[1] for line in manifest.read_text().splitlines()
             if line.split()[-1] == "i"]
    return data_dir / "aof" / names[-1]


def tear_last_exec(data_dir: Path) -> None:
    """Cut the file inside its last EXEC: what a crash mid-write leaves."""
    path = last_incr(data_dir)
    data = path.read_bytes()
    assert data.endswith(EXEC)
    path.write_bytes(data[: len(data) - 5])


def check_aof(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """valkey-check-aof on the folder's manifest (the server binary under that name)."""
    manifest = data_dir / "aof" / "appendonly.aof.manifest"
    return subprocess.run(["valkey-check-aof", str(manifest)], executable=valkey_binary(),
                          capture_output=True, text=True, timeout=30, check=False)


def plain_start(data_dir: Path) -> EmbeddedValkey:
    """valkey-server as today's main started it: straight, no repair before it loads."""
    server = EmbeddedValkey(data_dir)
    argv = [valkey_binary(), "--port", str(server.port), "--bind", server.host,
            "--dir", str(server.data_dir), "--daemonize", "no",
            "--logfile", str(server.logfile), "--appendonly", "yes",
            "--appendfsync", "always", "--appenddirname", "aof", "--save", ""]
    server.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.wait_ready()
    return server


def test_torn_tail_transaction_is_cut_and_stays_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedValkey(tmp_path / "v").start()
    try:
        sale(server, 3)
    finally:
        server.stop()
    tear_last_exec(server.data_dir)

    caplog.set_level(logging.INFO, logger="seckill.ops.stack.aof")
    server.start()
    try:
        # The torn purchase (u2) is absent, the earlier ones present.
        assert state(server) == ({"total": "500", "remaining": "498", "sold": "2"},
                                 {"u0", "u1"}, None)
        buy(server, "u9")
        server.kill()  # a crash: only what reached the AOF (fsync always) survives
        server.start()
        # Today's main: the torn MULTI swallows the next purchase: remaining 496, sold 4.
        assert state(server) == ({"total": "500", "remaining": "497", "sold": "3"},
                                 {"u0", "u1", "u9"}, None)
    finally:
        server.stop()
    checked = check_aof(server.data_dir)
    assert checked.returncode == 0, checked.stdout
    # Nothing lost silently: the original is kept beside the file, and the cut is logged.
    backups = list((server.data_dir / "aof").glob("*.torn-*"))
    assert len(backups) == 1 and backups[0].read_bytes().endswith(EXEC[:-5])
    said = [r.getMessage() for r in caplog.records if r.name == "seckill.ops.stack.aof"]
    assert any("MULTI" in line and "hincrby" in line and backups[0].name in line
               for line in said), said


@pytest.mark.parametrize("first", ["purchase", "single write"])
def test_torn_transaction_further_up_is_dropped_later_writes_kept(
    tmp_path: Path, first: str, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "v"
    server = EmbeddedValkey(data_dir).start()
    try:
        sale(server, 3)
    finally:
        server.stop()
    tear_last_exec(data_dir)
    # The folder today's main leaves: restarted once over the torn tail, then written to.
    old = plain_start(data_dir)
    try:
        if first == "purchase":
            buy(old, "u10")  # MULTI, SELECT 0, ... EXEC right after the open MULTI
        with redis.Redis.from_url(old.url) as conn:
            conn.set("marker", "kept")  # SELECT 0, SET (if first) ...
        buy(old, "u11")
    finally:
        old.stop()
    assert check_aof(data_dir).returncode != 0  # the open MULTI is now mid-file

    caplog.set_level(logging.INFO, logger="seckill.ops.stack.aof")
    server = EmbeddedValkey(data_dir).start()
    try:
        later = 2 if first == "purchase" else 1
        buyers = {"u0", "u1", "u11"} | ({"u10"} if first == "purchase" else set())
        # Today's main replays the torn purchase merged into the next transaction.
        assert state(server) == ({"total": "500", "remaining": str(498 - later),
                                  "sold": str(2 + later)}, buyers, "kept")
    finally:
        server.stop()
    checked = check_aof(data_dir)
    assert checked.returncode == 0, checked.stdout
    said = [r.getMessage() for r in caplog.records if r.name == "seckill.ops.stack.aof"]
    assert any("4 command(s)" in line for line in said), said  # MULTI hincrby hincrby sadd


def test_cluster_node_supervised_start_repairs(tmp_path: Path) -> None:
    # A torn AOF made by a plain server, put into one node's folder of a new cluster folder.
    donor = EmbeddedValkey(tmp_path / "donor").start()
    try:
        sale(donor, 3)
    finally:
        donor.stop()
    tear_last_exec(donor.data_dir)
    env = {**os.environ, "SECKILL_LOG_FORMAT": "text", "SECKILL_ENV": "development",
           "SECKILL_DATA_DIR": str(tmp_path)}
    _, _, specs = up_cluster(tmp_path / "cluster", 3, 0, env)
    spec = specs[0]
    port = int(spec.name.split("-")[1])
    node_dir = tmp_path / "cluster" / f"node-{port}"
    (donor.data_dir / "aof").rename(node_dir / "aof")

    # The argv the supervisor runs at the first start and at every restart.
    process = subprocess.Popen(list(spec.argv), env=dict(spec.env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        node = EmbeddedValkey(node_dir, port=port)
        node.process = process
        node.wait_ready(20)
        with redis.Redis(port=port) as conn:
            assert conn.dbsize() == 2  # act and buyers
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    checked = check_aof(node_dir)
    assert checked.returncode == 0, checked.stdout + err.decode()
    assert b"seckill.ops.stack.aof" in err or b"torn" in err, err
    assert list((node_dir / "aof").glob("*.torn-*"))


# -- the pure repair function ------------------------------------------------------------


def resp(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        raw = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def transaction(number: int) -> list[bytes]:
    return [resp("MULTI"), resp("HINCRBY", "act", "remaining", "-1"),
            resp("SADD", "buyers", f"u{number}"), resp("EXEC")]


def test_repair_cases() -> None:
    head = resp("SELECT", "0") + resp("SET", "a", "1")
    good = b"".join(transaction(1))
    torn = b"".join(transaction(2)[:2])
    assert aof.repair(head + good).data == head + good
    assert aof.repair(head + good).cuts == ()
    # The tail: an open MULTI (complete or partial last command) goes back to before it.
    for cut in range(1, len(torn) + 1):
        assert aof.repair(head + good + torn[:cut]).data == head + good
    # A partial last command outside a transaction.
    assert aof.repair(head + resp("SET", "b", "2")[:-3]).data == head
    # Further up, the restart wrote MULTI SELECT ... (a purchase) or SELECT SET (one write).
    after = resp("MULTI") + resp("SELECT", "0") + resp("SADD", "buyers", "u3") + resp("EXEC")
    assert aof.repair(head + good + torn + after).data == head + good + after
    single = resp("SELECT", "0") + resp("SET", "m", "1")
    assert aof.repair(head + torn + single + good).data == head + single + good
    assert aof.repair(head + torn + single).data == head + single
    repaired = aof.repair(head + torn + single)
    assert [c[0] for c in repaired.cuts[0].commands] == [b"MULTI", b"HINCRBY"]
    assert repaired.cuts[0].start == len(head)
    # A transaction's own SELECT (right after MULTI) is part of it, not a restart.
    own = resp("MULTI") + resp("SELECT", "0") + resp("SET", "x", "1")
    assert aof.repair(head + own).data == head
    # Two crashes, two torn transactions, each followed by a restart's writes.
    torn2 = b"".join(transaction(5)[:3])
    assert (aof.repair(head + torn + single + good + torn2 + after).data
            == head + single + good + after)
    # An annotation line (aof-timestamp-enabled) is not a command.
    stamped = b"#TS:1795285406\r\n" + good
    assert aof.repair(head + stamped).cuts == ()
    with pytest.raises(aof.AofFormatError):
        aof.repair(head + b"+OK\r\n" + good)


OPS = st.lists(st.one_of(
    st.tuples(st.just("set"), st.integers(0, 9)),
    st.tuples(st.just("tx"), st.integers(1, 4)),
), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, cut_at=st.floats(0, 1), restarts=st.booleans())
def test_repair_property(ops: list[tuple[str, int]], cut_at: float, restarts: bool) -> None:
    """Random writes and transactions, cut at a random byte (and, if ``restarts``, followed
    by what a server writes after loading it: the repaired output parses, every MULTI has its
    EXEC, the complete transactions before the cut are kept."""
    chunks = [resp("SELECT", "0")]
    for number, (kind, size) in enumerate(ops):
        if kind == "set":
            chunks.append(resp("SET", f"k{size}", str(number)))
        else:
            chunks.append(b"".join([resp("MULTI"), *(resp("INCR", f"n{number}")
                                                     for _ in range(size)), resp("EXEC")]))
    data = b"".join(chunks)
    cut = int(len(data) * cut_at)
    torn = data[:cut]
    complete = [chunk for chunk, end in zip(chunks, _ends(chunks), strict=True) if end <= cut]
    later = resp("MULTI") + resp("SELECT", "0") + resp("INCR", "late") + resp("EXEC")
    if restarts:
        # Today's valkey cut only the partial command, then the next session appended.
        kept = torn[: aof.parse(torn)[1]]
        # Cut right after a MULTI: its own SELECT or the next session's? Taken as its own
        # (the transaction is dropped whole), so the writes up to the next MULTI go too.
        ambiguous = kept.endswith(resp("MULTI"))
        torn = kept + resp("SELECT", "0") + resp("SET", "after", "1") + later
    repaired = aof.repair(torn).data
    commands, parsed = aof.parse(repaired)
    assert parsed == len(repaired)
    depth = 0
    for command in commands:
        if command.name == b"MULTI":
            assert depth == 0
            depth = 1
        elif command.name == b"EXEC":
            assert depth == 1
            depth = 0
    assert depth == 0
    assert repaired.startswith(b"".join(complete))
    if restarts:
        assert repaired.endswith(later if ambiguous else
                                 resp("SELECT", "0") + resp("SET", "after", "1") + later)
    assert aof.repair(repaired).cuts == ()  # a repaired file needs nothing more


def _ends(chunks: list[bytes]) -> list[int]:
    total, ends = 0, []
    for chunk in chunks:
        total += len(chunk)
        ends.append(total)
    return ends


def test_wrapper_repairs_then_becomes_the_server(tmp_path: Path) -> None:
    """``EmbeddedValkey.command()`` (what the supervisor runs): repair, then exec the server
    in the same process (the pid the supervisor watches is the server's)."""
    server = EmbeddedValkey(tmp_path / "v").start()
    try:
        sale(server, 2)
    finally:
        server.stop()
    tear_last_exec(server.data_dir)
    started = time.monotonic()
    process = subprocess.Popen(server.command(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "SECKILL_LOG_FORMAT": "text"})
    try:
        server.process = process
        server.wait_ready(20)  # checks INFO's process_id is this pid
        assert state(server)[0]["sold"] == "1"
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    assert time.monotonic() - started < 15
    assert b"WARNING" in err and b"torn" in err, err


def test_cli_aof_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``seckill aof repair``: refuses while a server appends to the file, repairs a stopped
    server's folder found under a parent folder, then valkey-check-aof finds it valid."""
    from seckill.ops.cli import main

    data_dir = tmp_path / "data" / "valkey"
    server = EmbeddedValkey(data_dir).start()
    try:
        sale(server, 2)
        assert main(["aof", "repair", str(tmp_path)]) == 1  # the server holds the file open
    finally:
        server.stop()
    tear_last_exec(data_dir)
    assert check_aof(data_dir).returncode != 0
    assert main(["aof", "repair", str(tmp_path), "--dry-run"]) == 0
    assert check_aof(data_dir).returncode != 0  # a dry run writes nothing
    assert main(["aof", "repair", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "incr.aof: 1 cut(s)" in out and "valkey-check-aof: valid" in out, out
    assert check_aof(data_dir).returncode == 0
