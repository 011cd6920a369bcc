"""The webhooks' dispatcher as a process of its own (``python -m seckill.webhooks``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from seckill.ops.stack.embedded import die_with_parent
from tests.support.servers import REPO_ROOT


def dispatcher_process(database_url: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``python -m seckill.webhooks`` on the test's database (its log in ``tmp_path``)."""
    env = {**os.environ, "DATABASE_URL": database_url, "SECKILL_ENV": "development",
           "SECKILL_DATA_DIR": str(tmp_path / "data")}
    with (tmp_path / "dispatcher.log").open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "seckill.webhooks"], cwd=str(REPO_ROOT),
                                env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)
