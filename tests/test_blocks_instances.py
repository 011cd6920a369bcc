"""Blocks across real gateway processes: two gunicorn instances of two gevent workers
each, on one Valkey and one database, as ``seckill up`` runs them. A block made through one
instance refuses the buyer in every process within a second (and a lift lets them in again);
a block on a person refuses every account whose token names that person; blocks survive a
restart of the gateway.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import urllib3

from edge.identity import mint_user_token
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.instances import WITHIN, call, settled, watch
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN, ADMIN_TOKEN, JWT_SECRET

CLAIM = "person_id"  # SECKILL_PERSON_CLAIM of these gateways


@dataclass
class Gateway:
    """The instances' base URLs and their common environment."""

    bases: list[str]
    env: dict[str, str]


def environment(valkey: EmbeddedValkey, folder: Path) -> dict[str, str]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    # The per-user limit out of reach: the watch below asks for one user's URL in a tight
    # loop on both instances (over 1,000 a second once the lift is heard), and a 429 from the
    # limit is not the block's answer (it failed the lift's "within a second" at 1.002 s).
    return {**gateway_env(valkey.url, prefix, folder / "data",
                          f"sqlite:///{folder / 'orders.db'}", "1000000/second"),
            "SECKILL_PERSON_CLAIM": CLAIM}


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Gateway]:
    env = environment(valkey, tmp_path_factory.mktemp("blocks-instances"))
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(gunicorn_server({**env, "SECKILL_INSTANCE": name},
                                                     workers=2))
                 for name in ("inst-a", "inst-b")]
        yield Gateway(bases, env)


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pool = urllib3.PoolManager(maxsize=8)
    yield pool
    pool.clear()


def bearer(uid: str, person: str | None = None) -> dict[str, str]:
    claims: dict[str, object] = {} if person is None else {CLAIM: person}
    return {"Authorization": f"Bearer {mint_user_token(uid, JWT_SECRET, 600, claims=claims)}"}


def activity(http: urllib3.PoolManager, base: str) -> str:
    aid = f"a{uuid.uuid4().hex[:10]}"
    status, body = call(http, "POST", f"{base}/admin/activities", ADMIN,
                        {"id": aid, "name": "Drop", "total": 100, "starts_at": iso(-60),
                         "ends_at": iso(3600)})
    assert status == 201, body
    return aid


def url_of(bases: list[str], aid: str) -> list[str]:
    """Each instance's purchase URL request for ``aid``."""
    return [f"{base}/seckill/url?activity={aid}" for base in bases]


def test_a_block_and_its_lift_reach_every_process_within_a_second(gateway, http):
    a, b = gateway.bases
    aid = activity(http, a)
    mallory = bearer("mallory")
    for _ in range(8):  # every worker of both instances has read the blocks by now
        for base in gateway.bases:
            assert call(http, "GET", f"{base}/seckill/url?activity={aid}", mallory)[0] == 200
    status, made = call(http, "POST", f"{a}/admin/blocks", ADMIN, {"user": "mallory"})
    assert status == 201, made
    blocked = settled(watch(http, url_of(gateway.bases, aid), mallory, time.monotonic(),
                            WITHIN + 0.4), 403)
    assert call(http, "GET", f"{b}/seckill/url?activity={aid}", bearer("alice"))[0] == 200

    status, _ = call(http, "DELETE", f"{b}/admin/blocks/user/mallory", ADMIN)
    assert status == 200
    lifted = settled(watch(http, url_of(gateway.bases, aid), mallory, time.monotonic(),
                           WITHIN + 0.4), 200)
    print(f"blocked everywhere {blocked:.3f} s after the 201; let in {lifted:.3f} s after the "
          "lift's 200")


def test_a_block_on_a_person_refuses_every_account_of_theirs(gateway, http):
    a, b = gateway.bases
    aid = activity(http, a)
    farm = [bearer(f"farm{n}", "person-7") for n in range(2)]
    status, made = call(http, "POST", f"{b}/admin/blocks", ADMIN,
                        {"person": "person-7", "activity": aid, "reason": "account farm"})
    assert (status, made["person"], made["activity"]) == (201, "person-7", aid)
    time.sleep(WITHIN)  # let every process hear it (the first test measures how soon)
    for base in gateway.bases:
        for headers in farm:
            status, body = call(http, "GET", f"{base}/seckill/url?activity={aid}", headers)
            assert (status, body["error"]) == (403, "blocked")
        # Another person, and an account whose token names no person, are let through.
        for headers in (bearer("farm9", "person-8"), bearer("farm0")):
            assert call(http, "GET", f"{base}/seckill/url?activity={aid}", headers)[0] == 200
    # The block is on that activity only.
    other = activity(http, a)
    assert call(http, "GET", f"{a}/seckill/url?activity={other}", farm[0])[0] == 200


def test_blocks_survive_a_restart_of_the_gateway(valkey, tmp_path, http):
    env = environment(valkey, tmp_path)
    with gunicorn_server({**env, "SECKILL_INSTANCE": "before"}, workers=1) as base:
        aid = activity(http, base)
        status, _ = call(http, "POST", f"{base}/admin/blocks", ADMIN,
                         {"user": "mallory", "reason": "chargebacks"})
        assert status == 201
    with gunicorn_server({**env, "SECKILL_INSTANCE": "after"}, workers=1) as base:
        # The first answers of the new processes already refuse.
        status, body = call(http, "GET", f"{base}/seckill/url?activity={aid}",
                            bearer("mallory"))
        assert (status, body["error"]) == (403, "blocked")
        assert call(http, "GET", f"{base}/seckill/url?activity={aid}", bearer("alice"))[0] == 200
        status, listed = call(http, "GET", f"{base}/admin/blocks", ADMIN)
        assert (status, [(b["user"], b["reason"]) for b in listed["blocks"]]) == (
            200, [("mallory", "chargebacks")])


def test_the_console_lists_the_blocks(gateway, http, new_page):
    from playwright.sync_api import expect as see

    a, _ = gateway.bases
    aid = activity(http, a)
    for body in ({"user": "console-u1", "activity": aid, "reason": "<b>not bold</b>"},
                 {"person": "console-p1"}):
        assert call(http, "POST", f"{a}/admin/blocks", ADMIN, body)[0] == 201
    tab = new_page()
    tab.goto(f"{a}/admin/")
    tab.get_by_label("Operator token").fill(ADMIN_TOKEN)
    tab.get_by_role("button", name="Open the console").click()
    row = tab.locator(f'#blocks tr[data-block="user:console-u1@{aid}"]')
    see(row).to_contain_text("account console-u1")
    see(row).to_contain_text(aid)
    see(row.locator("td").nth(2)).to_have_text("<b>not bold</b>")  # text, not HTML
    see(tab.locator('#blocks tr[data-block="person:console-p1@"]')).to_contain_text(
        "person console-p1 (every account)every activity")
    assert call(http, "DELETE", f"{a}/admin/blocks/person/console-p1", ADMIN)[0] == 200
    see(tab.locator('#blocks tr[data-block="person:console-p1@"]')).to_have_count(0)
