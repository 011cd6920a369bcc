"""The receiver docs/webhooks.md offers a shop works as written: its code, taken from the page,
runs under Flask, takes the dispatcher's signed deliveries, drops a repeat by ``webhook-id``
and refuses a forged one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
import urllib3
from standardwebhooks.webhooks import Webhook

from seckill.ops.stack.ports import free_listen_port
from seckill.sql import engine as db
from seckill.sql.schema import ensure_schema, webhook_deliveries
from seckill.webhooks.options import DispatchOptions
from seckill.webhooks.run import run_dispatcher
from tests.support.timing import wait_until
from tests.support.webhook_receiver import add_endpoint, add_order_events, new_secret

PAGE = Path(__file__).resolve().parents[1] / "docs" / "webhooks.md"


def receiver_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1, "docs/webhooks.md should hold one Python receiver"
    return blocks[0]


def test_the_documented_receiver_takes_the_dispatchers_events(tmp_path):
    (tmp_path / "receiver.py").write_text(receiver_code())
    secret, port = new_secret(), free_listen_port()
    shop = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "receiver", "run", "--port", str(port)],
        cwd=tmp_path, env={**os.environ, "SHOP_WEBHOOK_SECRET": secret, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    output = shop.stdout
    assert output is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(output.readline, "")),
                              daemon=True)
    reader.start()
    database_url = f"sqlite:///{tmp_path / 'seckill.db'}"
    engine = db.make_engine(database_url)
    ensure_schema(engine)
    stop = threading.Event()
    dispatcher = threading.Thread(
        target=run_dispatcher, args=(database_url,),
        kwargs={"stop": stop, "options": DispatchOptions(idle=0.02)}, daemon=True)
    try:
        http = urllib3.PoolManager()
        wait_until(lambda: any("Running on" in line for line in lines), 20,
                   what="the documented receiver to start")
        url = f"http://127.0.0.1:{port}/seckill-events"
        endpoint = add_endpoint(engine, url, secret)
        ids = add_order_events(engine, [("order.created", "a1:7"), ("order.paid", "a1:7")],
                               at_ms=1_800_000_000_000)
        dispatcher.start()
        wait_until(lambda: sum("order.paid a1:7" in line for line in lines) == 1, 20,
                   what="the receiver to handle both events")
        assert [line.strip() for line in lines if line.startswith("order.")] == [
            "order.created a1:7", "order.paid a1:7"]

        def statuses() -> list[str]:
            with engine.connect() as conn:
                return list(conn.execute(sa.select(webhook_deliveries.c.status).where(
                    webhook_deliveries.c.endpoint_id == endpoint)).scalars())

        # The dispatcher records the receiver's 204s once its batch is back.
        wait_until(lambda: statuses() == ["delivered", "delivered"], 20,
                   what="both deliveries recorded as delivered")

        # A repeat (the same webhook-id, signed) is acknowledged, not handled again.
        body = '{"type":"order.created","timestamp":"2027-01-15T08:00:00Z","data":{}}'
        stamp = datetime.now(UTC)
        again = http.request("POST", url, body=body.encode(), headers={
            "webhook-id": ids[0], "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": Webhook(secret).sign(ids[0], stamp, body)})
        assert again.status == 204
        assert sum(line.startswith("order.created") for line in lines) == 1

        forged = http.request("POST", url, body=b'{"type":"order.paid","data":{}}',
                              headers={"webhook-id": "msg_x", "webhook-timestamp": "1",
                                       "webhook-signature": "v1,AAAA"})
        assert forged.status == 401
    finally:
        stop.set()
        if dispatcher.is_alive():
            dispatcher.join(15)
        shop.terminate()
        shop.wait(10)
        output.close()
        engine.dispose()
