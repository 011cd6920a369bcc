"""A real nginx in front of a real gunicorn through a TCP relay that can lose answers, for the
browser tests of what buyers and operators see during faults (tests/test_sale_page_unknown.py,
tests/test_console_faults.py).

The relay (:class:`HttpFaults`) reads each request's first line as nginx sends it to the
instance and, when told, cuts the connection before the request is forwarded ("refused":
nothing decided) or after it ran, dropping its answer ("lost": decided, never answered). nginx
then answers the browser its JSON 502, as when an instance dies mid-request. Nothing is mocked:
the gateway, Valkey, nginx and its exporter of counts are the real processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.ops.stack.ports import free_listen_port
from tests.support.gateway import gateway_env
from tests.support.relay import ChunkHook, Relay
from tests.support.servers import NginxFront, gunicorn_server, nginx_server, running_server

_LINE = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]\r\n")


class HttpFaults(Relay):
    """An HTTP relay: requests whose first line matches ``refuse`` are cut unsent; those
    matching ``lose`` are sent and their answer is dropped (the connection cut)."""

    def __init__(self, upstream_port: int) -> None:
        self.refuse: re.Pattern[bytes] | None = None
        self.lose: re.Pattern[bytes] | None = None
        self.refused: list[str] = []
        self.lost: list[str] = []
        super().__init__(upstream_port)

    def hooks(self) -> tuple[ChunkHook, ChunkHook]:
        """Per connection: the request hook notes what the reply hook must do."""
        doomed = threading.Event()

        def on_request(chunk: bytes) -> bool:
            found = _LINE.match(chunk)
            if found is None:  # the rest of a body: goes where its request went
                return True
            line = found.group(1) + b" " + found.group(2)
            if self.refuse is not None and self.refuse.search(line):
                self.refused.append(line.decode())
                return False
            if self.lose is not None and self.lose.search(line):
                self.lost.append(line.decode())
                doomed.set()
            return True

        def on_reply(chunk: bytes) -> bool:
            return not doomed.is_set()

        return on_request, on_reply

    def heal(self) -> None:
        """Forward everything again."""
        self.refuse = self.lose = None


PURCHASE = re.compile(rb"^POST /seckill/[^/]+/[^/]+/buy")


@dataclasses.dataclass
class FaultFront:
    """nginx (public and operator listeners) -> relay -> one gunicorn instance -> Valkey."""

    nginx: NginxFront
    relay: HttpFaults
    valkey: EmbeddedValkey
    instance: str  # the gunicorn's host:port (behind the relay)
    dead_instance: str  # a listed instance nobody serves: the console shows it down
    metrics_port: int

    @property
    def base(self) -> str:
        return self.nginx.base

    @property
    def admin_base(self) -> str:
        return self.nginx.admin_base


@contextlib.contextmanager
def fault_front(tmp: Path) -> Iterator[FaultFront]:
    """Start the whole chain in ``tmp`` (a Valkey of its own: a test may stop it)."""
    valkey = EmbeddedValkey(tmp / "valkey", appendfsync="everysec")
    valkey.start()
    try:
        port, dead, metrics_port = free_listen_port(), free_listen_port(), free_listen_port()
        env = {
            **gateway_env(valkey.url, f"t{uuid.uuid4().hex[:12]}", tmp / "data",
                          f"sqlite:///{tmp / 'orders.db'}", "1000/second"),
            "SECKILL_BEHIND_PROXY": "1",
            "SECKILL_INSTANCES": f"127.0.0.1:{port},127.0.0.1:{dead}",
        }
        log = tmp / "access.log"
        log.touch()
        exporter = [sys.executable, "-m", "seckill.ops.cli", "nginx", "exporter", "--log",
                    str(log), "--port", str(metrics_port)]
        with gunicorn_server(env, workers=1, port=port), HttpFaults(port) as relay, \
                running_server(exporter, f"http://127.0.0.1:{metrics_port}/metrics",
                               name="nginx-exporter"), \
                nginx_server([f"127.0.0.1:{relay.port}"], tmp / "nginx", ip_rate="off",
                             access_log=True, access_log_path=log,
                             metrics_port=metrics_port) as proxy:
            yield FaultFront(proxy, relay, valkey, f"127.0.0.1:{port}", f"127.0.0.1:{dead}",
                             metrics_port)
    finally:
        valkey.stop()
