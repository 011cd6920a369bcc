"""The files the package ships besides Python: the Lua scripts and the nginx template."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Where ``lua/`` or ``nginx/`` lives: inside an installed wheel, or the source tree."""
    for candidate in (_PACKAGE_DIR / "_files" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cannot find the {name}/ folder next to {_PACKAGE_DIR}")
