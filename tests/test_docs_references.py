"""The docs, the Lua headers and the code's comments point at things that exist: every
relative Markdown link names a file of the repository and, with ``#section``, a heading of
that file; every repository path written in them (``seckill/web/hot.py``,
``lua/purchase.lua``...) is a file or folder of the repository. Modules move and headings
change; a reference left behind sends a newcomer nowhere."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Dated records of earlier runs: they name the files as they were on the day.
HISTORY = ("bench/results/",)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A repository path: a top-level folder of ours, then a file with a known suffix or a folder.
TOP = r"(?:seckill|edge|lua|nginx|frontends|tests|bench|deploy|docs|\.ci)"
PATH = re.compile(rf"(?<![\w./-])({TOP}/[\w./-]*[\w/])")
SUFFIXES = (".py", ".lua", ".md", ".conf", ".template", ".json", ".yml", ".yaml", ".js",
            ".css", ".html", ".toml", ".sh", ".txt", "/")


def tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.split()


@cache
def existing() -> frozenset[str]:
    """Every tracked file, and every folder above one (with a trailing slash)."""
    found: set[str] = set()
    for name in tracked():
        found.add(name)
        parts = name.split("/")
        found.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return frozenset(found)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(name: str) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    in_code = False
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def documents() -> list[str]:
    return [n for n in tracked() if n.endswith(".md") and not n.startswith(HISTORY)]


def sources() -> list[str]:
    return [n for n in tracked() if n.endswith((".py", ".lua", ".js", ".conf", ".template"))
            and not n.startswith(HISTORY) and "/vendor/" not in n]


def broken_links(name: str) -> list[str]:
    text = (ROOT / name).read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, section = target.partition("#")
        resolved = name if not path else \
            str((ROOT / name).parent.joinpath(path).resolve().relative_to(ROOT))
        is_folder = (ROOT / resolved).is_dir()
        if (resolved + "/" if is_folder else resolved) not in existing():
            broken.append(f"{target}: no such file")
        elif section and resolved.endswith(".md") and section not in anchors(resolved):
            broken.append(f"{target}: no such section")
    return broken


def missing_paths(name: str) -> list[str]:
    text = (ROOT / name).read_text(encoding="utf-8")
    missing = []
    for found in PATH.findall(text):
        path = found.rstrip(".")
        if not path.endswith(SUFFIXES) or "*" in path or "<" in path or "node_modules" in path:
            continue
        if path not in existing() and path + "/" not in existing():
            missing.append(path)
    return sorted(set(missing))


@pytest.mark.parametrize("name", documents())
def test_every_link_of_a_document_leads_somewhere(name: str) -> None:
    assert broken_links(name) == []


@pytest.mark.parametrize("name", documents())
def test_every_path_a_document_names_exists(name: str) -> None:
    assert missing_paths(name) == []


def test_every_path_the_code_names_exists() -> None:
    missing = {name: found for name in sources() if (found := missing_paths(name))}
    assert missing == {}


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The checks themselves: a real heading's anchor, a made-up one, a moved module."""
    assert "one-reading-per-deployment-the-body-kept-per-process" in anchors(
        "docs/performance.md")
    assert slug("Drops: variants, limits per person, blocks") == \
        "drops-variants-limits-per-person-blocks"
    assert "seckill/ops/" + "up.py" not in existing()  # moved to stack/ (split: not a reference)
    assert "seckill/ops/stack/up.py" in existing() and "seckill/ops/" in existing()
