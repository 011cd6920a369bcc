"""How the Lua scripts are put together: every script registered in one place (``Scripts``),
each include a set of functions inlined once, the sale scripts' fields read by name."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock

import pytest

from seckill.resources import resource_dir
from seckill.store.plumbing.scripts import Scripts, check_include, lua_source

LUA = resource_dir("lua")


def test_every_script_is_registered_in_one_place() -> None:
    client = MagicMock()
    scripts = Scripts(client)
    names = {path.stem for path in LUA.glob("*.lua")}
    registered = {name for name in names if isinstance(getattr(scripts, name, None), MagicMock)}
    assert registered == names
    assert client.register_script.call_count == len(names)


@pytest.mark.parametrize("include", sorted(p.stem for p in (LUA / "include").glob("*.lua")))
def test_an_include_defines_functions_only(include: str) -> None:
    check_include(LUA / "include" / f"{include}.lua")


def test_top_level_code_in_an_include_is_refused(tmp_path: Path) -> None:
    for body in ("local now_ms = 1\n", "return {'x'}\n", "redis.call('GET', KEYS[1])\n"):
        part = tmp_path / "part.lua"
        part.write_text("-- a part\nlocal function f()\n  return 1\nend\n" + body)
        with pytest.raises(ValueError, match="functions only"):
            check_include(part)


@pytest.mark.parametrize("name", sorted(p.stem for p in LUA.glob("*.lua")))
def test_an_include_is_inlined_once_and_every_header_states_the_contract(name: str) -> None:
    source = lua_source(name)
    assert "-- @include" not in source
    functions = [line for line in source.splitlines() if line.startswith("local function ")]
    assert len(functions) == len(set(functions)), name
    header = (LUA / f"{name}.lua").read_text().split("\n\n")[0]
    assert "KEYS" in header and "ARGV" in header and "Returns" in header, name


def test_the_sale_scripts_read_the_activity_by_name() -> None:
    for name in ("purchase", "grab", "cancel", "expire", "restock", "settle", "lend", "lever"):
        assert "meta[" not in lua_source(name), name
