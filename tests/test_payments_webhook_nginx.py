"""``POST /payments/webhook`` through real nginx (the config ``seckill nginx render`` writes) in
front of a real gunicorn instance: passed through on the public port, with no per-address rate
limit (a payment provider sends from few addresses), while the user routes from the same
address are limited; a body over 4 KiB is nginx's JSON 413."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.payments import SECRET, payment, signed
from tests.support.servers import gunicorn_server, nginx_server, require_nginx
from tests.support.tokens import ADMIN, user_headers

TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)


@pytest.fixture
def instance(valkey: EmbeddedValkey, tmp_path: Path) -> Iterator[str]:
    require_nginx()
    prefix = f"t{uuid.uuid4().hex[:12]}"
    env = {**gateway_env(valkey.url, prefix, tmp_path / "data",
                         f"sqlite:///{tmp_path / 'orders.db'}", "1000/second"),
           "SECKILL_BEHIND_PROXY": "1", "SECKILL_PAYMENT_WEBHOOK_SECRET": SECRET}
    with gunicorn_server(env, workers=1) as base:
        yield base.removeprefix("http://")


def test_the_webhook_passes_nginx_with_no_per_address_limit(
        instance: str, tmp_path: Path) -> None:
    http = urllib3.PoolManager(maxsize=4)
    with nginx_server([instance], tmp_path / "nginx", ip_rate="2r/s", ip_burst=2) as proxy:
        def post(path: str, body: bytes, headers: dict[str, str]) -> urllib3.BaseHTTPResponse:
            return http.request("POST", f"{proxy.base}{path}", body=body, headers=headers,
                                timeout=TIMEOUT, retries=False, redirect=False)

        aid = f"n{uuid.uuid4().hex[:10]}"
        made = http.request("POST", f"{proxy.admin_base}/admin/activities", headers={
            **ADMIN, "Content-Type": "application/json"}, body=orjson.dumps({
                "id": aid, "name": "Phone", "total": 5, "payment_window": 600,
                "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}),
            timeout=TIMEOUT, retries=False)
        assert made.status == 201, made.data
        # A buyer's URL and purchase from this address: within the burst.
        headers = user_headers("buyer")
        url = http.request("GET", f"{proxy.base}/seckill/url?activity={aid}", headers=headers,
                           timeout=TIMEOUT, retries=False)
        assert url.status == 200, url.data
        bought = post(orjson.loads(url.data)["url"], b"", headers)
        assert bought.status == 200, bought.data
        order_id = orjson.loads(bought.data)["order_id"]

        # 40 deliveries from one address at once are far over 2 r/s + burst 2: every one
        # reaches the gateway (its instance header) and is answered by it.
        answers = []
        for i in range(40):
            body = payment(order_id, "pi_nginx") if i % 2 else orjson.dumps(
                {"type": "payment.failed", "data": {"order_id": order_id}})
            answers.append(post("/payments/webhook", body, signed(body)))
        assert [a.status for a in answers] == [200] * 40, [a.data[:80] for a in answers]
        assert all(a.headers.get("X-Seckill-Instance") for a in answers)
        assert orjson.loads(answers[1].data) == {
            "status": "paid", "order_id": order_id, "payment_ref": "pi_nginx"}
        unsigned = post("/payments/webhook", payment(order_id, "pi_x"), {})
        assert unsigned.status == 401 and orjson.loads(unsigned.data)["error"] == \
            "unauthenticated"
        # The same address on a user route in the same second: nginx's own 429.
        times = [http.request("GET", f"{proxy.base}/seckill/time", timeout=TIMEOUT,
                              retries=False).status for _ in range(10)]
        assert 429 in times, times
        # A body over 4 KiB is refused by nginx, in JSON, before the gateway.
        big = post("/payments/webhook", b"{" + b" " * 5000 + b"}",
                   {"Content-Type": "application/json"})
        assert big.status == 413 and orjson.loads(big.data)["error"] == "too_large"
        assert big.headers["X-Seckill-Instance"] == "nginx"  # not an instance's answer
    http.clear()
