"""The user documentation (README.md and docs/**/*.md) links nowhere outside the repository.

Sources are cited by name (paper, section, table), never by URL: no ``http://`` or
``https://`` anywhere in the text, no Markdown link to an absolute path, another scheme or a
path that leaves the repository, and every relative link points to a file that exists
(README links are relative to the repository root, a docs page's to its own folder). Also:
the README stays short, and every page of docs/ is in mkdocs.yml's navigation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 250

_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`+[^`\n]*`+")
_INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_WEB = re.compile(r"https?://", re.IGNORECASE)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (which hold no links)."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def link_targets(text: str) -> Iterator[str]:
    """Targets of the Markdown links of ``text``: inline links and images, reference
    definitions and autolinks, outside code."""
    prose = _prose(text)
    for pattern in (_INLINE_LINK, _REFERENCE_DEF, _AUTOLINK):
        for match in pattern.finditer(prose):
            yield match.group(1)


def link_problems(page: Path, text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of ``page`` (whose text is ``text``): web addresses
    anywhere, targets outside ``root`` and relative targets that do not exist."""
    problems = [f"web address {line.strip()!r}" for line in text.splitlines() if _WEB.search(line)]
    base = page.parent
    for target in link_targets(text):
        if not target or target.startswith("#") or _WEB.match(target):
            continue  # (a web address is reported above)
        if _SCHEME.match(target) or target.startswith(("/", "\\")):
            problems.append(f"link outside the repository: {target}")
            continue
        path = (base / target.split("#", 1)[0].split("?", 1)[0]).resolve()
        if not path.is_relative_to(root.resolve()):
            problems.append(f"link outside the repository: {target}")
        elif not path.exists():
            problems.append(f"link to a missing file: {target}")
    return problems


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_links_stay_in_the_repository(page: Path) -> None:
    assert link_problems(page, page.read_text(encoding="utf-8")) == []


def test_there_are_pages_with_links() -> None:
    targets = [t for page in _pages() for t in link_targets(page.read_text(encoding="utf-8"))]
    assert len(_pages()) > 10
    assert any(t.startswith("docs/") for t in link_targets((ROOT / "README.md").read_text()))
    assert len(targets) > 50


@pytest.mark.parametrize(("text", "problem"), [
    ("see https://example.org/x for more", "web address"),
    ("in code too: `http://example.org`", "web address"),
    ("[paper](HTTPS://example.org)", "web address"),
    ("[mail](mailto:someone@example.org)", "link outside the repository: mailto:"),
    ("[abs](/etc/passwd)", "link outside the repository: /etc/passwd"),
    ("[up](../../../outside.md)", "link outside the repository: ../../../outside.md"),
    ("[gone](missing.md)", "link to a missing file: missing.md"),
    ("[gone](missing.md#part)", "link to a missing file: missing.md#part"),
    ("![img](pictures/none.png)", "link to a missing file: pictures/none.png"),
    ("[ref]: nowhere.md", "link to a missing file: nowhere.md"),
    ("<ftp://example.org/file>", "link outside the repository: ftp://example.org/file"),
])
def test_checker_catches(tmp_path: Path, text: str, problem: str) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    page = root / "docs" / "page.md"
    problems = link_problems(page, text, root)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_checker_accepts_links_inside_the_repository(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs" / "commands").mkdir(parents=True)
    (root / "docs" / "commands" / "plan.md").write_text("# plan\n")
    (root / "docs" / "index.md").write_text("# index\n")
    page = root / "docs" / "commands" / "plan.md"
    text = ("[home](../index.md) [self](#options) [plan](plan.md#example)\n"
            "```\n[not a link](https-free/missing.md)\n```\n`[code](missing.md)` tcp://host:8786\n")
    assert link_problems(page, text, root) == []


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES


def _nav_files(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_files(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_files(value)


def test_every_docs_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = set(_nav_files(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav
