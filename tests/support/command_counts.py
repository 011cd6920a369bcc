"""Commands sent to a Valkey, counted per connection (``CLIENT LIST``'s ``tot-cmds``): what
requests sent told apart from what the background threads sent (their connections are named
``seckill-background-*``). For a Valkey of the test's own (``private_valkey``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import BACKGROUND_CLIENT_PREFIX

OBSERVER = "test-observer"


@pytest.fixture
def observer(private_valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(private_valkey.url, decode_responses=True, client_name=OBSERVER)
    yield conn
    conn.close()


def commands_by_connection(observer: redis.Redis) -> dict[str, tuple[str, int]]:
    """Each connection's name and the commands it has sent, by id; the observer's own left
    out."""
    return {c["id"]: (c["name"], int(c["tot-cmds"])) for c in observer.client_list()
            if c["name"] != OBSERVER}


class Counts:
    """Commands sent between two ``CLIENT LIST`` snapshots: by the requests' connections, and
    by each background thread's (by name).

    Connections are matched by id, and told apart by their name in the second snapshot: a
    background connection caught by the first one between its connect and its ``CLIENT
    SETNAME`` is listed there without a name."""

    def __init__(self, before: dict[str, tuple[str, int]],
                 after: dict[str, tuple[str, int]]) -> None:
        # A request connection that went away would hide its commands: there must be none.
        gone = {(name, cid) for cid, (name, _) in before.items() if cid not in after
                and not name.startswith(BACKGROUND_CLIENT_PREFIX)}
        assert not gone, gone
        self.requests = 0
        self.background: dict[str, int] = {}
        for cid, (name, sent) in after.items():
            delta = sent - before.get(cid, (name, 0))[1]
            if name.startswith(BACKGROUND_CLIENT_PREFIX):
                self.background[name] = self.background.get(name, 0) + delta
            else:
                self.requests += delta
