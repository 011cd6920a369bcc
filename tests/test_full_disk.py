"""A full data disk, for real: ``seckill up`` with its data folder on a small tmpfs, filled
with a file until the kernel says ENOSPC, then freed.

While it is full, purchases answer 503 ``unavailable`` with ``"detail": "storage"``, nothing
gives up (the supervisor keeps every child, for longer than its old crash-loop limit), no
gunicorn worker dies of its metrics' files, and the console and ``/metrics`` say why; once the
file is gone, sales resume by themselves. Mounting needs root: in CI (``CI`` set) the test
fails without it, elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from flask import Flask

from seckill.config import Settings
from seckill.ops.stack.cluster import up_cluster
from seckill.ops.stack.embedded import EmbeddedValkey, FsyncKeeper
from seckill.ops.stack.supervisor import ChildSpec, Supervisor
from seckill.store.plumbing.storage import available_bytes
from seckill.web.app import create_app
from tests.support.api import buy, create_activity, order_status
from tests.support.cli import call
from tests.support.gateway import gateway_env
from tests.support.orders import dedicated_valkey, stop_worker_process, worker_process
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, ADMIN_TOKEN, user_headers
from tests.support.upstack import UpStack, running_up, user_token

# More than the room under which Valkey runs everysec (seckill.ops.stack.embedded.ROOM_FLOOR_BYTES).
DISK_SIZE = "160m"
# Longer than the old supervisor's crash-loop limit (6 quick deaths, about 15 s of backoff).
FULL_FOR_SECONDS = 25.0


def require_root() -> None:
    """Mounting a small filesystem needs root: a failure in CI, a skip elsewhere."""
    if os.geteuid() == 0:
        return
    message = "mounting a small tmpfs for the data folder needs root"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (in CI this test must run)", pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def small_disk(where: Path, size: str = DISK_SIZE) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``where``, unmounted on the way out."""
    require_root()
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                    str(where)], check=True)
    try:
        yield where
    finally:
        # Lazily, in case a process the test saw die still holds a file open there.
        subprocess.run(["umount", "--lazy", str(where)], check=False)


