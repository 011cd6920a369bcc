"""What a benchmark ran on, for the reports in ``bench/results/``."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cores() -> int:
    """What ``nproc`` says: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def versions(*packages: str) -> str:
    found = []
    for name in packages:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def describe(*packages: str) -> str:
    """One Markdown line: cores, CPU, OS, Python and the given packages' versions."""
    python = f"Python {sys.version.split()[0]}"
    extra = f", {versions(*packages)}" if packages else ""
    return (
        f"{cores()} cores (nproc), {cpu_model()}, {platform.system()} "
        f"{platform.release()}, {python}{extra}"
    )


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (``os.getloadavg``)."""
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def wrk_version() -> str:
    """What ``wrk --version`` says, without the copyright; "?" when it says nothing."""
    import subprocess

    done = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10,
                          check=False)
    first = (done.stdout or done.stderr).splitlines()
    return first[0].split(" Copyright")[0].removeprefix("wrk ").strip() if first else "?"


def processes() -> dict[int, tuple[int, int]]:
    """Every process on the machine: pid -> (its parent's pid, the CPU ticks it used, utime +
    stime), from ``/proc/<pid>/stat``."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                rest = stat.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
        except (OSError, IndexError, ValueError):
            continue
    return table


class CpuMeter:
    """How much CPU *other* processes used during a run: the machine's busy time (/proc/stat)
    minus ours (this process and its descendants: Valkey, gunicorn and its workers, wrk).
    On a shared machine this says how much a run's figures were disturbed."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.me = os.getpid()

    @staticmethod
    def _machine_busy() -> int:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle  # user..steal; guest time is already in user

    def _descendants(self) -> dict[int, int]:
        """CPU ticks of every live descendant of this process, by pid."""
        table = processes()
        parents = {pid: parent for pid, (parent, _) in table.items()}
        ticks = {pid: used for pid, (_, used) in table.items()}
        ours: dict[int, int] = {}
        for pid in ticks:
            ancestor = parents.get(pid, 0)
            for _ in range(64):  # bounded walk up the process tree
                if ancestor <= 1 or ancestor == self.me:
                    break
                ancestor = parents.get(ancestor, 0)
            if ancestor == self.me:
                ours[pid] = ticks[pid]
        return ours

    def _own(self) -> float:
        me = os.times()
        return (me.user + me.system + me.children_user + me.children_system) * self.tick

    def start(self) -> tuple[int, dict[int, int], float, float]:
        return self._machine_busy(), self._descendants(), self._own(), time.monotonic()

    def spent(self, started: tuple[int, dict[int, int], float, float],
              roots: dict[str, int]) -> dict[str, float]:
        """CPU seconds that each root (a name -> the pid of a process this one started: a
        gunicorn master, Valkey) used since ``started``, its descendants included (a gunicorn's
        workers), from /proc: what a run cost each server, and so where a difference between
        two workloads goes. (It is no steadier than the requests per second: on a shared VM
        the CPU's own speed changes between rounds.)"""
        kids0 = started[1]
        table = processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        out: dict[str, float] = {}
        for name, root in roots.items():
            ticks, todo = 0, [root]
            for _ in range(4096):  # bounded walk down the process tree
                if not todo:
                    break
                pid = todo.pop()
                if pid in table:
                    ticks += table[pid][1] - kids0.get(pid, 0)
                    todo.extend(children.get(pid, ()))
            out[name] = ticks / self.tick
        return out

    def foreign_cores(self, started: tuple[int, dict[int, int], float, float]) -> float:
        """Cores' worth of CPU that other processes used since ``started``."""
        busy0, kids0, own0, t0 = started
        busy1, kids1, own1 = self._machine_busy(), self._descendants(), self._own()
        elapsed = max(time.monotonic() - t0, 1e-6)
        # Descendants alive at both ends; reaped children (wrk) are in os.times().
        kids = sum(kids1[pid] - kids0.get(pid, 0) for pid in kids1)
        ours = kids + (own1 - own0)
        return max(0.0, (busy1 - busy0 - ours) / self.tick / elapsed)
