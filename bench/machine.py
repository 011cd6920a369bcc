"""What a benchmark ran on, for the reports in ``bench/results/``."""

from __future__ import annotations

import os
import platform
import sys
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
