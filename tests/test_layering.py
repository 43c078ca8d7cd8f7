"""The layers below the front door (cost/, scheduling/, placement/, dse/) take resolved
objects: they never load a preset, a model or an input file, and their errors never name a
command-line option (the CLI maps field names to its options)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "archplace"
LOWER = ("cost", "scheduling", "placement", "dse")

LOADERS = {
    "load_accelerator", "load_cluster", "load_model", "load_space", "read_mapping", "syntax_of",
    "preset_summaries", "model_preset_summaries", "preset_datasheet", "preset_source",
    "efficiency_sources", "accelerator_preset_names", "model_preset_names", "space_names",
}
"""Names that load a preset, a model config or an input file (hardware.presets, hardware.space,
workload.zoo, inputs)."""

ALLOWED_LOADERS: set[tuple[str, str]] = set()
"""(module, name) pairs still allowed, each with its reason; the list only shrinks."""


def _modules() -> list[Path]:
    return sorted(path for layer in LOWER for path in (SRC / layer).rglob("*.py"))


def _imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute) and node.attr in LOADERS:
            names.add(node.attr)
    return names


def _error_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The literal text of every exception raised (``raise X(...)``), f-strings included."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for arg in node.exc.args:
                for part in ast.walk(arg):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        out.append((node.lineno, part.value))
    return out


def _flag_like(text: str) -> bool:
    """``--name`` at the start of the text or after a space: a command-line option."""
    return re.search(r"(?:^|\s)--[a-z]", text) is not None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_lower_layers_load_nothing(path: Path) -> None:
    module = str(path.relative_to(SRC))
    found = _imported_names(ast.parse(path.read_text(), str(path))) & LOADERS
    assert {name for name in found if (module, name) not in ALLOWED_LOADERS} == set(), module


FRONT = tuple(sorted((SRC / "front").rglob("*.py")))
"""The library's front door: its errors name fields too (the CLI maps them to options)."""


@pytest.mark.parametrize("path", [*_modules(), *FRONT], ids=lambda p: str(p.relative_to(SRC)))
def test_library_errors_name_no_option(path: Path) -> None:
    found = [(line, text) for line, text in _error_strings(ast.parse(path.read_text(), str(path)))
             if _flag_like(text)]
    assert found == [], f"{path.relative_to(SRC)}: errors naming a CLI option: {found}"


def test_the_checks_see_what_they_look_for() -> None:
    """The scanners find a loader import and an option in an error, so a pass means something."""
    tree = ast.parse("from archplace.hw.presets import load_cluster\n"
                     "def f(n):\n    raise ConfigError(f'--micro-batch must be positive, got {n}')\n")
    assert _imported_names(tree) & LOADERS == {"load_cluster"}
    flagged = [text for _, text in _error_strings(tree) if _flag_like(text)]
    assert flagged == ["--micro-batch must be positive, got "]
    assert _flag_like("give it with --tp") and not _flag_like("a -- b") and not _flag_like("x--y")
    assert {path.relative_to(SRC).parts[0] for path in _modules()} == set(LOWER)


def test_allowed_loaders_are_still_needed() -> None:
    """An allow-list entry whose import is gone must be deleted."""
    for module, name in ALLOWED_LOADERS:
        tree = ast.parse((SRC / module).read_text())
        assert name in _imported_names(tree), (module, name)


# Rooms (issue #25): the CLI imports the front door, the front door the engine, everything the base
# utilities; never the other way.
ENGINE = ("workload", "hw", "cost", "scheduling", "placement", "dse")
"""The engine's rooms: they take resolved objects and never import the front door or the CLI."""

ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("base/outputs.py", "archplace.dse.store"):
        "naming a result store in an error about an output path (a lazy import)",
    ("base/outputs.py", "archplace.dse.store_file"):
        "telling an SQLite file from a result store in that error (a lazy import)",
}
"""(module, imported module) pairs that go against the rooms' order, each with its reason; the
list only shrinks."""


