"""What every list command does: read every page of a paged operator action, then print the
rows, as JSON lines (``--json``) or as a table, with a line on stderr when there are none."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Row = TypeVar("Row")
Cursor = TypeVar("Cursor")


def every_page(read: Callable[[Cursor], tuple[Sequence[Row], Cursor | None]],
               first: Cursor) -> list[Row]:
    """Every row ``read`` gives, page after page from ``first``: ``read(cursor)`` answers a
    page and the cursor of the next one (None: that was the last)."""
    rows: list[Row] = []
    cursor = first
    while True:
        found, following = read(cursor)
        rows += found
        if following is None:
            return rows
        cursor = following


def cell(value: Any) -> str:
    """A value as a table shows it: ``-`` for none, yes/no for a flag."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def print_rows(rows: list[dict[str, Any]], as_json: bool, columns: tuple[str, ...],
               line: Callable[[dict[str, Any]], tuple[str, ...]] | None = None,
               none: str = "(none)") -> None:
    """``rows`` as JSON lines, or as a table of ``columns`` (each row's cells: ``line(row)``,
    or the columns' values), with ``none`` on stderr when there is no row."""
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    cells = line or (lambda row: tuple(cell(row.get(c)) for c in columns))
    table = [columns, *(cells(row) for row in rows)]
    widths = [max(len(entry[i]) for entry in table) for i in range(len(columns))]
    for entry in table:
        print("  ".join(text.ljust(width) for text, width in zip(entry, widths, strict=True))
              .rstrip())
    if not rows:
        print(none, file=sys.stderr)
