"""The drill's own stack: ``seckill up`` run as a child process, exactly as an operator runs it
(nginx in front when installed, ``--ip-rate off``), in the drill's temporary folder.

What the faults need of it: each child's pid, read from the supervisor's own log lines
(``<name> started (pid N)`` / ``<name> restarted (pid N)``, written once the child answers),
so that a fault waits for the line that says its child is back, never for a guessed time.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from seckill.config import SECRET_VARS, environment
from seckill.ops.stack.embedded import die_with_parent, read_password
from seckill.ops.stack.nginx import nginx_binary
from seckill.ops.stack.ports import free_listen_port

if TYPE_CHECKING:
    from seckill.ops.stack.cluster import EmbeddedCluster

# The supervisor's lines about its children (seckill/ops/stack/supervisor.py), text or JSON format.
CHILD_LINE = re.compile(r"(\S+) (started|restarted) \(pid (\d+)\)")
BANNER = "seckill is up on"
# The claim naming the person behind an account in the drill's tokens (SECKILL_PERSON_CLAIM of
# its stack): the drop's accounts carry it, several accounts of one person the same value.
PERSON_CLAIM = "drill_person"
# Variables of the operator's own deployment that must not leak into the drill's stack.
FOREIGN = ("REDIS_URL", "DATABASE_URL", "SECKILL_KEY_PREFIX", "SECKILL_REDIS_CLUSTER",
           "SECKILL_INSTANCES", "PROMETHEUS_MULTIPROC_DIR", "SECKILL_DATA_DIR", "SECKILL_ENV",
           "SECKILL_PERSON_CLAIM")


class StackError(RuntimeError):
    """The drill's stack did not start, stop or come back in time."""


def seckill_command() -> list[str]:
    """How to run this package's ``seckill`` command in a child process."""
    return [sys.executable, "-m", "seckill.ops.cli"]


