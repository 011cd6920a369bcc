"""One log format for every process of the stack, and repeated lines collapsed.

A line is ``<UTC time, ms> <component> <LEVEL> <message>``; with ``SECKILL_LOG_FORMAT=json``
one JSON object per line (``ts``, ``component``, ``level``, ``message``, and ``logger``; a
structured line, as the audit trail's, adds its ``fields``). The component names the process
(``seckill-up``, ``gunicorn-1``, ``orders-worker``), so the merged output of ``seckill up``
says who wrote each line.

When Redis goes away every request that meets it logs the same warning: a burst of identical
lines says nothing more than its first one. :class:`CollapseRepeats` prints the first, holds
the repeats of the same logger, level and message template for ``window`` seconds, then prints
one line ``... x94 in 0.6 s`` (with the multiplication sign) for them (never a record marked
``never_collapse``: each line of the audit trail is one action). What differed between
the repeats (the users, the activities) is in that line, every value once:
``... x3 in 0.2 s: rate limit not checked for {u1, u2, u3} (fails open): {refused x2, timeout}``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

JSON_ENV = "SECKILL_LOG_FORMAT"
REPEATS_WINDOW = 1.0  # seconds a burst of one repeated line is held before its summary


def json_wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether ``SECKILL_LOG_FORMAT`` asks for JSON lines (``text``, the default, or ``json``)."""
    return (environ if environ is not None else os.environ).get(JSON_ENV, "").lower() == "json"


def stamp(seconds: float) -> str:
    """A Unix time as ISO 8601 UTC with milliseconds: ``2026-11-24T20:12:23.123Z``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def line(component: str, level: str, message: str, as_json: bool, at: float | None = None,
         **extra: Any) -> str:
    """One log line in the stack's format (at ``at``, a Unix time; default now)."""
    when = stamp(time.time() if at is None else at)
    if as_json:
        return json.dumps({"ts": when, "component": component, "level": level,
                           "message": message, **extra}, ensure_ascii=False)
    return f"{when} {component} {level} {message}"


