"""``seckill up`` with nginx in front, as a real process tree, for the tests that need the whole
stack (tests/test_up_nginx.py, tests/test_sale_page.py).

Built on :func:`tests.support.cli.seckill_up` (free ports, wait until healthy, everything it
started killed by PID if a test fails); adds the operator port, the instances' processes by
name, and the embedded Valkey's URL from the banner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from edge.identity import mint_user_token
from seckill.ops.stack.ports import free_listen_port
from tests.support.cli import call, seckill_up
from tests.support.servers import require_nginx
from tests.support.timing import iso
from tests.support.tokens import ADMIN, ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, URL_KEY


def up_env(data: Path, **extra: str) -> dict[str, str]:
    """Development mode with the test suite's secrets (so tests can mint tokens)."""
    return {
        "SECKILL_ENV": "development",
        "SECKILL_DATA_DIR": str(data),
        "SECKILL_SECRET_KEY": URL_KEY,
        "SECKILL_JWT_SECRET": JWT_SECRET,
        "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
        "SECKILL_METRICS_TOKEN": METRICS_TOKEN,
        **extra,
    }


@dataclasses.dataclass
class UpStack:
    process: subprocess.Popen[bytes]
    port: int
    admin_port: int
    log: Path
    seen: list[psutil.Process]  # every process to check gone (and kill) at the end
    data: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_base(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def redis_url(self) -> str:
        found = re.search(r"export REDIS_URL=(\S+)", self.text())
        assert found is not None, self.text()
        return found.group(1)

    def instance_ports(self) -> dict[str, int]:
        found = re.search(r"^  Instances: (.*)$", self.text(), re.MULTILINE)
        assert found is not None, self.text()
        return {name: int(port) for name, port in
                re.findall(r"(gunicorn-\d+) 127\.0\.0\.1:(\d+)", found.group(1))}

    def instances(self) -> dict[str, psutil.Process]:
        """The gunicorn masters, by instance name (the supervisor's direct children)."""
        by_port = {port: name for name, port in self.instance_ports().items()}
        masters: dict[str, psutil.Process] = {}
        for child in psutil.Process(self.process.pid).children():
            with contextlib.suppress(psutil.Error):
                bind = re.search(r"--bind 127\.0\.0\.1:(\d+)", " ".join(child.cmdline()))
                if bind and int(bind.group(1)) in by_port:
                    masters[by_port[int(bind.group(1))]] = child
        return masters

    def nginx(self) -> psutil.Process | None:
        for child in psutil.Process(self.process.pid).children():
            with contextlib.suppress(psutil.Error):
                if child.name() == "nginx":  # its command line reads "nginx: master process"
                    return child
        return None

    def remember_processes(self) -> None:
        self.seen.extend(psutil.Process(self.process.pid).children(recursive=True))

    def create_activity(self, **fields: Any) -> str:
        body = {"id": f"up{free_listen_port()}", "name": "Phone X", "total": 10,
                "starts_at": iso(-5), "ends_at": iso(3600), **fields}
        admin = ADMIN["Authorization"].removeprefix("Bearer ")
        status, made = call(self.admin_port, "POST", "/admin/activities", admin, body)
        assert status == 201, made
        return str(body["id"])


def user_token(uid: str) -> str:
    return mint_user_token(uid, JWT_SECRET, 3600)


@contextlib.contextmanager
def running_up(tmp: Path, *args: str, **env: str) -> Iterator[UpStack]:
    """``seckill up --admin-port <free> *args`` with nginx (the test fails or skips without it,
    see :func:`tests.support.servers.require`), in development mode with the suite's secrets."""
    require_nginx()
    admin_port = free_listen_port()
    data = tmp / "data"
    with seckill_up(tmp, up_env(data, **env), "--admin-port", str(admin_port), *args) as (
        process, port, log, seen
    ):
        stack = UpStack(process, port, admin_port, log, seen, data)
        stack.remember_processes()
        yield stack
