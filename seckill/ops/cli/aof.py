"""``seckill aof repair PATH [--dry-run]``: the AOF repair of :mod:`seckill.ops.stack.aof` for an
operator's stopped server (or a ``seckill up`` data folder)."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from seckill import logs
from seckill.ops.stack import aof


def _held_open(path: Path) -> bool:
    """Whether a process we can see has ``path`` open (a server still appending to it)."""
    target = str(path.resolve())
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fd_dir.iterdir()):
                return True
        except OSError:
            continue
    return False


def cmd_aof_repair(args: argparse.Namespace) -> int:
    """``seckill aof repair PATH [--dry-run]``: repair every multi-part AOF under PATH (a
    manifest, or a folder searched for manifests, e.g. a ``seckill up`` data folder), or one
    old-style AOF file; then valkey-check-aof. 0 repaired or nothing to do, 1 otherwise."""
    if not aof.log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logs.Formatter("seckill-aof", logs.json_wanted()))
        aof.log.addHandler(handler)
        aof.log.setLevel(logging.INFO)
    target = Path(args.path)
    if not target.exists():
        print(f"seckill: no such file or folder: {target}", file=sys.stderr)
        return 2
    manifests = ([target] if target.suffix == ".manifest" else
                 sorted(target.rglob("*.manifest")) if target.is_dir() else [])
    files = [path for manifest in manifests for path in aof.manifest_files(manifest)]
    if not manifests:
        files = [target] if target.is_file() else []
    busy = [path for path in files if path.is_file() and _held_open(path)]
    if busy and not args.dry_run:
        print(f"seckill: a running server has {busy[0]} open: stop it first", file=sys.stderr)
        return 1
    failed = False
    for path in files:
        try:
            cuts = aof.repair_file(path, args.dry_run) if path.is_file() else ()
        except (OSError, aof.AofFormatError) as exc:
            print(f"{path}: cannot repair: {exc}")
            failed = True
            continue
        print(f"{path}: {len(cuts)} cut(s)" + (" (dry run)" if args.dry_run and cuts else ""))
    if not args.dry_run:
        from seckill.ops.stack.embedded import valkey_binary

        for manifest in manifests or files:
            try:
                valid, said = aof.check(manifest, valkey_binary())
            except (FileNotFoundError, subprocess.SubprocessError) as exc:
                print(f"{manifest}: not checked ({exc})")
                continue
            print(f"{manifest}: valkey-check-aof: {'valid' if valid else said}")
            failed = failed or not valid
    return 1 if failed else 0
