"""The files the package ships besides Python: the Lua scripts and the nginx template.

They live at the top of the repository (``lua/``, ``nginx/``); ``seckill/_files`` links to
them, and the wheel copies what the links point at. So the one lookup below finds them the
same way in a checkout, an editable install and an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

_FILES = Path(__file__).resolve().parent / "_files"


def resource_dir(name: str) -> Path:
    """``lua`` or ``nginx``: the folder of that name the package ships."""
    folder = _FILES / name
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is missing: the package was not installed whole")
    return folder
