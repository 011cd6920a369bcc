"""Named operators across real gateway processes: two gunicorn instances of two gevent workers
each, on one Valkey and one database, as ``seckill up`` runs them. A token made through one
instance works in every process within a second, and once revoked through the other it is
refused in every process within a second; the console, signed in with a viewer's token, says
who is signed in and shows no lever, while the API refuses the viewer's pause anyway."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.instances import WITHIN, call, settled, watch
from tests.support.operators import bearer
from tests.support.screenshots import shoot
from tests.support.servers import gunicorn_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN


@dataclass
class Gateway:
    """The instances' base URLs."""

    bases: list[str]


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("operators-instances")
    env = gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", folder / "data",
                      f"sqlite:///{folder / 'orders.db'}", "1000/second")
    with contextlib.ExitStack() as stack:
        yield Gateway([stack.enter_context(gunicorn_server({**env, "SECKILL_INSTANCE": name},
                                                           workers=2))
                       for name in ("inst-a", "inst-b")])


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pool = urllib3.PoolManager(maxsize=8)
    yield pool
    pool.clear()


def add(http: urllib3.PoolManager, base: str, role: str) -> tuple[str, dict[str, str]]:
    """A new operator of ``role``, made through ``base``: their name and headers."""
    name = f"{role}-{uuid.uuid4().hex[:8]}"
    status, made = call(http, "POST", f"{base}/admin/operators", ADMIN,
                        {"name": name, "role": role})
    assert status == 201, made
    return name, bearer(made["token"])


def whoami(bases: list[str]) -> list[str]:
    return [f"{base}/admin/whoami" for base in bases]


def test_a_token_works_and_once_revoked_is_refused_in_every_process_within_a_second(
        gateway, http) -> None:
    a, b = gateway.bases
    _, known = add(http, a, "viewer")
    for _ in range(8):  # every worker of both instances follows the operators by now
        for base in gateway.bases:
            assert call(http, "GET", f"{base}/admin/whoami", known)[0] == 200

    name, headers = add(http, a, "operator")
    made = settled(watch(http, whoami(gateway.bases), headers, time.monotonic(),
                         WITHIN + 0.4), 200)
    status, revoked = call(http, "DELETE", f"{b}/admin/operators/{name}", ADMIN)
    assert (status, revoked["revoked_by"]) == (200, "admin"), revoked
    gone = settled(watch(http, whoami(gateway.bases), headers, time.monotonic(),
                         WITHIN + 0.4), 401)
    print(f"a new token worked everywhere {made:.3f} s after the 201; a revoked one was "
          f"refused everywhere {gone:.3f} s after the 200")


def test_a_viewers_console_shows_who_is_signed_in_and_no_lever(gateway, http,
                                                                 new_page) -> None:
    from playwright.sync_api import expect as see

    a, b = gateway.bases
    aid = f"a{uuid.uuid4().hex[:10]}"
    status, _ = call(http, "POST", f"{a}/admin/activities", ADMIN,
                     {"id": aid, "name": "Drop", "total": 100, "starts_at": iso(-60),
                      "ends_at": iso(3600)})
    assert status == 201
    viewer, viewer_headers = add(http, a, "viewer")
    operator, operator_headers = add(http, a, "operator")

    tab = new_page()
    tab.goto(f"{b}/admin/")
    tab.get_by_label("Operator token").fill(viewer_headers["Authorization"].split()[1])
    tab.get_by_role("button", name="Open the console").click()
    see(tab.locator("#who")).to_have_text(f"Signed in as {viewer} (viewer) · reads only")
    card = tab.locator(f'li[data-activity="{aid}"]')
    see(card).to_contain_text("100 of 100 left")
    see(card.get_by_role("button")).to_have_count(0)  # no Pause, Resume or End now
    shoot(tab, "console-viewer.png")
    # The API refuses the viewer's pause anyway, naming the role needed.
    status, refused = call(http, "POST", f"{b}/admin/activities/{aid}/pause", viewer_headers)
    assert (status, refused["error"], refused["role_needed"]) == (403, "forbidden", "operator")
    assert "the operator role" in refused["message"], refused

    tab.get_by_role("button", name="Sign out").click()
    tab.get_by_label("Operator token").fill(operator_headers["Authorization"].split()[1])
    tab.get_by_role("button", name="Open the console").click()
    see(tab.locator("#who")).to_have_text(f"Signed in as {operator} (operator)")
    card.get_by_role("button", name="Pause").click()
    see(card.locator(".badge")).to_have_text("paused")
    status, shown = call(http, "GET", f"{a}/admin/activities/{aid}", viewer_headers)
    assert (status, shown["paused"]) == (200, True)
