"""``seckill drill``: the sale-day fire drill (docs/drill.md). One module per part: the stack it
starts (:mod:`.stack`), the crowd (:mod:`.crowd`), the faults (:mod:`.faults`, :mod:`.gray`),
the invariants (:mod:`.checks`), the shop's webhook receiver (:mod:`.webhooks`), the report
(:mod:`.report`, :mod:`.chart`); :mod:`.main` runs them."""

from __future__ import annotations

from seckill.ops.drill.main import run

__all__ = ["run"]
