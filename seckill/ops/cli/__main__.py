"""``python -m seckill.ops.cli ...``: the ``seckill`` command (what the console script runs)."""

import sys

from seckill.ops.cli import main

sys.exit(main())