class Formatter(logging.Formatter):
    """The stack's line format (text or JSON) for one component."""

    def __init__(self, component: str, as_json: bool = False) -> None:
        super().__init__()
        self.component = component
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line (a traceback, if any, follows it; inside the JSON). In
        text a message's own line breaks are written ``\\n``: a database error's text carries
        its statement on a line of its own, which would otherwise start an unframed line."""
        message = record.getMessage()
        if not self.as_json:
            message = message.replace("\r", "\\r").replace("\n", "\\n")
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        extra: dict[str, Any] = {"logger": record.name} if self.as_json else {}
        fields = getattr(record, "fields", None)
        if self.as_json and isinstance(fields, dict):  # a structured line (the audit trail's)
            extra["fields"] = fields
        return line(self.component, record.levelname, message, self.as_json, record.created,
                    **extra)


# One %-conversion of a message template (logging's own style), "%%" included.
_CONVERSION = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?"
                         r"[diouxXeEfFgGcrsa%]")


class _Burst:
    __slots__ = ("first", "held", "last", "messages", "record", "values")

    def __init__(self, record: logging.LogRecord, at: float) -> None:
        self.record = record
        self.first = at
        self.last = at
        self.held = 0
        # Of the held repeats: each argument's texts, and each whole message, with counts in
        # the order first seen (dicts keep it).
        self.values: list[dict[str, int]] | None = []
        self.messages: dict[str, int] = {}

    def hold(self, record: logging.LogRecord, at: float) -> None:
        """Count a repeat, keeping what it said."""
        self.held += 1
        self.last = at
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # its arguments do not fit: the handler will say so
            message = str(record.msg)
        self.messages[message] = self.messages.get(message, 0) + 1
        texts = _argument_texts(record)
        if texts is None or self.values is None or (self.values and len(texts) != len(
                self.values)):
            self.values = None  # not by position: the summary lists whole messages
            return
        if not self.values:
            self.values = [{} for _ in texts]
        for seen, text in zip(self.values, texts, strict=True):
            seen[text] = seen.get(text, 0) + 1

    def summary(self) -> str:
        """The held repeats as one message: the template with each argument's values (one
        value as itself, several as ``{a, b x3}``), or else every distinct message."""
        if len(self.messages) == 1:
            return next(iter(self.messages))
        if not self.values:
            return "{" + _counted(self.messages) + "}"
        template = str(self.record.msg)
        pieces = iter(self.values)  # one per conversion but "%%" (_argument_texts)
        out: list[str] = []
        done = 0
        for match in _CONVERSION.finditer(template):
            out.append(template[done:match.start()])
            done = match.end()
            if match.group() == "%%":
                out.append("%")
                continue
            seen = next(pieces)
            out.append(next(iter(seen)) if len(seen) == 1 else "{" + _counted(seen) + "}")
        out.append(template[done:])
        return "".join(out)


def _counted(seen: dict[str, int]) -> str:
    """``a, b \u00d73``: each text once, with its count when it came more than once."""
    return ", ".join(text if n == 1 else f"{text} \u00d7{n}" for text, n in seen.items())


def _argument_texts(record: logging.LogRecord) -> list[str] | None:
    """Each positional argument as the template writes it, or None when that cannot be
    told (a mapping, a ``*`` width, a mismatch)."""
    args = record.args
    if not isinstance(args, tuple):
        return None if args else []
    conversions = [c for c in _CONVERSION.findall(str(record.msg)) if c != "%%"]
    if len(conversions) != len(args) or any("*" in c or "(" in c for c in conversions):
        return None
    try:
        return [conversion % (arg,) for conversion, arg in zip(conversions, args, strict=True)]
    except (TypeError, ValueError):
        return None


class CollapseRepeats(logging.Filter):
    """Let the first of identical records through, hold its repeats for ``window`` seconds,
    then emit one summary record (``... xN in T s``) through ``handler``."""

    def __init__(self, handler: logging.Handler, window: float = REPEATS_WINDOW,
                 clock: Any = time.monotonic) -> None:
        super().__init__()
        self.handler = handler
        self.window = window
        self.clock = clock
        self._bursts: dict[tuple[str, int, str], _Burst] = {}
        self._lock = threading.Lock()
        self._flusher: threading.Thread | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a repeat inside its burst's window (it is counted instead)."""
        if getattr(record, "collapsed_summary", False) or getattr(record, "never_collapse",
                                                                  False):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        with self._lock:
            due = self._due(now)
            burst = self._bursts.get(key)
            if burst is not None and now - burst.first < self.window:
                burst.hold(record, now)
                passes = False
            else:
                if burst is not None and burst.held:
                    due.append(burst)
                self._bursts[key] = _Burst(record, now)
                passes = True
        self._emit(due)
        self._start_flusher()
        return passes

    def flush(self) -> None:
        """Emit the summaries of the bursts whose window is over."""
        with self._lock:
            due = self._due(self.clock())
        self._emit(due)

    def _due(self, now: float) -> list[_Burst]:
        """Under the lock: take out the bursts whose window is over."""
        over = [key for key, b in self._bursts.items() if now - b.first >= self.window]
        return [b for b in (self._bursts.pop(key) for key in over) if b.held]

    def _emit(self, bursts: list[_Burst]) -> None:
        for burst in bursts:
            first = burst.record
            summary = logging.LogRecord(
                first.name, first.levelno, first.pathname, first.lineno,
                "\u2026 \u00d7%d in %.1f s: %s", (burst.held, burst.last - burst.first,
                                         burst.summary()), None)
            setattr(summary, "collapsed_summary", True)  # noqa: B010  (a LogRecord attribute)
            self.handler.handle(summary)

    def _start_flusher(self) -> None:
        if self._flusher is not None:
            return
        with self._lock:
            if self._flusher is not None:
                return
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name="seckill-log-repeats")
        self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            time.sleep(self.window / 2)
            self.flush()


def handler(component: str, as_json: bool | None = None) -> logging.Handler:
    """A standard-error handler in the stack's format that collapses repeats."""
    made = logging.StreamHandler(sys.stderr)
    made.setFormatter(Formatter(component, json_wanted() if as_json is None else as_json))
    made.addFilter(CollapseRepeats(made))
    return made


def configure(component: str, level: int = logging.INFO) -> logging.Handler:
    """Make the root logger write the stack's format for ``component`` (replacing its
    handlers); returns the handler."""
    root = logging.getLogger()
    made = handler(component)
    root.handlers[:] = [made]
    root.setLevel(level)
    return made