def _imports(path: Path) -> set[str]:
    """The archplace modules ``path`` imports, anywhere in it (``from archplace import x`` counts as
    ``archplace.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "archplace":
                found |= {f"archplace.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] == "archplace"}


def _room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _upward(path: Path, allowed_rooms: set[str]) -> set[str]:
    module = str(path.relative_to(SRC))
    return {name for name in _imports(path)
            if _room_of(name) not in allowed_rooms and (module, name) not in ALLOWED_UPWARD}


@pytest.mark.parametrize("path", sorted((SRC / "base").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_base_imports_only_base(path: Path) -> None:
    assert _upward(path, {"base", "_version"}) == set()


@pytest.mark.parametrize("path", sorted(p for room in ENGINE for p in (SRC / room).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_the_engine_imports_neither_the_front_door_nor_the_cli(path: Path) -> None:
    assert {name for name in _imports(path) if _room_of(name) in {"front", "cli"}} == set()


@pytest.mark.parametrize("path", FRONT, ids=lambda p: str(p.relative_to(SRC)))
def test_the_front_door_does_not_import_the_cli(path: Path) -> None:
    assert {name for name in _imports(path) if _room_of(name) == "cli"} == set()


def test_the_rooms_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The import scanner finds each spelling, and every allow-list entry is still needed."""
    probe = tmp_path / "probe.py"
    probe.write_text("from archplace import api\nimport archplace.cli.entry\n"
                     "def f():\n    from archplace.front.app import x\n")
    assert _imports(probe) == {"archplace.api", "archplace.cli.entry", "archplace.front.app"}
    for module, name in ALLOWED_UPWARD:
        assert name in _imports(SRC / module), (module, name)
    assert not [path.name for path in SRC.glob("*.py") if path.name not in {"__init__.py", "_version.py"}]


BELOW_SEARCH = ("cost", "scheduling", "placement", "workload", "hw")
"""Packages the search is built on: none of them imports :mod:`archplace.dse`."""


def _below_search() -> list[Path]:
    return sorted(path for layer in BELOW_SEARCH for path in (SRC / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _below_search(), ids=lambda p: str(p.relative_to(SRC)))
def test_lower_layers_do_not_import_the_search(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert not {name for name in imported if name.split(".")[:2] == ["archplace", "dse"]}


# Names: one meaning per class name (issue #25). A class named twice in the package makes a reader
# (and an import) guess which one is meant; private classes (a leading underscore) are exempt.
DUPLICATE_CLASS_NAMES_LEFT: dict[str, str] = {}
"""Public class names still defined twice, each with its reason; the list only shrinks."""


def test_public_class_names_are_unique() -> None:
    defined: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(str(path.relative_to(SRC)))
    twice = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert set(twice) == set(DUPLICATE_CLASS_NAMES_LEFT), twice


MODULE_LINES = 600
"""Most lines of a module (the engineering standards: small modules with one concern)."""

FRONT_DOOR_FUNCTION_LINES = 80
"""Most lines of a function in the front door and the CLI, docstring included (issue #25)."""


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(node.name, (node.end_lineno or node.lineno) - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_modules_and_front_door_functions_stay_small(tmp_path: Path) -> None:
    """No module over 600 lines; no function of ``front/`` or ``cli/`` over 80 (a longer one is
    doing two things: a resolver step, or a second command, belongs in its own function)."""
    long_modules = {str(path.relative_to(SRC)): count for path in SRC.rglob("*.py")
                    if (count := len(path.read_text().splitlines())) > MODULE_LINES}
    assert long_modules == {}
    long_functions = {f"{path.relative_to(SRC)}:{name}": count for room in ("front", "cli")
                      for path in (SRC / room).rglob("*.py") for name, count in _functions(path)
                      if count > FRONT_DOOR_FUNCTION_LINES}
    assert long_functions == {}
    probe = tmp_path / "probe.py"  # the measure counts what it should
    probe.write_text("def f(x):\n    '''doc'''\n\n    return x\n\n\nasync def g():\n    pass\n")
    assert _functions(probe) == [("f", 4), ("g", 2)]
