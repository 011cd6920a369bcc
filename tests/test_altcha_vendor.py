"""The vendored ALTCHA widget (``frontends/sale_page/vendor/altcha/``, built by
``frontends/vendor/build.sh`` from the npm package pinned in
``frontends/vendor/package-lock.json``): the files are there, the widget is the locked version
and self-contained (no CDN, no import, its worker inlined), and in headless Chromium it solves
a challenge of ``seckill.store.sale.admission.challenge.Challenges`` that ``Challenges.verify``
accepts; nginx serves it as JavaScript."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import redis
import urllib3

from bench import altcha_solve
from seckill.ops.stack.ports import free_listen_port
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.admission.challenge import Challenges
from tests.support.servers import REPO_ROOT, nginx_server

VENDOR = REPO_ROOT / "frontends" / "sale_page" / "vendor" / "altcha"
BUILD = REPO_ROOT / "frontends" / "vendor"


def locked_version() -> str:
    lock = json.loads((BUILD / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["packages"][""]["dependencies"]["altcha"].startswith("~2."), lock
    return str(lock["packages"]["node_modules/altcha"]["version"])


def test_the_vendored_widget_is_the_locked_version() -> None:
    widget = (VENDOR / "altcha.js").read_text(encoding="utf-8")
    # The widget logs its version when it mounts: A("mounted", "<version>").
    assert re.findall(r'"mounted", "([0-9.]+)"', widget) == [locked_version()]
    assert locked_version() in (VENDOR / "README.md").read_text(encoding="utf-8")
    assert "MIT License" in (VENDOR / "LICENSE.txt").read_text(encoding="utf-8")
    package = json.loads((BUILD / "package.json").read_text(encoding="utf-8"))
    assert package["dependencies"] == {"altcha": "~2.2.4", "uplot": "~1.6.32"}
    assert "frontends/vendor/node_modules/" in (REPO_ROOT / ".gitignore").read_text().splitlines()


def test_the_vendored_widget_is_self_contained() -> None:
    widget = (VENDOR / "altcha.js").read_text(encoding="utf-8")
    assert re.search(r"^\s*import\b|\bimport\(|from \"", widget, re.MULTILINE) is None
    assert "https://cdn" not in widget
    # Its Web Worker is inlined and started from a blob: URL.
    assert "new Worker(t," in widget and "createObjectURL" in widget
    assert "crypto.subtle.digest" in widget
    assert sorted(p.name for p in VENDOR.iterdir()) == ["LICENSE.txt", "README.md", "altcha.js"]


def test_the_widget_solves_a_gateway_challenge_in_chromium(rds: redis.Redis, prefix: str,
                                                           chromium: Any) -> None:
    challenges = Challenges(rds, KeySpace(prefix), "test-altcha-secret-9f8e7d6c5b4a",
                            base=5_000, cap=5_000)
    with altcha_solve.serve_page() as url:
        page = altcha_solve.open_page(chromium, url)
        issued = challenges.issue("phone-sale", "alice")
        solved = altcha_solve.widget_solve(page, issued)
    assert solved["ms"] > 0
    challenges.verify("phone-sale", "alice", solved["payload"])


def test_nginx_serves_the_widget_as_javascript(tmp_path: Path) -> None:
    # Static files need no gateway: the backend is a port nobody listens on.
    with nginx_server([f"127.0.0.1:{free_listen_port()}"], tmp_path / "nginx") as proxy:
        answer = urllib3.request("GET", f"{proxy.base}/static/vendor/altcha/altcha.js",
                                 timeout=5, retries=False)
    assert answer.status == 200
    assert answer.headers["Content-Type"].split(";")[0] in {"application/javascript",
                                                            "text/javascript"}
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.data == (VENDOR / "altcha.js").read_bytes()


def test_the_consoles_chart_library_is_the_locked_uplot() -> None:
    """The operator console's uPlot (``frontends/console/vendor/``, built by the same script)."""
    lock = json.loads((BUILD / "package-lock.json").read_text(encoding="utf-8"))
    version = lock["packages"]["node_modules/uplot"]["version"]
    assert version.startswith("1.6.")
    console = REPO_ROOT / "frontends" / "console" / "vendor"
    assert sorted(p.name for p in console.iterdir()) == [
        "uPlot.LICENSE", "uPlot.iife.min.js", "uPlot.min.css"]
    script = (console / "uPlot.iife.min.js").read_text(encoding="utf-8")
    assert script.startswith(f"/*! https://github.com/leeoniya/uPlot (v{version}) */")
    assert "import " not in script[:500] and "http://" not in script and "https://cdn" not in script
    assert "MIT" in (console / "uPlot.LICENSE").read_text(encoding="utf-8")
