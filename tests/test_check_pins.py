"""tools/check_pins.py: the CI step that fails when an installed package is not pinned."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_and_a_wrong_pin_are_reported(tmp_path: Path) -> None:
    tool = load_tool("check_pins")
    pinned = tool.pins(ROOT / "constraints.txt")
    del pinned["pytest"]
    pinned["numpy"] = "0.0.1"
    found = tool.problems(pinned)
    assert found == [f"numpy {version('numpy')} is installed but constraints.txt pins 0.0.1",
                     f"pytest {version('pytest')} is installed but not pinned in constraints.txt"]


def test_only_exact_pins_are_accepted(tmp_path: Path) -> None:
    tool = load_tool("check_pins")
    path = tmp_path / "c.txt"
    path.write_text("# comment\nTyping_Extensions==4.0  # trailing\n")
    assert tool.pins(path) == {"typing-extensions": "4.0"}
    path.write_text("numpy>=1.26\n")
    with pytest.raises(SystemExit, match="not an exact pin"):
        tool.pins(path)