def fill(disk: Path, pause: float = 0.0) -> Path:
    """Write zeros to a file on ``disk`` until the kernel refuses (ENOSPC), ``pause`` seconds
    between MiBs (0: at once); its path."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as out:
        for _ in range(4096):  # bounded: far more than the disk holds
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
            time.sleep(pause)
        else:
            raise AssertionError("the disk never filled")
    # Fill the last partial chunk's room too, byte-sized steps of a page.
    with open(filler, "ab", buffering=0) as out, contextlib.suppress(OSError):
        for _ in range(256):
            out.write(b"\0" * 4096)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def get_text(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` with the operator's token: the status and the body as text."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, repr(exc)


class Buyers:
    """A new buyer per purchase, each with their own purchase URL, through nginx."""

    def __init__(self, stack: UpStack, aid: str) -> None:
        self.stack = stack
        self.aid = aid
        self.n = 0

    def buy(self) -> tuple[int, Any, str]:
        """One purchase by a new buyer: its status, body and user."""
        self.n += 1
        uid = f"disk{self.n:05d}"
        token = user_token(uid)
        status, issued = call(self.stack.port, "GET", f"/seckill/url?activity={self.aid}", token)
        if status != 200:
            return status, issued, uid
        status, body = call(self.stack.port, "POST", issued["url"], token)
        return status, body, uid


def workers(stack: UpStack) -> set[int]:
    """The pids of every gunicorn worker (the masters' children) now."""
    found: set[int] = set()
    for master in stack.instances().values():
        with contextlib.suppress(psutil.Error):
            found |= {child.pid for child in master.children()}
    return found


def children_alive(stack: UpStack) -> set[str]:
    """What of the stack runs now, by role."""
    roles: set[str] = set()
    for child in psutil.Process(stack.process.pid).children():
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            for role in ("valkey-server", "gunicorn", "seckill.worker", "seckill.webhooks",
                         "nginx"):
                if role in line or (role == "nginx" and child.name() == "nginx"):
                    roles.add(role)
    return roles


ROLES = {"valkey-server", "gunicorn", "seckill.worker", "seckill.webhooks", "nginx"}


@contextlib.contextmanager
def sale_on_small_disk(tmp_path: Path, total: int) -> Iterator[tuple[Path, UpStack, Buyers]]:
    """``seckill up`` with its data on a small tmpfs, an activity on sale and its first
    purchase made: the disk, the stack and the buyers."""
    with small_disk(tmp_path / "disk") as disk, running_up(
        tmp_path, "--ip-rate", "off", SECKILL_DATA_DIR=str(disk / "data"),
    ) as stack:
        buyers = Buyers(stack, stack.create_activity(total=total))
        status, body, _ = buyers.buy()
        assert status == 200, body
        yield disk, stack, buyers


def test_a_full_data_disk_refuses_as_storage_and_sales_resume_when_space_returns(
    tmp_path: Path,
) -> None:
    with sale_on_small_disk(tmp_path, 1000) as (disk, stack, buyers):
        aid = buyers.aid
        assert children_alive(stack) == ROLES
        before = workers(stack)
        assert before

        filler = fill(disk)
        full_at = time.monotonic()
        answers: list[tuple[float, int, Any]] = []
        while time.monotonic() - full_at < FULL_FOR_SECONDS:
            assert stack.process.poll() is None, stack.text()[-4000:]
            status, body, _ = buyers.buy()
            answers.append((time.monotonic() - full_at, status, body))
            # A write that fits in a page the AOF already has still succeeds; none after
            # the first refusal.
            assert status != 200 or all(s == 200 for _, s, _ in answers), (
                answers, stack.text()[-4000:])
            time.sleep(0.2)
        # Whatever the first purchases met while Valkey found out, from then on: storage.
        first = next(at for at, s, _ in answers if s != 200)
        late = [(at, s, b) for at, s, b in answers if at > first + 5.0]
        assert late and all(s == 503 and b["error"] == "unavailable" and b["detail"] == "storage"
                            for _, s, b in late), (late, stack.text()[-4000:])
        assert "giving up" not in stack.text(), stack.text()[-4000:]
        # Filled at once, faster than the keeper looks: Valkey, which exits at a write it
        # cannot append under always, came back on the full disk with everysec; or the
        # keeper had switched first.
        assert "valkey restarted" in stack.text() or "appendfsync everysec" in stack.text(), \
            stack.text()[-4000:]
        # Every child runs: the orders worker waits out the refusal of its stream reads.
        assert children_alive(stack) == ROLES, stack.text()[-4000:]

        # The console and the metrics stay up and say why.
        status, text = get_text(stack.admin_port, "/admin/console/state")
        assert status == 200, text
        assert '"storage"' in text and "No space left on device" in text, text
        status, text = get_text(stack.admin_port, "/metrics")
        assert status == 200, text
        assert "seckill_storage_writable 0.0" in text, text

        # No gunicorn worker died (SIGBUS from a metrics file on the full disk, or else).
        assert workers(stack) == before, stack.text()[-4000:]
        assert "SIGBUS" not in stack.text()

        filler.unlink()
        freed_at = time.monotonic()
        while True:
            status, body, uid = buyers.buy()
            if status == 200:
                break
            assert time.monotonic() - freed_at < 30, (status, body, stack.text()[-4000:])
            time.sleep(0.1)
        resumed = time.monotonic() - freed_at
        print(f"first refusal {first:.2f}s after the disk filled; answers while full: "
              f"{sorted({(s, (b or {}).get('detail')) for _, s, b in answers})}; first purchase "
              f"{resumed:.2f}s after space returned")
        assert resumed < 10, resumed

        # The orders worker stores the orders again.
        deadline = time.monotonic() + 30
        while True:
            status, order = call(stack.port, "GET", f"/seckill/{aid}/order", user_token(uid))
            if status == 200 and order["status"] == "confirmed":
                break
            assert time.monotonic() < deadline, (status, order, stack.text()[-4000:])
            time.sleep(0.2)
        status, text = get_text(stack.admin_port, "/metrics")
        assert "seckill_storage_writable 1.0" in text, text
        assert children_alive(stack) == ROLES, stack.text()[-4000:]
        print("\n".join(line for line in stack.text().splitlines()
                        if "valkey" in line or "appendfsync" in line))


def test_the_supervisor_never_gives_up_on_a_child_whose_cause_passes(tmp_path: Path) -> None:
    """A child that dies at once until a file appears (a cause that passes): restarted far
    more often than the old limit of 6 quick deaths, each wait capped, and it stays up once
    the file is there."""
    flag = tmp_path / "cause-passed"
    starts = tmp_path / "starts"
    script = (f"echo x >> {starts}; test -f {flag} && exec sleep 60; exit 1")
    supervisor = Supervisor([ChildSpec("flaky", ["sh", "-c", script], env={})],
                            max_delay=0.3)
    runner = threading.Thread(target=supervisor.run, daemon=True)
    supervisor.start()
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not starts.exists() or len(starts.read_text().split()) < 12:
            assert time.monotonic() < deadline, "the child was not restarted 12 times in 30 s"
            assert runner.is_alive() and supervisor.failure is None, supervisor.failure
            time.sleep(0.05)
        flag.touch()
        deadline = time.monotonic() + 10
        child = supervisor.children[0]
        while child.process is None or child.process.poll() is not None or \
                time.monotonic() - child.started_at < 1.0:
            assert time.monotonic() < deadline, "the child did not stay up"
            time.sleep(0.05)
        assert supervisor.failure is None
    finally:
        supervisor.stop_requested = True
        runner.join(10)
        supervisor.stop()
    assert not runner.is_alive()



# --- a store that refuses writes, without the whole stack ------------------------------------


def misconf(exc: BaseException) -> bool:
    """Whether ``exc`` is Valkey refusing a write for its disk."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("MISCONF")


@contextlib.contextmanager
def refusing_store(tmp_path: Path, prefix: str, database_url: str) -> Iterator[RefusingStore]:
    """A Valkey of its own on a small tmpfs (``everysec``, as ``seckill up`` runs it on a
    nearly full disk) and an app on it; :meth:`RefusingStore.refuse` fills the disk."""
    with small_disk(tmp_path / "disk", "16m") as disk, dedicated_valkey(
            disk / "valkey", appendfsync="everysec") as valkey:
        env = gateway_env(valkey.url, prefix, tmp_path / "data", database_url, "1000/second")
        app = create_app(Settings.from_env(env))
        app.config["TESTING"] = True
        rds = redis.Redis.from_url(valkey.url, decode_responses=True)
        try:
            yield RefusingStore(disk, env, app, rds)
        finally:
            rds.close()
            app.extensions["seckill"].close()


@dataclasses.dataclass
class RefusingStore:
    disk: Path
    env: dict[str, str]
    app: Flask
    rds: redis.Redis
    filler: Path | None = None

    def refuse(self) -> None:
        """Fill the disk, then write until Valkey's append fails and it refuses writes."""
        self.filler = fill(self.disk)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.rds.set("disk:probe", "x" * 4096)
            except redis.ResponseError as exc:
                if misconf(exc):
                    return
                raise
            assert time.monotonic() < deadline, "Valkey never refused a write"
            time.sleep(0.05)

    def free(self) -> None:
        """Remove the filler; wait until Valkey writes again (it retries its append)."""
        assert self.filler is not None
        self.filler.unlink()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.rds.set("disk:probe", "y")
                return
            except redis.ResponseError as exc:
                assert misconf(exc) and time.monotonic() < deadline, exc
            time.sleep(0.05)


def test_the_orders_worker_waits_out_a_storage_refusal(
    tmp_path: Path, prefix: str, database_url: str,
) -> None:
    """Its reads of the stream are writes: refused with MISCONF while the disk is full. The
    worker waits (one warning, not a line per try) and stores the orders once there is room."""
    log_path = tmp_path / "worker.log"
    with refusing_store(tmp_path, prefix, database_url) as store:
        client = store.app.test_client()
        aid = create_activity(client, total=100)["id"]
        worker = worker_process(store.env, log_path, SECKILL_WORKER_BLOCK_MS="200")
        try:
            assert buy(client, aid, "before").status_code == 200
            wait_until(lambda: order_status(client, aid, "before")["status"] == "confirmed",
                       15, 0.1, "the first order stored")
            store.refuse()
            refused_at = time.monotonic()
            while time.monotonic() - refused_at < 6.0:
                assert worker.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.1)
            text = log_path.read_text()
            said = [line for line in text.splitlines() if "disk" in line and "WARNING" in line]
            assert 1 <= len(said) <= 2, text[-3000:]
            assert "Traceback" not in text, text[-3000:]

            store.free()
            assert buy(client, aid, "after").status_code == 200
            wait_until(lambda: order_status(client, aid, "after")["status"] == "confirmed",
                       15, 0.1, "the order bought after the disk had room stored")
            assert worker.poll() is None, log_path.read_text()[-3000:]
        finally:
            stop_worker_process(worker)
        print(log_path.read_text())


