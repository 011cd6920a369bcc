"""A small supervisor for ``seckill up``: named child processes, started in order, restarted
when one dies, stopped in reverse order on SIGINT/SIGTERM, with no orphan left behind.

Every child runs in its own session (``start_new_session``), so a Ctrl-C in the terminal
reaches only this process, which then stops the children itself, in the right order. Each
child also gets ``PR_SET_PDEATHSIG`` (:func:`seckill.ops.stack.embedded.die_with_parent`): if this
process is killed with SIGKILL, Linux sends the children SIGTERM. After a child leader exits,
whatever is left in its process group (e.g. a gunicorn worker whose master was killed) is
killed too, so the port it held is free for the restart.

A child that keeps dying is restarted forever, with a wait that doubles up to
:data:`MAX_DELAY_SECONDS`: most causes pass (a full disk, a database away), and a stack that
gave up stayed down after they had. A child that died while the data folder's disk was full is
restarted as soon as the disk has room again, whatever is left of its wait.

The first SIGINT/SIGTERM stops warmly (SIGTERM to each child, then wait); a second one stops
cold (SIGKILL to what is still running).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from seckill import logs
from seckill.ops.stack.embedded import die_with_parent
from seckill.store.plumbing.storage import disk_full

# A child that dies sooner than this after starting counts towards a crash loop: each such
# death in a row doubles the wait before the next start, up to MAX_DELAY_SECONDS.
QUICK_DEATH_SECONDS = 10.0
MAX_DELAY_SECONDS = 30.0
POLL_SECONDS = 0.2
TEND_SECONDS = 1.0


class SupervisorError(RuntimeError):
    """A child could not be started."""


class Stopping(Exception):
    """A stop was requested while waiting for a child to become ready."""


# ready(process, deadline, should_stop) returns once the child serves, raises otherwise.
ReadyCheck = Callable[["subprocess.Popen[bytes]", float, Callable[[], bool]], None]


@dataclasses.dataclass
class ChildSpec:
    """How to run one child: its command, environment, readiness check and stop."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path | None = None
    ready: ReadyCheck | None = None
    ready_timeout: float = 30.0
    stop_timeout: float = 10.0
    stop_signal: int = signal.SIGTERM  # the warm stop (nginx's graceful one is SIGQUIT)
    # Called about once a second while the child runs, with its process: settles what can be
    # changed without a restart (the embedded Valkey's fsync policy once its disk has room).
    tend: Callable[[subprocess.Popen[bytes]], None] | None = None


@dataclasses.dataclass
class Child:
    """One child as it runs: its spec, its process, when it started, how often it restarted."""

    spec: ChildSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_deaths: int = 0


COMPONENT = "seckill-up"


def log(message: str, level: str = "INFO") -> None:
    """Print one line in the stack's format (``seckill.logs``) on standard error."""
    # Standard error may be a file on the full disk: a lost line, never a dead supervisor.
    with contextlib.suppress(OSError):
        print(logs.line(COMPONENT, level, message, logs.json_wanted()), file=sys.stderr,
              flush=True)