class DrillStack:
    """One ``seckill up`` over a data folder, started and stopped as many times as asked."""

    def __init__(self, folder: Path, redis_nodes: int | None, replicas: int | None,
                 database_url: str | None = None) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.redis_nodes, self.replicas = redis_nodes, replicas
        self.database_url = database_url  # None: SQLite in the data folder
        self.mounted = False  # the data folder is a small tmpfs of the drill's own
        self.nginx = nginx_binary() is not None
        self.port = free_listen_port()
        self.admin_port = free_listen_port(avoid=[self.port]) if self.nginx else self.port
        self.secrets = {name: secrets.token_urlsafe(32) for name in SECRET_VARS}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = folder / "up.log"
        self._log_offset = 0
        self.pids: dict[str, int] = {}
        self.starts = 0

    @property
    def base(self) -> str:
        """The public listener (nginx's, or the one instance's)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_base(self) -> str:
        """The operator listener."""
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def jwt_secret(self) -> str:
        """The secret the stack verifies user tokens with."""
        return self.secrets["SECKILL_JWT_SECRET"]

    @property
    def admin_token(self) -> str:
        """The operator token of the stack."""
        return self.secrets["SECKILL_ADMIN_TOKEN"]

    def shape(self) -> str:
        """The stack in a few words, for the report."""
        redis = (f"Valkey Cluster {self.redis_nodes} masters x {self.replicas or 0} replica(s)"
                 if self.redis_nodes else "one Valkey")
        front = "nginx in front of 2 gunicorn instances" if self.nginx else "one gunicorn"
        database = "PostgreSQL (through the drill's proxy)" if self.database_url else "SQLite"
        durability = f", SECKILL_DURABILITY={self.durability}" if self.redis_nodes else ""
        disk = ", data on a 256 MB tmpfs" if self.mounted else ""
        return f"{front}, {redis}{durability}, {database}{disk}, `--ip-rate off`"

    @property
    def durability(self) -> str:
        """``replica`` on a cluster with replicas (what docs/operating.md recommends there),
        else ``local``."""
        return "replica" if self.redis_nodes and self.replicas else "local"

    @property
    def sqlite_path(self) -> Path:
        """The SQLite database of a stack without ``--database``."""
        return self.data / "seckill.db"

    def argv(self) -> list[str]:
        """The ``seckill up`` command line."""
        argv = [*seckill_command(), "up", "--port", str(self.port)]
        if self.nginx:
            argv += ["--admin-port", str(self.admin_port), "--ip-rate", "off"]
        else:
            argv.append("--no-nginx")
        if self.redis_nodes:
            argv += ["--redis-nodes", str(self.redis_nodes)]
            argv += ["--replicas", str(self.replicas or 0)]
        return argv

    def env(self) -> dict[str, str]:
        """Development mode with the drill's own secrets, data folder, store and person claim
        (its drop is limited by person)."""
        env = {k: v for k, v in environment().items() if k not in FOREIGN}
        env.update(self.secrets)
        env.update({"SECKILL_ENV": "development", "SECKILL_DATA_DIR": str(self.data),
                    "SECKILL_PERSON_CLAIM": PERSON_CLAIM, "PYTHONUNBUFFERED": "1",
                    "SECKILL_DURABILITY": self.durability})
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        return env

    # -- a small data disk ---------------------------------------------------------------

    def mount_small_disk(self, megabytes: int = 256) -> str:
        """Mount a tmpfs of ``megabytes`` on the data folder (before the first start), so
        that the disk-full fault fills a disk of the drill's own; "" when done, else why
        not (the fault is then reported as not run)."""
        if os.geteuid() != 0:
            return "not root: the drill mounts the small disk it fills itself"
        self.data.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0700",
                               "tmpfs", str(self.data)], capture_output=True, text=True)
        if done.returncode != 0:
            return f"mount of a tmpfs failed: {(done.stderr or done.stdout).strip()[:200]}"
        self.mounted = True
        return ""

    def unmount(self, keep: bool) -> None:
        """Unmount the small disk (after the last stop); ``keep``: copy its files to
        ``data.kept`` first (a failed drill keeps its folder)."""
        if not self.mounted:
            return
        if keep:
            import shutil

            shutil.copytree(self.data, self.folder / "data.kept", dirs_exist_ok=True)
        done = subprocess.run(["umount", str(self.data)], capture_output=True)
        if done.returncode != 0:  # a child still holding a file: unmount once it is gone
            subprocess.run(["umount", "-l", str(self.data)], capture_output=True)
        self.mounted = False

    # -- start and stop ------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> float:
        """Start ``seckill up`` and wait for its banner; the seconds it took."""
        started = time.monotonic()
        self.data.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as sink:
            self.process = subprocess.Popen(
                self.argv(), env=self.env(), stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent,  # a drill killed stops its stack (SIGTERM)
            )
        self.starts += 1
        self.pids = {}
        self._wait_for(lambda text: BANNER in text, timeout, "the banner")
        return time.monotonic() - started

    def stop(self, timeout: float = 90.0) -> tuple[int | None, float]:
        """SIGTERM to ``seckill up`` (a Ctrl-C); its exit code (None: it had to be killed)
        and the seconds the stop took."""
        process, started = self.process, time.monotonic()
        if process is None or process.poll() is not None:
            return (None if process is None else process.returncode), 0.0
        process.send_signal(signal.SIGTERM)
        try:
            code: int | None = process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_everything()
            code = None
        return code, time.monotonic() - started

    def kill_everything(self) -> None:
        """Kill what is left of the stack, by process group (each child has its own)."""
        process = self.process
        if process is None:
            return
        for pid in [*self.pids.values(), process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)

    # -- children ------------------------------------------------------------------------

    def _new_text(self) -> str:
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._log_offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def _read_pids(self, text: str) -> list[tuple[str, str, int]]:
        found = [(m.group(1), m.group(2), int(m.group(3))) for m in CHILD_LINE.finditer(text)]
        for name, _, pid in found:
            self.pids[name] = pid
        return found

    def _wait_for(self, done: object, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self._new_text()
            self._read_pids(text)
            if callable(done) and done(text):
                return text
            if self.process is not None and self.process.poll() is not None:
                raise StackError(f"`seckill up` exited ({self.process.returncode}) before "
                                 f"{what}; its log: {self.log_path}\n{text[-2000:]}")
            if time.monotonic() > deadline:
                raise StackError(f"no {what} within {timeout:.0f}s; log: {self.log_path}")
            time.sleep(0.05)

    def child_names(self) -> list[str]:
        """The supervised children, by the supervisor's names."""
        self._read_pids(self._new_text())
        return list(self.pids)

    def kill_child(self, name: str, timeout: float = 90.0) -> float:
        """kill -9 the child ``name``; wait for the supervisor's line that it is back (it
        logs it once the child answers again); the seconds that took."""
        self._read_pids(self._new_text())
        pid = self.pids[name]
        restarted_before = self._new_text().count(f"{name} restarted (pid ")
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self._wait_for(lambda text: text.count(f"{name} restarted (pid ") > restarted_before,
                       timeout, f"restart of {name}")
        return time.monotonic() - killed

    def signal_child(self, name: str, signum: int) -> int:
        """Send ``signum`` to the child ``name`` and everything under it (a gunicorn
        master's workers): its process group, as each child has its own; the group."""
        self._read_pids(self._new_text())
        group = os.getpgid(self.pids[name])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)
        return group

    def log_text(self) -> str:
        """``seckill up``'s log since the last start."""
        return self._new_text()

    def running(self) -> bool:
        """Whether ``seckill up`` still runs."""
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        """Whether ``/healthz`` on the operator listener answers 200 now."""
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def wait_healthy(self, timeout: float = 60.0) -> bool:
        """Poll ``/healthz`` until 200 (bounded); whether it came."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            time.sleep(0.1)
        return False

    def cluster(self) -> EmbeddedCluster:
        """A view of the stack's embedded cluster (its nodes not ours: ``seckill up``'s), with
        the password ``seckill up`` keeps in the data folder."""
        from seckill.ops.stack.cluster import EmbeddedCluster

        return EmbeddedCluster(self.data / "cluster", self.redis_nodes or 0, self.replicas or 0,
                               password=read_password(self.data))

    def slot_owner(self, slot_key: str, avoid: str) -> str | None:
        """The supervisor's name of the master serving ``slot_key``'s slot as a live node
        other than ``avoid`` sees it (None: no answer); for timing a failover."""
        import redis

        cluster = self.cluster()
        for port in cluster.ports:
            if f"valkey-{port}" == avoid:
                continue
            try:
                with contextlib.closing(redis.Redis(port=port, password=cluster.password,
                                                    socket_timeout=0.5,
                                                    decode_responses=True)) as conn:
                    slot = int(conn.execute_command("CLUSTER KEYSLOT", slot_key))
                    nodes = conn.cluster("NODES")  # redis-py's parse: address -> fields
                for address, node in nodes.items():
                    if ("master" in node["flags"] and "fail" not in node["flags"]
                            and any(int(span[0]) <= slot <= int(span[-1])
                                    for span in node["slots"])):
                        return f"valkey-{address.rsplit(':', 1)[1]}"
            except (redis.RedisError, OSError, KeyError, ValueError):
                continue
        return None

    def redis_master_to_kill(self, slot_key: str) -> str:
        """The supervisor's name of the Valkey to kill: the single server, or on a cluster the
        master that owns ``slot_key``'s slot (the busiest activity's)."""
        if not self.redis_nodes:
            return "valkey"
        import redis

        cluster = self.cluster()
        with contextlib.closing(cluster.client(cluster.ports[0])) as conn:
            slot = int(conn.execute_command("CLUSTER KEYSLOT", slot_key))
        with contextlib.suppress(redis.RedisError):
            return f"valkey-{cluster.master_of_slot(slot)}"
        return f"valkey-{cluster.ports[0]}"