def test_healthz_names_storage_when_the_store_refuses_writes(
    tmp_path: Path, prefix: str, database_url: str,
) -> None:
    with refusing_store(tmp_path, prefix, database_url) as store:
        client = store.app.test_client()
        assert client.get("/healthz").status_code == 200
        store.refuse()
        answer = client.get("/healthz")
        assert answer.status_code == 503, answer.get_json()
        failing = answer.get_json()["failing"]
        assert set(failing) == {"storage"}, failing
        assert "append-only file" in failing["storage"], failing
        # The console's state says so, and its census of the sale stays fresh (reads are
        # served).
        state = client.get("/admin/console/state", headers=ADMIN).get_json()
        assert state["storage"]["writable"] is False, state["storage"]
        assert (state["redis_up"], state["stale"]) == (True, False), state
        assert all(node["ok"] for node in state["redis_nodes"]), state["redis_nodes"]
        store.free()
        assert client.get("/healthz").status_code == 200


def test_the_rate_limiter_says_a_storage_refusal_once_not_per_request(
    tmp_path: Path, prefix: str, database_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The per-user rate counters are writes: refused, the limiter fails open (counted in the
    metric), and says why in one line rather than one per request."""
    with refusing_store(tmp_path, prefix, database_url) as store:
        client = store.app.test_client()
        aid = create_activity(client, total=100)["id"]
        store.refuse()
        caplog.set_level(logging.INFO, logger="seckill.store.sale.state")
        for n in range(100):
            got = client.get(f"/seckill/url?activity={aid}", headers=user_headers(f"r{n}"))
            assert got.status_code == 200, got.get_json()  # fails open
        said = [r for r in caplog.records if r.name == "seckill.store.sale.state"]
        assert 1 <= len(said) <= 2, [r.getMessage() for r in said]
        assert "disk" in said[0].getMessage(), said[0].getMessage()


# --- ahead of the disk filling ---------------------------------------------------------------


def leave_room(disk: Path, room: int) -> Path:
    """A file on ``disk`` that leaves about ``room`` bytes free; its path."""
    filler = disk / "filler"
    size = available_bytes(disk) or 0
    with open(filler, "wb", buffering=0) as out:
        out.write(b"\0" * max(0, size - room))
    return filler


def test_the_keeper_runs_everysec_while_the_disk_is_nearly_full(tmp_path: Path) -> None:
    """Below its threshold of room the keeper sets ``everysec`` (a write that cannot be
    appended is then refused, not the server's exit); with room again, ``always``. A
    purchase's WAITAOF still waits for the fsync under ``everysec``."""
    said: list[str] = []
    with small_disk(tmp_path / "disk", "128m") as disk, dedicated_valkey(
            disk / "valkey", appendfsync="always") as valkey:
        assert valkey.process is not None
        keeper = FsyncKeeper(valkey.url, valkey.data_dir, said.append)
        rds = redis.Redis.from_url(valkey.url, decode_responses=True)
        try:
            keeper(valkey.process)
            assert rds.config_get("appendfsync")["appendfsync"] == "always"
            filler = leave_room(disk, 40 << 20)
            keeper(valkey.process)
            assert rds.config_get("appendfsync")["appendfsync"] == "everysec", said
            # A write and its WAITAOF: answered once it is on disk (1 local fsync).
            pipe = rds.pipeline(transaction=False)
            pipe.set("k", "v")
            pipe.execute_command("WAITAOF", 1, 0, 1500)
            assert pipe.execute()[1][0] == 1
            filler.unlink()
            keeper(valkey.process)
            assert rds.config_get("appendfsync")["appendfsync"] == "always", said
        finally:
            rds.close()
    assert len(said) == 2, said


FILL_PAUSE = 1 / 16  # seconds between MiBs: the disk fills at 16 MiB/s


def test_a_disk_filling_under_purchases_meets_storage_refusals_not_a_restart(
    tmp_path: Path,
) -> None:
    """A disk that fills while purchases run (16 MiB/s): the keeper has Valkey on
    ``everysec`` before it is full, so the purchases meet ``storage`` refusals, never the
    server's exit (ConnectionError, NotSent) and its restart; no child dies; sales resume
    once there is room."""
    with sale_on_small_disk(tmp_path, 100_000) as (disk, stack, buyers):
        aid = buyers.aid
        answers: list[tuple[float, int, str | None]] = []
        unknown: list[str] = []  # the buyers answered 503 durability: decided, not yet on disk
        stop = threading.Event()

        def crowd() -> None:
            deadline = time.monotonic() + 120  # bounded, whatever the test does
            while not stop.is_set() and time.monotonic() < deadline:
                status, body, uid = buyers.buy()
                detail = body.get("detail") if isinstance(body, dict) else None
                answers.append((time.monotonic(), status, detail))
                if detail == "durability":
                    unknown.append(uid)

        runner = threading.Thread(target=crowd, daemon=True)
        filling_at = time.monotonic()
        runner.start()
        try:
            filler = fill(disk, FILL_PAUSE)
            full_at = time.monotonic()
            time.sleep(8.0)
            filler.unlink()
            freed_at = time.monotonic()
            deadline = freed_at + 30
            while not any(at > freed_at and s == 200 for at, s, _ in list(answers)):
                assert time.monotonic() < deadline, (answers[-5:], stack.text()[-4000:])
                time.sleep(0.1)
        finally:
            stop.set()
            runner.join(15)
        resumed = next(at for at, s, _ in answers if at > freed_at and s == 200) - freed_at
        met = Counter((s, d) for at, s, d in answers if filling_at <= at <= freed_at)
        print(f"filled in {full_at - filling_at:.1f} s; answers while filling and full: "
              f"{dict(met)}; first sale {resumed:.2f} s after space returned")
        for second in range(int(freed_at - filling_at) + 2):  # the timeline, from the fill
            then = Counter((s, d) for at, s, d in answers
                           if second <= at - filling_at < second + 1)
            full = "(full)" if filling_at + second >= full_at else "      "
            print(f"  {second:3d} s {full} {dict(then)}")
        text = stack.text()
        print("\n".join(line for line in text.splitlines() if "appendfsync" in line
                        or "exited" in line))
        # The purchases Valkey had applied when the append failed are answered 503
        # durability (decided, not yet on disk: the order's status tells); then storage.
        assert set(met) <= {(200, None), (503, "storage"), (503, "durability")}, (
            met, text[-4000:])
        assert (503, "storage") in met, met
        assert met[(503, "durability")] <= 3, met  # one crowd thread: what was in flight
        for uid in unknown:  # on disk once there is room: never lost
            status, order = call(stack.port, "GET", f"/seckill/{aid}/order", user_token(uid))
            assert status == 200 and order["status"] in {"pending", "confirmed"}, order
        # Refused at once, not after the durability wait's 1.5 s: the crowd kept its pace.
        refusals = [at for at, s, d in answers if d == "storage"]
        assert len(refusals) >= 5 * (refusals[-1] - refusals[0]), len(refusals)
        assert "exited with code" not in text, text[-4000:]
        assert "appendfsync everysec" in text, text[-4000:]
        assert resumed < 10, resumed
        assert children_alive(stack) == ROLES, text[-4000:]


def test_the_keeper_tends_every_node_of_an_embedded_cluster(tmp_path: Path) -> None:
    """``seckill up --redis-nodes 3``'s nodes, supervised as it does, on one small disk: each
    node runs ``everysec`` while the disk is nearly full and ``always`` once it has room."""
    with small_disk(tmp_path / "disk", "128m") as disk:
        _, _, specs = up_cluster(disk / "cluster", 3, 0, {})
        supervisor = Supervisor(specs, data_dir=disk)
        runner = threading.Thread(target=supervisor.run, daemon=True)
        urls = [f"redis://127.0.0.1:{spec.name.removeprefix('valkey-')}/0" for spec in specs]

        def policies() -> set[str]:
            found = set()
            for url in urls:
                with redis.Redis.from_url(url, decode_responses=True, socket_timeout=1) as node:
                    found.add(str(node.config_get("appendfsync")["appendfsync"]))
            return found

        try:
            supervisor.start()
            runner.start()
            assert policies() == {"always"}
            filler = leave_room(disk, 40 << 20)
            wait_until(lambda: policies() == {"everysec"}, 10, 0.2, "every node on everysec")
            filler.unlink()
            wait_until(lambda: policies() == {"always"}, 10, 0.2, "every node on always")
        finally:
            supervisor.stop_requested = True
            runner.join(10)
            supervisor.stop()
        assert supervisor.failure is None, supervisor.failure


def test_a_purchase_that_cannot_reach_a_store_down_for_its_full_disk_says_storage(
    tmp_path: Path, prefix: str, database_url: str,
) -> None:
    """A cluster node that cannot save its config on a full disk, or a Valkey that exited
    at a write it could not append, is down: a purchase that could not even be sent to it
    hears ``storage`` (nothing was decided) while the gateway's data folder is full, and the
    failure's own name otherwise."""
    with small_disk(tmp_path / "disk", "16m") as disk:
        valkey = EmbeddedValkey(tmp_path / "valkey", appendfsync="always")
        valkey.start()
        try:
            (disk / "data").mkdir()  # seckill up's data folder: the Valkey's, and the gateway's
            env = gateway_env(valkey.url, prefix, disk / "data", database_url, "1000/second")
            app = create_app(Settings.from_env(env))
            app.config["TESTING"] = True
            client = app.test_client()
            aid = create_activity(client, total=10)["id"]
            assert buy(client, aid, "early").status_code == 200  # the sale is under way
            urls = {uid: client.get(f"/seckill/url?activity={aid}",
                                    headers=user_headers(uid)).get_json()["url"]
                    for uid in ("before", "during")}
            valkey.stop()  # down, as behind a full disk
            answer = client.post(urls["before"], headers=user_headers("before"))
            assert answer.status_code == 503, answer.get_json()
            assert answer.get_json()["detail"] != "storage", answer.get_json()  # disk has room
            filler = fill(disk)
            # The gateway reads the disk's room at most once a second: within two, storage.
            deadline = time.monotonic() + 2.5
            while True:
                answer = client.post(urls["during"], headers=user_headers("during"))
                assert answer.status_code == 503, answer.get_json()
                if answer.get_json()["detail"] == "storage":
                    break
                assert time.monotonic() < deadline, answer.get_json()
                time.sleep(0.1)
            # Room again: the failure's own name, once the reading is redone (within 2 s).
            filler.unlink()
            deadline = time.monotonic() + 2.5
            while True:
                answer = client.post(urls["during"], headers=user_headers("during"))
                if answer.get_json()["detail"] != "storage":
                    break
                assert time.monotonic() < deadline, answer.get_json()
                time.sleep(0.1)
            app.extensions["seckill"].close()
        finally:
            valkey.stop()
