"""``python -m seckill.worker``: the orders worker, as ``seckill up`` starts it."""

from __future__ import annotations

from seckill.config import Settings
from seckill.worker.run import main

if __name__ == "__main__":
    raise SystemExit(main(Settings.from_env()))
