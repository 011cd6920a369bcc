"""The ``seckill`` command for the tests: in this process (:func:`seckill`), the way Flask and
rq test their command lines, or as a real process (:func:`seckill_process`) where only a process
will do.

In this process a command sees what the installed script would: exactly the clean environment
of the call (:func:`clean_environ`), an empty standard input, its own standard output and error,
and Python's logging as a fresh process has it (no handler: a warning or worse is written on
standard error, as the last-resort handler writes it). Whatever the command changes of these is
put back afterwards, so that the next call, or test, in the same worker starts clean.

The commands that run until stopped, install signal handlers or start children (``up``,
``drill``, ``worker``, ``webhooks run``, ``nginx exporter``) are refused here: those run as a
process, through :func:`seckill_process`; ``seckill up`` through :func:`seckill_up` (a free
port, waited on until healthy, everything it started killed by PID at the end), which
:func:`call` then asks over HTTP.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from seckill.ops.stack.ports import free_listen_port

# The console script pip installed next to this interpreter (not resolved: that leaves the venv).
SECKILL = Path(sys.executable).parent / "seckill"
# (SECKILL_PORT_SLICE stays: a parallel worker's commands draw ports from its slice.)
OUR_VARS = re.compile(r"(SECKILL_(?!PORT_SLICE$)|GUNICORN_|REDIS_URL$|DATABASE_URL$"
                      r"|PROMETHEUS_MULTIPROC_DIR$)")

# Commands (with their verb) that need a process of their own: they run until stopped, install
# signal handlers, start or exec children, or configure the process's logging for good.
PROCESS_ONLY = frozenset({("up",), ("drill",), ("worker",), ("webhooks", "run"),
                          ("nginx", "exporter")})
# How long the threads a command started may take to end once it returned (its services
# closed): one still running then is a leak a process's exit would have hidden.
THREADS_END_WITHIN = 5.0


def clean_environ(**extra: str) -> dict[str, str]:
    """The test process's environment without any gateway setting, plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if not OUR_VARS.match(k)}
    return {**base, **extra}


def seckill(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``seckill *args`` with only ``env`` set (on top of :func:`clean_environ`), run in this
    process through ``seckill.ops.cli.main``; its exit code and output as a finished process's.
    An exception that escapes ``main`` (the real script would print a traceback) is raised
    here, with the command's output noted on it."""
    from seckill.ops.cli import main

    words = [a for a in args if not a.startswith("-")]
    if tuple(words[:1]) in PROCESS_ONLY or tuple(words[:2]) in PROCESS_ONLY:
        raise AssertionError(f"`seckill {' '.join(words[:2])}` needs a process of its own: "
                             "use seckill_process()")
    stdout, stderr = io.StringIO(), io.StringIO()
    threads = set(threading.enumerate())
    try:
        with (_environment(clean_environ(**env)), _stdin_empty(),
              contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr),
              _logging_as_in_a_fresh_process(stderr)):
            try:
                code = _exit_code(main(list(args)), stderr)
            except SystemExit as exc:
                code = _exit_code(exc.code, stderr)
    except BaseException as exc:
        exc.add_note(f"seckill {' '.join(args)}\n-- stdout --\n{stdout.getvalue()}"
                     f"-- stderr --\n{stderr.getvalue()}")
        raise
    _check_threads_ended(threads, args)
    return subprocess.CompletedProcess(list(args), code, stdout.getvalue(), stderr.getvalue())


