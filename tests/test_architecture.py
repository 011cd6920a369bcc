"""The house plan holds: the layers of the README's Architecture section (import-linter's
contracts in pyproject.toml), small files, typed boundaries, one resource lookup."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from seckill.resources import resource_dir
from seckill.store.plumbing.scripts import lua_source

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "seckill").rglob("*.py"), *(ROOT / "edge").rglob("*.py")])
BIN = Path(sys.executable).parent


def test_every_layer_imports_only_the_layers_below_it() -> None:
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_source_files_stay_small() -> None:
    long = {str(p.relative_to(ROOT)): n for p in SOURCES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_the_edge_boundary_is_typed() -> None:
    """No ``Any`` in the edge: what it reads of the sale is named in edge.sale.Sale."""
    untyped = [str(p.relative_to(ROOT)) for p in (ROOT / "edge").glob("*.py")
               if re.search(r"\bAny\b", p.read_text(encoding="utf-8"))]
    assert untyped == []


def test_ruff_is_clean_docstrings_included() -> None:
    """ruff, with pydocstyle's D1: every public module, class and function of the product
    has a docstring."""
    result = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_is_clean() -> None:
    """The types hold across the layers (strict as pyproject.toml sets it)."""
    result = subprocess.run([str(BIN / "mypy"), "--no-incremental"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]


def test_lua_is_found_in_one_place_and_the_sale_scripts_share_their_opening() -> None:
    assert resource_dir("lua").resolve() == (ROOT / "lua").resolve()
    for name in ("purchase", "grab"):
        source = lua_source(name)
        assert "-- @include" not in source, name
        assert "sale_opening.lua (included at the top" in source, name
        assert "local function over_rate_limit()" in source, name
        assert "local function outside_window(" in source, name
