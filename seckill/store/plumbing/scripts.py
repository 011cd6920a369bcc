"""The Lua scripts of ``lua/``, read once and registered once per client."""

from __future__ import annotations

import functools
from pathlib import Path

from redis.commands.core import Script

from seckill.resources import resource_dir
from seckill.store.plumbing.connection import Client


@functools.cache
def lua_source(name: str) -> str:
    """A script's text, each ``-- @include <part>`` line replaced by ``lua/include/<part>.lua``
    (itself expanded the same way): Redis runs one chunk per script, and this is how scripts
    share a piece of Lua."""
    return _expanded(resource_dir("lua") / f"{name}.lua") + "\n"


def _expanded(path: Path, depth: int = 0) -> str:
    if depth > 4:
        raise ValueError(f"{path.name}: includes nested too deep")
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-- @include "):
            part = line.removeprefix("-- @include ").strip()
            line = _expanded(resource_dir("lua") / "include" / f"{part}.lua", depth + 1).rstrip()
        lines.append(line)
    return "\n".join(lines)


class Scripts:
    """The Lua scripts registered once on one client (EVALSHA, reloaded on NOSCRIPT)."""

    def __init__(self, client: Client) -> None:
        self.purchase: Script = client.register_script(lua_source("purchase"))
        self.grab: Script = client.register_script(lua_source("grab"))
        self.create_activity: Script = client.register_script(lua_source("create_activity"))
        self.cancel: Script = client.register_script(lua_source("cancel"))
        self.confirm: Script = client.register_script(lua_source("confirm"))
        self.unlock: Script = client.register_script(lua_source("unlock"))
        self.restock: Script = client.register_script(lua_source("restock"))
        # The operator's levers, in the order sent (seckill/store/sale/controls.py).
        self.lever: Script = client.register_script(lua_source("lever"))
        self.lever_recorded: Script = client.register_script(lua_source("lever_recorded"))
        self.rate_limit: Script = client.register_script(lua_source("rate_limit"))
        # Sharded stock (seckill/store/plumbing/shards.py): borrowing between parts, and its
        # repairs.
        self.lend: Script = client.register_script(lua_source("lend"))
        self.settle: Script = client.register_script(lua_source("settle"))
        self.receive: Script = client.register_script(lua_source("receive"))
        self.release_claim: Script = client.register_script(lua_source("release_claim"))
        # The payment window (seckill/store/sale/payments.py).
        self.pay: Script = client.register_script(lua_source("pay"))
        self.expire: Script = client.register_script(lua_source("expire"))
        # Fair admission (seckill/store/sale/queue.py).
        self.queue_join: Script = client.register_script(lua_source("queue_join"))
        self.queue_status: Script = client.register_script(lua_source("queue_status"))
