"""The command line's variants: ``seckill activity create ... --variant
40:EU-40:50 --variant 41:EU-41:80`` or ``--variants-file sizes.json``, and ``seckill activity
restock AID UNITS --variant 40``. The options only build the admin API's body: its
validation (``seckill.domain.variants``) says what is wrong, in the same words.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from seckill.domain import errors


def add_variant_options(create: argparse.ArgumentParser) -> None:
    """``--variant ID:NAME:TOTAL`` (repeated) or ``--variants-file FILE`` on ``activity
    create``."""
    given = create.add_mutually_exclusive_group()
    given.add_argument("--variant", action="append", metavar="ID:NAME:TOTAL", dest="variants",
                       help="stock: one variant (size, colour, seat category) with its own "
                            "units, e.g. 40:EU-40:50; repeat it for each (instead of --total: "
                            "the activity's total is theirs, per_user_limit counts them all)")
    given.add_argument("--variants-file", type=Path, metavar="FILE",
                       help='stock: the variants as JSON, [{"id", "name", "total"}, ...]')


def variant_spec(text: str) -> dict[str, Any]:
    """``ID:NAME:TOTAL`` as the API's variant object. The name may hold colons: the id is
    what comes before the first, the total what comes after the last."""
    vid, sep, rest = text.partition(":")
    name, sep2, total = rest.rpartition(":")
    if not sep or not sep2:
        raise errors.BadRequest(f"--variant {text!r}: give ID:NAME:TOTAL, e.g. 40:EU-40:50",
                                field="variants")
    try:
        units = int(total)
    except ValueError:
        raise errors.BadRequest(f"--variant {text!r}: the total {total!r} is not a number",
                                field="variants") from None
    return {"id": vid, "name": name, "total": units}


def variants_body(args: argparse.Namespace) -> list[Any] | None:
    """The body's ``variants`` from the options (None when neither is given)."""
    specs: list[str] | None = getattr(args, "variants", None)
    if specs:
        return [variant_spec(text) for text in specs]
    path: Path | None = getattr(args, "variants_file", None)
    if path is None:
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise errors.BadRequest(f"--variants-file {path}: {exc.strerror or exc}",
                                field="variants") from None
    except ValueError as exc:
        raise errors.BadRequest(f"--variants-file {path} is not JSON: {exc}",
                                field="variants") from None
    if isinstance(loaded, dict) and set(loaded) == {"variants"}:
        loaded = loaded["variants"]  # a body's fragment is fine too
    if not isinstance(loaded, list):
        raise errors.BadRequest(f'--variants-file {path}: a JSON list [{{"id", "name", '
                                '"total"}, ...] is expected', field="variants")
    return loaded


def add_restock_variant(restock: argparse.ArgumentParser) -> None:
    """``--variant ID`` on ``activity restock``: required on an activity with variants."""
    restock.add_argument("--variant", metavar="ID",
                         help="the variant to restock (required on an activity with variants)")
