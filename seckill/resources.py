"""The files the package ships besides Python: the Lua scripts, the nginx template and the
front ends (the sale page, the operator console).

They live at the top of the repository (``lua/``, ``nginx/``, ``frontends/``); ``seckill/_files``
links to them, and the wheel copies what the links point at. So the one lookup below finds them
the same way in a checkout, an editable install and an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

_FILES = Path(__file__).resolve().parent / "_files"


def resource_dir(name: str) -> Path:
    """``lua``, ``nginx`` or ``frontends``: the folder of that name the package ships."""
    folder = _FILES / name
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is missing: the package was not installed whole")
    return folder