def seckill_process(*args: str, env: dict[str, str], cwd: Path | None = None,
                    timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``seckill *args`` as a real process (the installed console script) with only ``env``
    set on top of :func:`clean_environ`: for what needs a process (``up``), and the smoke tests
    of the script itself."""
    return subprocess.run(
        [str(SECKILL), *args], env=clean_environ(**env), cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("seckill: "), lines[0]
    assert text in lines[0], lines[0]


# -- what a process would have had, and what is put back ----------------------------------


def _exit_code(code: object, stderr: io.StringIO) -> int:
    """The exit status of ``sys.exit(code)``: None is 0, an integer itself (modulo 256, as the
    kernel keeps it), anything else printed on standard error and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256
    print(code, file=stderr)
    return 1


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` exactly ``values`` inside the block; exactly as it was afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _stdin_empty() -> Iterator[None]:
    """Standard input at its end, never the terminal (``subprocess.DEVNULL``'s in a process)."""
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


OWN_LOGGERS = ("seckill", "edge")


@contextlib.contextmanager
def _logging_as_in_a_fresh_process(stderr: io.StringIO) -> Iterator[None]:
    """The root logger as a fresh process has it: no handler of its own, so a record of
    WARNING or above is written, its message alone, on standard error (what
    ``logging.lastResort`` does; here into ``stderr``), at the root's default level. Every
    logger's handlers, level and flags are put back afterwards, and a handler the command
    added to a logger made meanwhile is removed (``seckill aof repair`` adds one). The
    project's own loggers start as in a fresh process too, whatever this one set before."""
    manager = logging.Logger.manager
    saved = {
        name: (list(found.handlers), found.level, found.propagate, found.disabled)
        for name, found in [("", logging.getLogger()), *manager.loggerDict.items()]
        if isinstance(found, logging.Logger)
    }
    disabled = manager.disable
    root = logging.getLogger()
    last_resort = logging.StreamHandler(stderr)
    last_resort.setLevel(logging.WARNING)
    root.handlers[:] = [last_resort]
    root.setLevel(logging.WARNING)
    # Our own loggers as a fresh process has them: an app made earlier in this process sets
    # "seckill" to INFO (seckill.web.app), and its children would then say INFO too.
    for name, found in manager.loggerDict.items():
        if isinstance(found, logging.Logger) and name.split(".")[0] in OWN_LOGGERS:
            found.handlers[:] = []
            found.setLevel(logging.NOTSET)
            found.propagate, found.disabled = True, False
    logging.disable(logging.NOTSET)
    try:
        yield
    finally:
        for name, found in [("", root), *manager.loggerDict.items()]:
            if not isinstance(found, logging.Logger):
                continue
            if name in saved:
                handlers, level, propagate, was_disabled = saved[name]
                found.handlers[:] = handlers
                found.setLevel(level)
                found.propagate, found.disabled = propagate, was_disabled
            else:
                found.handlers[:] = [h for h in found.handlers
                                     if isinstance(h, logging.NullHandler)]
                found.setLevel(logging.NOTSET)
        logging.disable(disabled)


def _check_threads_ended(before: set[threading.Thread], args: tuple[str, ...]) -> None:
    """The threads the command started end soon after it returned: its services are closed.
    A process would have ended them with itself; in this one they would run on."""
    deadline = time.monotonic() + THREADS_END_WITHIN
    left = [t for t in threading.enumerate() if t not in before]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = [t.name for t in left if t.is_alive()]
    assert not running, f"`seckill {' '.join(args)}` left threads running: {running}"


def call(port: int, method: str, path: str, token: str | None = None,
         body: Any = None) -> tuple[int, Any]:
    """A JSON request to ``127.0.0.1:port`` (a ``seckill up`` stack's listener); its status and
    body, or ``(0, None)`` when nothing answered."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())
    except OSError:
        return 0, None


def wait_healthy(port: int, up: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Wait until ``seckill up`` on ``port`` answers ``/healthz``; fail if it exits or
    ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert up.poll() is None, f"seckill up exited: {log.read_text()}"
        if call(port, "GET", "/healthz")[0] == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"no healthy answer on {port} in {timeout}s: {log.read_text()}")


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie; ``is_running`` also guards against a reused PID."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def seckill_up(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[
    tuple[subprocess.Popen[bytes], int, Path, list[psutil.Process]]
]:
    """Run ``seckill up`` on a free port until healthy; yield it, its port, its log, and a
    list the test fills with the processes it saw (all of them are checked gone at the end,
    and killed by PID if a failing test left them)."""
    port = free_listen_port()
    log = tmp_path / "up.log"
    seen: list[psutil.Process] = []
    with log.open("wb") as sink:
        up = subprocess.Popen(
            [str(SECKILL), "up", "--port", str(port), *args],
            env=clean_environ(**env), stdin=subprocess.DEVNULL, stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(port, up, log, timeout=60)
        deadline = time.monotonic() + 10  # the banner follows the last child's readiness
        while "seckill is up on" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "seckill is up on" in log.read_text(), log.read_text()
        yield up, port, log, seen
    finally:
        if up.poll() is None:
            seen.extend(psutil.Process(up.pid).children(recursive=True))
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait(10)
        for process in seen:
            if alive(process):
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()


def stop_and_check_nothing_is_left(
    up: subprocess.Popen[bytes], log: Path, seen: list[psutil.Process]
) -> None:
    """SIGTERM ``seckill up``: it must exit 0 within 15 s, say it stopped, and leave
    none of the processes in ``seen`` running."""
    seen.extend(psutil.Process(up.pid).children(recursive=True))
    started = time.monotonic()
    up.send_signal(signal.SIGTERM)
    assert up.wait(15) == 0, log.read_text()
    assert time.monotonic() - started < 15
    left = [p for p in seen if alive(p)]
    assert not left, [(p.pid, p.cmdline()) for p in left]
    assert "seckill-up INFO stopped" in log.read_text()