def group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in process group ``pgid``?"""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_group(pgid: int) -> None:
    """SIGKILL what remains of a child's process group (its leader already reaped)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class Supervisor:
    """Starts the children in order, restarts any that dies, stops them in reverse order."""

    def __init__(self, specs: Sequence[ChildSpec], data_dir: Path | None = None,
                 max_delay: float = MAX_DELAY_SECONDS) -> None:
        self.children = [Child(spec) for spec in specs]
        self.stop_requested = False
        self.hurry = False
        self.failure: str | None = None
        self.data_dir = data_dir  # whose disk, once it has room again, ends a wait early
        self.max_delay = max_delay
        self.tended_at = 0.0

    # -- signals -----------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Stop on SIGINT, SIGTERM or SIGHUP: warmly on the first, coldly on a second."""
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop_requested:
            self.hurry = True
            log(f"{name} again: killing what is left")
        else:
            self.stop_requested = True
            log(f"{name}: stopping")

    def should_stop(self) -> bool:
        """Whether a stop was requested."""
        return self.stop_requested

    # -- lifecycle ---------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        spec = child.spec
        child.process = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        child.started_at = time.monotonic()
        if spec.ready is not None:
            spec.ready(child.process, time.monotonic() + spec.ready_timeout, self.should_stop)

    def start(self) -> None:
        """Start every child in order, each ready before the next; raise on failure."""
        for child in self.children:
            if self.stop_requested:
                raise Stopping()
            try:
                self._spawn(child)
            except Stopping:
                raise
            except Exception as exc:
                raise SupervisorError(f"{child.spec.name} did not start: {exc}") from exc
            assert child.process is not None
            log(f"{child.spec.name} started (pid {child.process.pid})")

    def run(self) -> None:
        """Watch the children until a stop is requested; restart any that dies."""
        while not self.stop_requested:
            for child in self.children:
                if self.stop_requested:
                    break
                process = child.process
                if process is not None and process.poll() is not None:
                    self._restart(child, process)
            self._tend()
            time.sleep(POLL_SECONDS)

    def _tend(self) -> None:
        if time.monotonic() - self.tended_at < TEND_SECONDS:
            return
        self.tended_at = time.monotonic()
        for child in self.children:
            process, tend = child.process, child.spec.tend
            if tend is None or process is None or process.poll() is not None:
                continue
            try:
                tend(process)
            except Exception as exc:  # tending is best effort; the child runs either way
                log(f"{child.spec.name}: {type(exc).__name__}: {exc}", "WARNING")

    def _disk_full(self) -> bool:
        return self.data_dir is not None and disk_full(self.data_dir)

    def _restart(self, child: Child, dead: subprocess.Popen[bytes]) -> None:
        name = child.spec.name
        lived = time.monotonic() - child.started_at
        kill_group(dead.pid)  # e.g. gunicorn workers still holding the port
        child.quick_deaths = child.quick_deaths + 1 if lived < QUICK_DEATH_SECONDS else 0
        child.restarts += 1
        delay = 0.0 if child.quick_deaths <= 1 else min(
            0.5 * 2 ** (child.quick_deaths - 1), self.max_delay)
        full = self._disk_full()
        log(
            f"{name} (pid {dead.pid}) exited with code {dead.returncode} after {lived:.1f}s; "
            f"restarting (restart #{child.restarts}"
            + (f", in {delay:.1f}s" if delay else "")
            + (f", or once {self.data_dir}'s full disk has room" if full and delay else "")
            + ")"
        )
        deadline = time.monotonic() + delay
        while not self.stop_requested and time.monotonic() < deadline:
            if full and not self._disk_full():
                log(f"{self.data_dir}'s disk has room again; restarting {name} now")
                break
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        if self.stop_requested:
            return
        try:
            self._spawn(child)
        except Stopping:
            return
        except Exception as exc:
            # Seen dead on the next poll (killed here if it is still starting): a quick death.
            log(f"{name} did not come back: {exc}")
            self._stop_one(child, cold=True)
            return
        assert child.process is not None
        log(f"{name} restarted (pid {child.process.pid})")

    def stop(self) -> None:
        """Stop every child, last started first, and wait for each."""
        for child in reversed(self.children):
            self._stop_one(child, cold=self.hurry)

    def _stop_one(self, child: Child, cold: bool) -> None:
        process = child.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL if cold else child.spec.stop_signal)
            deadline = time.monotonic() + child.spec.stop_timeout
            while process.poll() is None and time.monotonic() < deadline:
                if self.hurry and not cold:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    cold = True
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(POLL_SECONDS)
            if process.poll() is None:
                name = signal.Signals(child.spec.stop_signal).name
                log(f"{child.spec.name} (pid {process.pid}) ignored {name}; killing it")
                process.kill()
                process.wait(10)
            log(f"{child.spec.name} stopped (exit code {process.returncode})")
        # Nothing of the child's process group may outlive it.
        deadline = time.monotonic() + 5
        while group_alive(process.pid) and time.monotonic() < deadline:
            kill_group(process.pid)
            time.sleep(0.05)


# -- readiness checks ------------------------------------------------------------------


def _wait_until(
    probe: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes],
    deadline: float,
    should_stop: Callable[[], bool],
) -> None:
    while True:
        if should_stop():
            raise Stopping()
        if process.poll() is not None:
            raise SupervisorError(f"{what} exited with code {process.returncode}")
        if probe():
            return
        if time.monotonic() > deadline:
            raise SupervisorError(f"{what} did not answer in time")
        time.sleep(0.1)


def redis_ready(url: str) -> ReadyCheck:
    """Ready once the server answers PING, or refuses it for its disk (not while it is still
    replaying its AOF)."""
    import redis

    def check(
        process: subprocess.Popen[bytes], deadline: float, should_stop: Callable[[], bool]
    ) -> None:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)

        def probe() -> bool:
            try:
                return bool(client.ping())
            except redis.ResponseError as exc:
                # MISCONF (its disk refuses writes; PING is refused too): it runs and serves
                # reads, and takes writes again by itself once the disk does.
                return str(exc).startswith("MISCONF")
            except redis.RedisError:
                return False

        try:
            _wait_until(probe, "the Redis server", process, deadline, should_stop)
        finally:
            client.close()

    return check


def http_ready(host: str, port: int, path: str = "/healthz") -> ReadyCheck:
    """Ready once the server answers ``GET path`` at all (a 503 from /healthz is an answer:
    the server runs, and its body says what it is missing)."""
    import http.client

    def check(
        process: subprocess.Popen[bytes], deadline: float, should_stop: Callable[[], bool]
    ) -> None:
        def probe() -> bool:
            conn = http.client.HTTPConnection(host, port, timeout=2)
            try:
                conn.request("GET", path)
                conn.getresponse().read()
                return True
            except OSError:
                return False
            finally:
                conn.close()

        _wait_until(probe, f"the server on {host}:{port}", process, deadline, should_stop)

    return check
