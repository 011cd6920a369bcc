"""The Lua scripts of ``lua/``, read once and registered once per client."""

from __future__ import annotations

import functools
from pathlib import Path

from redis.commands.core import Script

from seckill.resources import resource_dir
from seckill.store.plumbing.connection import Client


@functools.cache
def lua_source(name: str) -> str:
    """A script's text, each ``-- @include <part>`` line replaced by ``lua/include/<part>.lua``:
    Redis runs one chunk per script, and this is how scripts share a piece of Lua. A part is
    inlined once per script, at its first ``@include``, and defines functions only
    (``check_include``): nothing of it runs, and nothing passes between files but arguments."""
    return _expanded(resource_dir("lua") / f"{name}.lua", set()) + "\n"


def _expanded(path: Path, seen: set[str], depth: int = 0) -> str:
    if depth > 4:
        raise ValueError(f"{path.name}: includes nested too deep")
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-- @include "):
            part = line.removeprefix("-- @include ").strip()
            if part in seen:
                continue
            seen.add(part)
            include = resource_dir("lua") / "include" / f"{part}.lua"
            check_include(include)
            line = _expanded(include, seen, depth + 1).rstrip()
        lines.append(line)
    return "\n".join(lines)


def check_include(path: Path) -> None:
    """Raise ValueError unless every top-level line of the include is a comment, an
    ``@include``, a ``local function ...`` or the ``end`` closing one: its functions are then
    all it adds to a script (a top-level statement, a ``return`` or a shared variable ran or
    leaked into every includer's chunk)."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line or line[0].isspace() or line.startswith(("--", "local function ")):
            continue
        if line.rstrip() == "end":
            continue
        raise ValueError(f"{path.name}:{number}: an include defines functions only: {line!r}")


class Scripts:
    """Every Lua script of ``lua/``, registered once on one client (EVALSHA, reloaded on
    NOSCRIPT): this is the one place a script is registered."""

    def __init__(self, client: Client) -> None:
        self.purchase: Script = client.register_script(lua_source("purchase"))
        self.grab: Script = client.register_script(lua_source("grab"))
        self.create_activity: Script = client.register_script(lua_source("create_activity"))
        self.cancel: Script = client.register_script(lua_source("cancel"))
        self.confirm: Script = client.register_script(lua_source("confirm"))
        self.unlock: Script = client.register_script(lua_source("unlock"))
        self.restock: Script = client.register_script(lua_source("restock"))
        # The operator's levers, in the order sent (seckill/store/sale/activity/controls.py).
        self.lever: Script = client.register_script(lua_source("lever"))
        self.lever_recorded: Script = client.register_script(lua_source("lever_recorded"))
        self.rate_limit: Script = client.register_script(lua_source("rate_limit"))
        # Sharded stock (seckill/store/plumbing/parts.py): borrowing between parts, and its
        # repairs.
        self.lend: Script = client.register_script(lua_source("lend"))
        self.settle: Script = client.register_script(lua_source("settle"))
        self.receive: Script = client.register_script(lua_source("receive"))
        self.release_claim: Script = client.register_script(lua_source("release_claim"))
        # The payment window (seckill/store/sale/orders/payments.py).
        self.pay: Script = client.register_script(lua_source("pay"))
        self.expire: Script = client.register_script(lua_source("expire"))
        # Fair admission (seckill/store/sale/admission/queue.py).
        self.queue_join: Script = client.register_script(lua_source("queue_join"))
        self.queue_status: Script = client.register_script(lua_source("queue_status"))
        # The orders worker's upkeep of its consumer group (seckill/worker/groups.py).
        self.forget_consumers: Script = client.register_script(lua_source("forget_consumers"))
        # A meta hash from before the `unlimited` flag gets it
        # (seckill/store/sale/activity/recovery.py).
        self.migrate_unlimited: Script = client.register_script(lua_source("migrate_unlimited"))
