"""``GET /metrics`` wants a token in every mode, ``seckill up --no-nginx`` included (one
gunicorn on the public port): the scraper's token (``SECKILL_METRICS_TOKEN``, made up for
the run when unset and written to ``<data>/metrics-token``, mode 0600, for Prometheus's
``credentials_file``) or the operator token. Without one: 401 ``unauthenticated``, nothing of
the sale. The in-process and wire cases: tests/test_red_team.py, tests/test_red_team_wire.py.
"""

from __future__ import annotations

import json
import stat
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.cli import seckill_up
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, URL_KEY


def get(port: int, path: str, token: str | None) -> tuple[int, bytes]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def test_up_without_nginx_serves_metrics_to_its_scraper_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"SECKILL_ENV": "production", "SECKILL_DATA_DIR": str(data),
           "SECKILL_SECRET_KEY": URL_KEY, "SECKILL_JWT_SECRET": JWT_SECRET,
           "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN}  # no SECKILL_METRICS_TOKEN: one is made up
    with seckill_up(tmp_path, env, "--no-nginx") as (_up, port, log, _seen):
        status, body = get(port, "/metrics", None)
        assert status == 401 and json.loads(body)["error"] == "unauthenticated", body
        assert b"seckill_" not in body
        token_file = data / "metrics-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        for good in (token, ADMIN_TOKEN):
            status, body = get(port, "/metrics", good)
            assert status == 200 and b"seckill_requests_total" in body, body[:300]
        assert get(port, "/metrics", token + "x")[0] == 401
        # The scraper's token opens nothing else, and no log line holds it.
        assert get(port, "/admin/activities", token)[0] == 401
        text = log.read_text()
        assert str(token_file) in text and token not in text
