"""tests/README.md, the suite's map, stays true: it names every test file exactly once under
its areas and no test file that is not there, and lists every module of tests/support/. And
the rule it states holds: a test module imports what it shares from tests/support/, never
from another test module nor from conftest.py (whose fixtures a test names, never imports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAP = TESTS / "README.md"
LINK = re.compile(r"\]\(([^)\s#]+)\)")


def section(heading: str) -> str:
    """The text of tests/README.md under ``heading``, up to the next heading of its level."""
    text = MAP.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(r"^## ", text[start:], re.MULTILINE)
    return text[start:] if end is None else text[start:start + end.start()]


def test_the_map_names_every_test_file_once_and_no_other() -> None:
    listed = [t for t in LINK.findall(section("## The test files, by area"))
              if t.startswith("test_")]
    files = {p.name for p in TESTS.glob("test_*.py")}
    assert sorted(files - set(listed)) == [], "test files missing from tests/README.md"
    assert sorted(set(listed) - files) == [], "tests/README.md lists files that are not there"
    assert sorted({n for n in listed if listed.count(n) > 1}) == [], "listed twice"


def test_every_test_file_the_map_names_is_there() -> None:
    named = set(re.findall(r"(?<![\w/])test_\w+\.py\b", MAP.read_text(encoding="utf-8")))
    assert sorted(n for n in named if not (TESTS / n).is_file()) == []


def test_the_map_lists_every_helper_module() -> None:
    listed = {t.removeprefix("support/") for t in LINK.findall(section("## Fixtures and helpers"))
              if t.startswith("support/")}
    modules = {p.name for p in (TESTS / "support").glob("*.py") if p.name != "__init__.py"}
    assert sorted(modules - listed) == [], "tests/support/ modules missing from tests/README.md"
    assert sorted(listed - modules) == [], "tests/README.md lists helpers that are not there"


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement of ``tree`` names, with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_module_imports_a_test_module_or_conftest() -> None:
    wrong = [f"{path.relative_to(TESTS.parent)}:{line}: {name}"
             for path in sorted(TESTS.rglob("*.py"))
             for line, name in imported(ast.parse(path.read_text(encoding="utf-8")))
             if re.fullmatch(r"tests\.(conftest|test_\w+)(\..*)?", name)]
    assert wrong == []
