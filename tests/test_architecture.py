"""The house plan holds: the layers of docs/architecture.md (import-linter's
contracts in pyproject.toml), small files, typed boundaries, one resource lookup."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

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


@pytest.mark.slow  # about 15 s; the inner loop runs .venv/bin/mypy (incremental) beside it
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
        assert "sale_opening.lua (included by purchase.lua and grab.lua)" in source, name
        assert "local function rate_limited(argv_offset)" in source, name
        assert "local function outside_window(" in source, name


def test_no_import_cycle_anywhere_in_the_product() -> None:
    """For every direct import A -> B in seckill and edge (imports inside functions and under
    TYPE_CHECKING included), no chain of imports leads from B back to A."""
    graph = grimp.build_graph("seckill", "edge", cache_dir=None)
    cycles = sorted({" <-> ".join(sorted((importer, imported)))
                     for importer in graph.modules
                     for imported in graph.find_modules_directly_imported_by(importer)
                     if graph.find_shortest_chain(importer=imported, imported=importer)})
    assert cycles == []


# What the operator layer calls that only reads, or only touches this process's copies.
OPERATOR_READS = frozenset({"require", "current", "page", "forget"})


def _imported_names(tree: ast.Module, package: str) -> dict[str, str]:
    """The names a module binds by importing from ``package`` (alias -> original name)."""
    return {alias.asname or alias.name: alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package)
            for alias in node.names}


def _operator_writes() -> set[str]:
    """The write paths the operator layer takes: each method it calls on a part of the
    services (``services.restocks.restock``) and each store function it calls
    (``catalog.create_activity``, ``reconcile``), less its reads."""
    writes: set[str] = set()
    for path in (ROOT / "seckill" / "operator").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        store = _imported_names(tree, "seckill.store")
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and (
                    isinstance(func.value, ast.Attribute)
                    or (isinstance(func.value, ast.Name) and func.value.id in store)):
                writes.add(func.attr)
            elif isinstance(func, ast.Name) and func.id in store:
                writes.add(store[func.id])
    # A string's own methods (``parts.scheme.lower()`` in a validation) write nothing.
    return writes - OPERATOR_READS - set(dir(str))


def test_web_and_the_cli_reach_the_stores_write_paths_only_through_the_operator_layer() -> None:
    """Two guards. The import-linter contract "web and the CLI reach the operator's write paths
    only through seckill.operator" (run by the first test) forbids seckill.web and seckill.ops
    to import the store modules that write for the operator (catalog, controls, reconcile).
    The services' parts are reached without an import (``services().restocks.restock(...)``), so
    this test reads the calls: the write methods are those the operator layer calls on the
    services' parts and the store (less its reads, OPERATOR_READS); in seckill/web and
    seckill/ops, such a method may be called only on a module of seckill.operator
    (``activities.restock(...)``). A view or a command that calls ``found.restocks.restock(...)``
    or ``controls.set_paused(...)`` itself fails here; an action added to the layer is
    guarded from then on."""
    writes = _operator_writes()
    assert {"restock", "cancel", "pay", "set_paused", "end", "edit", "set_factor",
            "create_activity", "reconcile"} <= writes, writes  # the layer is what it says
    bypasses = []
    for path in sorted([*(ROOT / "seckill" / "web").rglob("*.py"),
                        *(ROOT / "seckill" / "ops").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        layer = set(_imported_names(tree, "seckill.operator"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in writes and not (
                        isinstance(node.func.value, ast.Name) and node.func.value.id in layer):
                bypasses.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                f"{ast.unparse(node.func)}")
    assert bypasses == []



# Where a name of the environment may be read outside seckill.config, and why.
ENVIRONMENT_READERS = {
    # The bottom layer, kept independent of seckill.config by the import contract: the log
    # format is read before any settings (the first line is already in it), and
    # PROMETHEUS_MULTIPROC_DIR is prometheus_client's own name, which it reads itself too.
    "seckill/logs.py", "seckill/metrics.py",
}


def _environment_reads(tree: ast.Module) -> list[int]:
    """Lines that read ``os.environ`` or ``os.getenv`` (a write, ``os.environ[name] = ...``,
    which hands a value to the children, is not a read)."""
    writes = {id(node.value) for node in ast.walk(tree)
              if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
            and isinstance(node.value, ast.Name) and node.value.id == "os"
            and id(node) not in writes] + [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        and {alias.name for alias in node.names} & {"environ", "getenv"}]


def test_the_environment_is_read_only_in_config() -> None:
    """Every configuration name lives in seckill.config, read there (typed, documented); a
    command that starts children takes the environment whole from config.environment()."""
    found = {}
    for path in SOURCES:
        name = str(path.relative_to(ROOT))
        if name == "seckill/config.py" or name in ENVIRONMENT_READERS:
            continue
        lines = _environment_reads(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[name] = lines
    assert found == {}


def test_the_edge_chain_and_its_filters_import_no_flask() -> None:
    """edge.chain and the filters know no Flask (as Flask's own sansio package): only the
    binding, edge.views, imports it. Checked in a fresh interpreter, imports of imports too."""
    modules = sorted(f"edge.{p.stem}" for p in (ROOT / "edge").glob("*.py")
                     if p.stem not in ("__init__", "views"))
    assert "edge.chain" in modules
    probe = (f"import sys\nimport {', '.join(modules)}\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'werkzeug')))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
