"""The documentation holds together: the README stays a front door, every relative link of the
README and of docs/*.md reaches a file of the repository (and a heading, when it names one),
every screenshot in docs/ is shown by a page, and every source path the pages name exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# A path of the product or its tools as the pages write it (from the repository root).
SOURCE_PATH = re.compile(
    r"(?<![\w/.-])((?:seckill|edge|lua|tests|bench|nginx|deploy)/[\w/.-]*\w\.(?:py|lua))\b")


def prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks (their links and headings count)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lowercased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of a page (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text(encoding="utf-8")):
        if match := HEADING.match(line):
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The link targets of a page's prose, as written."""
    return [m.group(1) for line in prose(page.read_text(encoding="utf-8"))
            for m in LINK.finditer(line)]


def test_the_readme_is_a_front_door() -> None:
    """The README stays short: what it is, how to run and test it, the picture, and links."""
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move sections to docs/"


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"(https?|mailto):", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or ROOT not in (dest, *dest.parents):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_screenshot_is_shown_by_a_page() -> None:
    shown = {(page.parent / t.partition("#")[0]).resolve() for page in PAGES for t in links(page)}
    unshown = [p.name for p in sorted((ROOT / "docs").glob("*.png")) if p.resolve() not in shown]
    assert unshown == []


def test_every_source_path_the_pages_name_exists() -> None:
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True, timeout=60).stdout.split())
    missing = sorted({f"{page.relative_to(ROOT)}: {m.group(1)}" for page in PAGES
                      for m in SOURCE_PATH.finditer(page.read_text(encoding="utf-8"))
                      if m.group(1) not in tracked})
    assert missing == []


def test_the_slugs_follow_githubs_rules() -> None:
    """The anchor rule itself, on headings of this repository's shape."""
    assert slug("A purchase, by hand") == "a-purchase-by-hand"
    assert slug("On a Redis/Valkey Cluster") == "on-a-redisvalkey-cluster"
    assert slug("What `seckill up` runs") == "what-seckill-up-runs"
    assert slug("## seckill/store/plumbing/connection.py".lstrip("# ")) == \
        "seckillstoreplumbingconnectionpy"
    assert slug("Fair admission: queue and draw") == "fair-admission-queue-and-draw"
