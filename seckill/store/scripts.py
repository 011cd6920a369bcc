"""The Lua scripts of ``lua/``, read once and registered once per client."""

from __future__ import annotations

import functools

import redis
from redis.commands.core import Script

from seckill.resources import resource_dir


@functools.cache
def lua_source(name: str) -> str:
    """A script's text, with each ``-- @include <part>`` line replaced by ``lua/include/<part>.lua``
    (Redis runs one chunk per script; this is how two scripts share one piece of Lua)."""
    folder = resource_dir("lua")
    lines = []
    for line in (folder / f"{name}.lua").read_text(encoding="utf-8").splitlines():
        if line.startswith("-- @include "):
            part = line.removeprefix("-- @include ").strip()
            line = (folder / "include" / f"{part}.lua").read_text(encoding="utf-8").rstrip()
        lines.append(line)
    return "\n".join(lines) + "\n"


class Scripts:
    """The Lua scripts registered once on one client (EVALSHA, reloaded on NOSCRIPT)."""

    def __init__(self, client: redis.Redis) -> None:
        self.purchase: Script = client.register_script(lua_source("purchase"))
        self.grab: Script = client.register_script(lua_source("grab"))
        self.create_activity: Script = client.register_script(lua_source("create_activity"))
        self.cancel: Script = client.register_script(lua_source("cancel"))
        self.confirm: Script = client.register_script(lua_source("confirm"))
        self.unlock: Script = client.register_script(lua_source("unlock"))
        self.restock: Script = client.register_script(lua_source("restock"))
        self.rate_limit: Script = client.register_script(lua_source("rate_limit"))
