"""The console script's entry point: a Ctrl-C while the CLI is still being imported."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from archplace.entry import main


class _Importing(ModuleType):
    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt


def test_ctrl_c_during_the_import_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "archplace.cli", _Importing("archplace.cli"))
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 130
    assert capsys.readouterr().err == "archplace: interrupted\n"


def test_the_entry_point_runs_the_cli(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["archplace", "models"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0 and "gpt2-xl" in capsys.readouterr().out
