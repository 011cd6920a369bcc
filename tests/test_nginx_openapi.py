"""The OpenAPI document through nginx: every gateway serves it (docs/API.md), and nginx passes
it on on the public listener as on the operator's, the same bytes as the file."""

from __future__ import annotations

from pathlib import Path

import urllib3

import seckill.web
from tests.support.nginx import Instances, front

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.


def test_the_openapi_document_is_served_on_both_listeners(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    document = (Path(seckill.web.__file__).parent / "openapi.json").read_bytes()
    with front(instances, tmp_path, ip_rate="off") as proxy:
        for base in (proxy.base, proxy.admin_base):
            answer = http.request("GET", f"{base}/openapi.json", retries=False, timeout=10)
            assert answer.status == 200, (base, answer.status, answer.data[:200])
            assert answer.headers["Content-Type"].startswith("application/json")
            assert answer.data == document
