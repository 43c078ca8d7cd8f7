"""The console script's entry point: a Ctrl-C while the CLI is still being imported, and the
immediate exit after an interrupt."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from archplace.cli.entry import main, run_exiting_fast


class _Importing(ModuleType):
    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt


class _Exited(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _raise_exited(status: int) -> None:
    raise _Exited(status)


@pytest.fixture()
def exit_handlers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """os._exit raises :class:`_Exited` instead of ending pytest, and running the exit handlers
    is recorded (this process's own are not run)."""
    ran: list[str] = []
    monkeypatch.setattr(os, "_exit", _raise_exited)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: ran.append("exit handlers"))
    return ran


def test_ctrl_c_during_the_import_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch,
                                                      exit_handlers: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "archplace.cli", _Importing("archplace.cli"))
    with pytest.raises(_Exited) as exc:
        main()
    assert exc.value.status == 130 and exit_handlers == ["exit handlers"]
    assert capsys.readouterr().err == "archplace: interrupted\n"


def test_an_interrupted_command_ends_at_once_and_other_statuses_are_raised(exit_handlers: list[str]) -> None:
    def interrupted() -> None:
        raise SystemExit(130)

    with pytest.raises(_Exited) as exc:
        run_exiting_fast(interrupted)
    assert exc.value.status == 130 and exit_handlers == ["exit handlers"]
    for status in (0, 2, None):
        def ends(status: int | None = status) -> None:
            raise SystemExit(status)

        with pytest.raises(SystemExit) as plain:
            run_exiting_fast(ends)
        assert plain.value.code == status
    assert exit_handlers == ["exit handlers"]  # only for the interrupt: the others exit as usual


def test_a_process_interrupted_in_python_shutdown_flushes_its_output() -> None:
    """The immediate exit runs the exit handlers and flushes what was printed (a real process:
    nothing patched)."""
    code = ("import atexit, sys; from archplace.cli.entry import run_exiting_fast\n"
            "atexit.register(lambda: print('handler ran', flush=False))\n"
            "def run():\n    print('kept', flush=False); sys.stderr.write('archplace: interrupted\\n')\n"
            "    raise SystemExit(130)\n"
            "run_exiting_fast(run)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (130, "kept\nhandler ran\n",
                                                           "archplace: interrupted\n")


def test_an_interrupted_process_pool_leaves_no_warning(tmp_path: Path) -> None:
    """A spawned process pool's semaphores are released by multiprocessing's exit handler before
    the immediate exit, its workers killed as an interrupt leaves them: its resource tracker has
    nothing to warn about after the one line (it printed two lines of 'leaked semaphore objects'
    when os._exit came first)."""
    code = ("import multiprocessing, os, signal, sys\n"
            "from concurrent.futures import ProcessPoolExecutor\n"
            "from archplace.cli.entry import run_exiting_fast\n"
            "def run():\n"
            "    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('spawn'))\n"
            "    pool.submit(abs, -1).result()\n"
            "    for process in list(pool._processes.values()):\n"
            "        os.kill(process.pid, signal.SIGKILL)\n"
            "    sys.stderr.write('archplace: interrupted\\n')\n"
            "    raise SystemExit(130)\n"
            "if __name__ == '__main__':\n    run_exiting_fast(run)\n")
    script = tmp_path / "pool.py"
    script.write_text(code)
    # the tracker, a process of its own, warns after the parent is gone, on the stderr it shares:
    # run() reads the pipe until the tracker has closed it too
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stderr) == (130, "archplace: interrupted\n")


def test_the_entry_point_runs_the_cli(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["archplace", "models"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0 and "gpt2-xl" in capsys.readouterr().out


def test_the_resource_tracker_does_not_warn_after_an_interrupt() -> None:
    """A CLI ended at once (as on Ctrl-C) with a semaphore still held: multiprocessing's resource
    tracker unlinks it without printing its two-line warning after the CLI's one line."""
    code = ("import multiprocessing, os\n"
            "from archplace.cli import entry\n"
            "def ended_at_once(start):\n"
            "    held = multiprocessing.get_context('spawn').Semaphore()\n"
            "    os._exit(130)\n"
            "entry.run_exiting_fast = ended_at_once\n"
            "entry.main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert done.stderr == ""  # the tracker holds stderr open until it has cleaned up and exited


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), "Interrupted"])
def test_an_extension_import_stopped_by_an_interrupt_is_answered_as_the_interrupt(
        interrupt: BaseException | str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C while a C extension initialises (OR-Tools' pybind11 module: the CP-SAT backend
    imports it when it first solves) surfaces as ImportError("initialization failed") raised from
    the interrupt; the CLI answers it with its one line and 130, and any other ImportError as
    it is."""
    from archplace.base.lifetime import Interrupted
    from archplace.cli import commands
    from archplace.front import api

    cause = Interrupted() if interrupt == "Interrupted" else interrupt
    assert isinstance(cause, BaseException)

    def stopped(*args: object, **kwargs: object) -> None:
        raise ImportError("initialization failed") from cause

    monkeypatch.setattr(api, "solve_problem", stopped)
    argv = ["schedule", "--model", "gpt2-xl", "--hardware", "tpuv4", "--backend", "list"]
    with pytest.raises(SystemExit) as exc:
        commands.main(argv)
    assert exc.value.code == 130 and capsys.readouterr().err == "archplace: interrupted\n"

    def broken(*args: object, **kwargs: object) -> None:
        raise ImportError("no module named ortools")

    monkeypatch.setattr(api, "solve_problem", broken)
    with pytest.raises(ImportError, match="no module named ortools"):
        commands.main(argv)
