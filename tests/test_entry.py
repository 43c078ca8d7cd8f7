"""The console script's entry point: a Ctrl-C while the CLI is still being imported, and the
immediate exit after an interrupt."""

from __future__ import annotations

import os
import subprocess
import sys
from types import ModuleType

import pytest

from archplace.entry import main, run_exiting_fast


class _Importing(ModuleType):
    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt


class _Exited(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _raise_exited(status: int) -> None:
    raise _Exited(status)


def test_ctrl_c_during_the_import_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "archplace.cli", _Importing("archplace.cli"))
    monkeypatch.setattr(os, "_exit", _raise_exited)
    with pytest.raises(_Exited) as exc:
        main()
    assert exc.value.status == 130
    assert capsys.readouterr().err == "archplace: interrupted\n"


def test_an_interrupted_command_ends_at_once_and_other_statuses_are_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "_exit", _raise_exited)

    def interrupted() -> None:
        raise SystemExit(130)

    with pytest.raises(_Exited) as exc:
        run_exiting_fast(interrupted)
    assert exc.value.status == 130
    for status in (0, 2, None):
        def ends(status: int | None = status) -> None:
            raise SystemExit(status)

        with pytest.raises(SystemExit) as plain:
            run_exiting_fast(ends)
        assert plain.value.code == status


def test_a_process_interrupted_in_python_shutdown_flushes_its_output() -> None:
    """The immediate exit flushes what was printed (a real process: os._exit is not patched)."""
    code = ("import sys; from archplace.entry import run_exiting_fast\n"
            "def run():\n    print('kept', flush=False); sys.stderr.write('archplace: interrupted\\n')\n"
            "    raise SystemExit(130)\n"
            "run_exiting_fast(run)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (130, "kept\n", "archplace: interrupted\n")


def test_the_entry_point_runs_the_cli(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["archplace", "models"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0 and "gpt2-xl" in capsys.readouterr().out
