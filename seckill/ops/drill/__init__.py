"""``seckill drill``: the sale-day fire drill (docs/drill.md). One module per part: the stack it
starts (:mod:`.stack`), the crowd (:mod:`.crowd`), the faults (:mod:`.faults`, :mod:`.gray`),
the invariants (:mod:`.checks`), the shop's webhook receiver (:mod:`.webhooks`), the report
(:mod:`.report`, :mod:`.chart`); :mod:`.main` runs them."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    """``seckill drill``: the exit code (1 when an invariant failed). Imported on call, so
    that the drill's helper processes (``python -m seckill.ops.drill.dbfaults``) load only
    what they need."""
    from seckill.ops.drill.main import run as run_drill

    return run_drill(args)
