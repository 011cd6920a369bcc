"""The drill's gray faults (seckill/ops/drill/gray.py): each invariant fails on a made-up
timeline that breaks it and holds on one that does not; the database faults' own processes
(a SQLite write lock, a TCP proxy) freeze and stop for real; the chart's names never overlap."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from seckill.config import ConfigError
from seckill.ops.drill.chart import drawing, label_rows, text_width
from seckill.ops.drill.checks import StoredRow, none_is_final
from seckill.ops.drill.crowd import Record
from seckill.ops.drill.dbfaults import Proxy, WriteLock
from seckill.ops.drill.gray import (
    Lever,
    Probe,
    Window,
    database_bounded,
    disk_full_refuses,
    followed_new_master,
    gets_moved_away,
    levers_hold,
)
from seckill.ops.drill.main import selected_faults
from seckill.ops.stack.ports import free_listen_port


def buy(at: float, status: int, error: str = "", detail: str = "", aid: str = "a",
        uid: str = "u", answered: float | None = None) -> Record:
    return Record(at, "x", "buy", status, error, uid, aid, detail=detail,
                  answered=at + 0.01 if answered is None else answered)


def url(at: float, status: int, error: str = "") -> Record:
    return Record(at, "x", "url", status, error, "u", "a")


# -- unknown outcomes ----------------------------------------------------------------------


def test_a_none_that_later_becomes_an_order_fails() -> None:
    early = {("a", "u1"): (5.0, {"status": "none"}), ("a", "u2"): (6.0, {"status": "none"}),
             ("a", "u3"): (6.0, {"status": "pending", "order_id": "a-3"})}
    fine = none_is_final(early, {("a", "u1"): {"status": "none"}}, {"a": []})
    assert fine.ok is True
    by_status = none_is_final(early, {("a", "u1"): {"status": "confirmed", "order_id": "a-1"}},
                              {"a": []})
    assert by_status.ok is False and "a/u1" in by_status.detail
    # The database holds it though the final status did not say so (by the account).
    stored = {"a": [StoredRow("a-2", "a", "p:key", "confirmed", account="u2")]}
    by_row = none_is_final(early, {}, stored)
    assert by_row.ok is False and "a-2" in by_row.detail
    # A person's order made by another of their accounts: every account's status names it,
    # but the one whose purchase said none made nothing.
    person = {"a": [StoredRow("a-9", "a", "p:key", "confirmed", account="u7")]}
    other = none_is_final(early, {("a", "u1"): {"status": "confirmed", "order_id": "a-9"}},
                          person)
    assert other.ok is True, other.detail
    own = none_is_final(early, {("a", "u1"): {"status": "confirmed", "order_id": "a-9"}},
                        {"a": [StoredRow("a-9", "a", "p:key", "confirmed", account="u1")]})
    assert own.ok is False and "a-9" in own.detail


# -- a frozen master --------------------------------------------------------------------


def test_purchases_lost_a_second_after_the_failover_fail() -> None:
    window = Window("freeze-valkey", 10.0, 22.0, info={
        "failover": True, "failover_at": 12.5, "node": "v", "node_timeout": 2.0})
    early = [buy(11.0, 504, "gateway_timeout"), buy(15.4, 0, "timeout")]  # before the bound
    fine = followed_new_master([window], [*early, buy(15.5, 200)], "a")
    assert fine.ok is True and "+2.9 s" in fine.detail
    late = followed_new_master([window], [*early, buy(15.6, 503, "unavailable")], "a")
    assert late.ok is False and "503" in late.detail and "failover 2.5 s" in late.detail
    other = followed_new_master([window], [buy(16.0, 503, "unavailable", aid="b")], "a")
    assert other.ok is True  # another master's activity: not this check's
    never = Window("freeze-valkey", 10.0, 22.0, info={"failover": True, "node": "v"})
    assert followed_new_master([never], [buy(14.0, 200)], "a").ok is False
    single = Window("freeze-valkey", 10.0, 22.0, info={"failover": False})
    assert followed_new_master([single], [buy(14.0, 0, "timeout")], "a").ok is None


# -- a frozen instance ------------------------------------------------------------------


def test_a_get_lost_while_an_instance_is_frozen_fails() -> None:
    window = Window("freeze-instance", 10.0, 22.0, info={"nginx": True})
    good = [url(11.0, 200), url(12.0, 410, "sold_out"), buy(12.0, 504, "gateway_timeout")]
    assert gets_moved_away([window], good).ok is True
    bad = gets_moved_away([window], [*good, url(15.0, 504, "gateway_timeout")])
    assert bad.ok is False and "504" in bad.detail
    assert gets_moved_away([window], [url(23.0, 0, "timeout")]).ok is True  # after it
    no_nginx = Window("freeze-instance", 10.0, 22.0, info={"nginx": False})
    assert gets_moved_away([no_nginx], good).ok is None


# -- a full disk ------------------------------------------------------------------------


def full(resumed: float | None = 2.0, gave_up: bool = False) -> Window:
    return Window("disk-full", 10.0, 18.0, info={"resumed_after": resumed, "gave_up": gave_up,
                                                 "running": True})


def test_a_full_disk_must_refuse_503_storage_and_recover() -> None:
    during = [buy(11.0, 503, "unavailable", "storage"), buy(12.0, 410, "sold_out"),
              buy(12.5, 200)]
    assert disk_full_refuses([full()], during).ok is True
    assert disk_full_refuses([full()], [*during, buy(13.0, 500, "internal")]).ok is False
    assert disk_full_refuses([full()], [*during, buy(13.0, 503, "unavailable")]).ok is False
    assert disk_full_refuses([full()], [*during, buy(13.0, 0, "timeout")]).ok is False
    assert disk_full_refuses([full()], [*during, buy(13.0, 503, "unavailable",
                                                   "NotSent")]).ok is False
    # A lost reply: an error on one server; on a cluster, a node the disk stopped.
    lost = buy(13.0, 503, "unavailable", "ConnectionError")
    assert disk_full_refuses([full()], [*during, lost]).ok is False
    on_cluster = full()
    on_cluster.info["cluster"] = True
    counted = disk_full_refuses([on_cluster], [*during, lost])
    assert counted.ok is True and "1 ConnectionError" in counted.detail
    assert disk_full_refuses([on_cluster], [*during, buy(13.0, 500, "internal")]).ok is False
    # Decided as the append failed, and said so: its status tells (an unknown outcome).
    assert disk_full_refuses([full()], [*during, buy(13.0, 503, "unavailable",
                                                   "durability")]).ok is True
    assert disk_full_refuses([full(resumed=None)], during).ok is False
    assert disk_full_refuses([full(gave_up=True)], during).ok is False
    # Sent while full, answered once the disk had room again: the replica the disk stopped is
    # still restarting, and nothing is full to blame; refused before anything was decided.
    for kind in ("no_replica", "NotSent", "ClusterDownError"):
        late = buy(17.9, 503, "unavailable", kind, answered=18.2)
        assert disk_full_refuses([full()], [*during, late]).ok is True
        assert disk_full_refuses([full()], [*during, buy(17.9, 503, "unavailable", kind,
                                                       answered=17.95)]).ok is False
    assert disk_full_refuses([full()], [*during, buy(17.9, 500, "internal",
                                                   answered=18.2)]).ok is False
    assert disk_full_refuses([full()], [*during, buy(17.9, 0, "timeout",
                                                   answered=18.2)]).ok is False
    not_run = Window("disk-full", 1.0, 1.0, not_run="not root")
    skipped = disk_full_refuses([not_run], during)
    assert skipped.ok is None and "not root" in skipped.detail


# -- the database away ------------------------------------------------------------------


def test_a_database_away_must_answer_in_bound_and_keep_selling() -> None:
    window = Window("database-hang", 10.0, 22.0)
    probes = [Probe("healthz", 11.0, 0.3, 503, "unavailable", "{'database': 'hung'}"),
              Probe("activities list", 11.3, 4.0, 503, "unavailable", "{'detail': 'database'}")]
    sales = [buy(12.0, 200), buy(13.0, 409, "already_purchased")]
    assert database_bounded([window], probes, sales).ok is True
    slow = [*probes, Probe("healthz", 12.0, 9.5, 503, "unavailable", "database")]
    assert database_bounded([window], slow, sales).ok is False
    crash = [*probes, Probe("activities list", 12.0, 0.1, 500, "internal", "{}")]
    assert database_bounded([window], crash, sales).ok is False
    assert database_bounded([window], probes, [*sales, buy(14.0, 0, "timeout")]).ok is False
    assert database_bounded([window], probes, [buy(14.0, 503, "unavailable", "storage")]
                            ).ok is False  # nothing decided while it was away


def test_levers_while_the_database_hangs() -> None:
    window = Window("database-hang", 10.0, 22.0)
    ends_at = "2026-11-29T07:00:00+00:00"
    ends_ms = 1795935600000
    levers = [Lever("pause", 11.0, 0.2, 200, {}), Lever("resume", 13.0, 0.3, 200, {}),
              Lever("end", 15.0, 0.4, 200, {"ends_at": ends_at})]
    settled = {"database": {"paused": False, "ends_ms": ends_ms},
               "sale": {"state": "ended", "ends_at": ends_at}}
    decided = {"a-1": ends_ms - 5, "a-2": ends_ms}
    assert levers_hold([window], levers, settled, [], decided).ok is True
    slow = [*levers[:2], Lever("end", 15.0, 7.0, 200, {"ends_at": ends_at})]
    assert levers_hold([window], slow, settled, [], decided).ok is False
    half = [*levers[:2], Lever("end", 15.0, 1.0, 503, {"error": "unavailable",
                                                       "ends_at": ends_at})]
    assert levers_hold([window], half, settled, [], decided).ok is True  # 503 is bounded too
    paused = {**settled, "database": {"paused": True, "ends_ms": ends_ms}}
    assert levers_hold([window], levers, paused, [], decided).ok is False  # pause won
    late = levers_hold([window], levers, settled, [], {**decided, "a-3": ends_ms + 1})
    assert late.ok is False and "a-3" in late.detail
    moved = {**settled, "database": {"paused": False, "ends_ms": ends_ms + 900}}
    assert levers_hold([window], levers, moved, [], decided).ok is False


# -- selection ---------------------------------------------------------------------------


def test_faults_are_chosen_by_set_or_name() -> None:
    assert selected_faults("classic")[-1] == "restart"
    assert selected_faults("gray")[-1] == "database-hang"
    assert selected_faults("database-hang,freeze-valkey") == ["freeze-valkey", "database-hang"]
    assert selected_faults("all")[-1] == "restart" and "disk-full" in selected_faults("all")
    with pytest.raises(ConfigError):
        selected_faults("freeze-everything")


# -- the chart ---------------------------------------------------------------------------


def test_fault_names_on_the_chart_never_overlap() -> None:
    names = [(100.0 + 9 * n, f"fault number {n}") for n in range(12)]
    rows = label_rows(names)
    placed = list(zip(names, rows, strict=True))
    for (x1, t1), r1 in placed:
        for (x2, t2), r2 in placed:
            if (x1, t1) < (x2, t2) and r1 == r2:
                assert x1 + text_width(t1) <= x2 or x2 + text_width(t2) <= x1
    shapes, _ = drawing([(f"f{n}", 1.0 + n, 3.0 + n) for n in range(8)],
                        [buy(1.0, 200), url(1.0, 200)])
    texts = [s.text for s in shapes if s.kind == "text"]
    assert "answers / second" in texts and "purchases (POST)" in texts
    assert "URL requests (GET)" in texts and "refused" in texts and "error" in texts


# -- the database faults' processes ------------------------------------------------------


def test_the_write_lock_holds_writers_while_frozen(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (v INTEGER)")
    lock = WriteLock(path)
    lock.freeze()
    try:
        writer = sqlite3.connect(path, timeout=0.5)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            writer.execute("INSERT INTO t VALUES (1)")
        writer.close()
    finally:
        lock.release()
    with sqlite3.connect(path, timeout=2) as conn:
        conn.execute("INSERT INTO t VALUES (1)")


def echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(100):
            conn.sendall(data)


def echo_server() -> tuple[int, threading.Event]:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], done


def test_the_proxy_forwards_hangs_when_frozen_and_refuses_when_stopped() -> None:
    port, done = echo_server()
    proxy = Proxy(free_listen_port(), "127.0.0.1", port)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as conn:
            conn.sendall(b"ping")
            assert conn.recv(10) == b"ping"
            proxy.freeze()
            conn.sendall(b"hung")
            conn.settimeout(0.5)
            with pytest.raises(TimeoutError):
                conn.recv(10)
            proxy.thaw()
            conn.settimeout(2)
            assert conn.recv(10) == b"hung"
        proxy.stop()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        proxy.start_again()
        deadline = time.monotonic() + 5
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as conn:
            conn.sendall(b"back")
            assert conn.recv(10) == b"back" and time.monotonic() < deadline
    finally:
        proxy.close()
        done.set()
