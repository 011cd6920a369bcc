"""Freezing a child process at a chosen moment, for the tests that kill -9 it there."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from tests.support.timing import wait_until


def stopped(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGSTOP ``process`` and return once the kernel has stopped every thread of it. The
    signal is only queued when ``send_signal`` returns: a check made before the stop lands
    reads a state the process may still change (an acknowledgement sent in between)."""
    process.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not all_threads_stopped(process.pid):
        if process.poll() is not None:
            return  # gone: the caller's check says so
        if time.monotonic() > deadline:
            raise AssertionError(f"process {process.pid} not stopped {timeout:g} s after SIGSTOP")
        time.sleep(0.0005)


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (``T`` in /proc)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as stat:
                text = stat.read()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        if text[text.rindex(")") + 2] not in "Tt":
            return False
    return True


def freeze_where(process: subprocess.Popen[bytes], holds: Callable[[], bool], what: str,
                 interval: float = 0.002, tries: int = 500,
                 not_there: tuple[type[Exception], ...] = ()) -> None:
    """Leave ``process`` frozen (SIGSTOP) at a moment ``holds()`` is true of the frozen state:
    wait until it looks so, stop it, check again, else let it run and try again. One of
    ``not_there`` raised by ``holds()`` once frozen (a database the frozen process holds
    locked) counts as not that moment. AssertionError naming ``what`` if no try lands there."""
    for _ in range(tries):
        wait_until(holds, 30, interval=interval, what=what)
        stopped(process)
        try:
            if holds():
                return
        except not_there:
            pass
        process.send_signal(signal.SIGCONT)
    raise AssertionError(f"never frozen {what} in {tries} tries")
