"""``python -m bench run --scenario <name>``: see ``bench.cli``."""

from __future__ import annotations

from bench.cli import main

raise SystemExit(main())
