"""``python -m seckill.webhooks``: the webhooks' dispatcher, as ``seckill up`` starts it."""

from __future__ import annotations

from seckill.config import Settings
from seckill.webhooks.run import main

if __name__ == "__main__":
    raise SystemExit(main(Settings.from_env()))
