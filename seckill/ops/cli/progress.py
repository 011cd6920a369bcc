"""A progress bar for long operator commands (the packets' push)."""

from __future__ import annotations

import time
from typing import TextIO


class ProgressBar:
    """Plain text on a stream: ``\\r`` updates on a terminal, a line per 10 % elsewhere."""

    def __init__(self, stream: TextIO, label: str, width: int = 30) -> None:
        self.stream = stream
        self.label = label
        self.width = width
        self.started = time.perf_counter()
        self._tty = stream.isatty()
        self._last_tenth = -1

    def __call__(self, done: int, total: int) -> None:
        """Show that ``done`` of ``total`` are done."""
        fraction = done / total if total else 1.0
        tenth = int(fraction * 10)
        if not self._tty and tenth == self._last_tenth:
            return
        self._last_tenth = tenth
        filled = int(fraction * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.started
        line = f"{self.label} [{bar}] {done}/{total} {fraction:4.0%} {elapsed:.1f}s"
        self.stream.write(("\r" + line) if self._tty else (line + "\n"))
        if self._tty and done >= total:
            self.stream.write("\n")
        self.stream.flush()
