"""The API reference renders the docstrings' cross-references (issue #25): the Griffe extension
``tools/griffe_roles.py`` turns Sphinx roles into autorefs links, and the built site holds no raw
``:func:`` / ``:class:`` role."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import griffe
import pytest

from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[1]


ROLES = load_tool("griffe_roles")


@pytest.fixture()
def package(tmp_path: Path) -> griffe.Module:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(
        '"""Top: :func:`pkg.sub.tool.run` and :class:`~pkg.sub.tool.Thing`."""\n'
        "from pkg.sub.tool import Thing\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "tool.py").write_text(
        '"""Tools."""\n'
        "class Thing:\n"
        '    """A thing; see :meth:`size`, :data:`LIMIT`, :func:`the runner <run>`, '
        ':class:`Missing` and :attr:`.Thing.size`."""\n'
        "    def size(self) -> int:\n"
        '        """Size, as :class:`pkg.Thing` (re-exported)."""\n'
        "        return 1\n"
        "LIMIT = 3\n"
        "def run() -> None:\n"
        '    """Run."""\n')
    loader = griffe.GriffeLoader(search_paths=[str(tmp_path)],
                                 extensions=griffe.load_extensions(ROLES.SphinxRoles))
    pkg = loader.load("pkg")
    assert isinstance(pkg, griffe.Module)
    return pkg


def _refs(text: str) -> list[tuple[str, str]]:
    return re.findall(r'<autoref identifier="([^"]+)" optional><code>([^<]+)</code></autoref>', text)


def test_roles_become_autorefs_resolved_in_the_docstrings_scope(package: griffe.Module) -> None:
    assert package.docstring is not None
    assert _refs(package.docstring.value) == [("pkg.sub.tool.run", "pkg.sub.tool.run"),
                                              ("pkg.sub.tool.Thing", "Thing")]
    thing = package["sub.tool.Thing"]
    assert thing.docstring is not None
    assert _refs(thing.docstring.value) == [
        ("pkg.sub.tool.Thing.size", "size"),      # a member of the class itself
        ("pkg.sub.tool.LIMIT", "LIMIT"),          # a name of the module
        ("pkg.sub.tool.run", "the runner"),       # a titled role shows its title
        ("Missing", "Missing"),                   # nothing of that name: left as is (optional)
        ("pkg.sub.tool.Thing.size", "Thing.size"),
    ]
    assert thing.docstring.value.startswith("A thing; see <autoref")
    size = package["sub.tool.Thing.size"]
    assert size.docstring is not None
    # an alias (pkg.Thing re-exports pkg.sub.tool.Thing) is followed to its definition
    assert _refs(size.docstring.value) == [("pkg.sub.tool.Thing", "pkg.Thing")]


def test_text_without_roles_is_unchanged(package: griffe.Module) -> None:
    run = package["sub.tool.run"]
    assert run.docstring is not None and run.docstring.value == "Run."


def test_display_follows_sphinx() -> None:
    assert ROLES.display("~archplace.front.api.plan") == "plan"
    assert ROLES.display(".BREAKDOWN_KEYS") == "BREAKDOWN_KEYS"
    assert ROLES.display("archplace.front.api.plan") == "archplace.front.api.plan"


@pytest.mark.slow
def test_built_site_has_no_raw_roles_and_links_the_api(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # not --quiet: it drops the warnings that --strict counts (a quiet strict build passes them)
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    raw = re.compile(r":(?:func|meth|class|attr|data|mod|exc|obj|const):`")
    pages = sorted(site.rglob("*.html"))
    found = {str(p.relative_to(site)): len(raw.findall(p.read_text(encoding="utf-8"))) for p in pages}
    assert not {page: n for page, n in found.items() if n}, "raw Sphinx roles in the built site"
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    # the api page's docstrings link to the classes they name, e.g. PlanResult on placement's page
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*placement/#archplace\.placement'
                     r'\.result\.PlanResult"', api)
