"""Ctrl-C at any phase: one stderr line, exit status 130 within 2 s, no worker left behind;
workers end with a killed parent; the store of an interrupted search resumes to the same answer.

The CLI runs as ``python -m archplace.cli`` in a session of its own, and SIGINT goes to its
whole process group, as a terminal's Ctrl-C does: the workers get it too.  A run is signalled
once it is past its imports (its result store has rows, or it has used a second of CPU time).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
import pytest

from archplace.base.executor import make_executor
from archplace.base.lifetime import Interrupted, call_interruptibly, raising_interrupts, stop_processes
from archplace.cli import main

pytestmark = pytest.mark.serial  # timed: make test-slow runs these without other workers

MODEL = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256,
         "vocab_size": 2048, "bos_token_id": 0, "eos_token_id": 0}
SLOW_MODEL = {**MODEL, "n_layer": 12, "n_embd": 512, "n_head": 8, "n_positions": 512, "vocab_size": 4096}
EXIT_WITHIN_S = 2.0
STORED = r"archplace: interrupted \((\d+) designs? stored in (.+); re-run the same command to resume\)"
EVALUATED = (r"archplace: interrupted \((\d+) designs? evaluated; "
             r"use --store FILE to keep results across runs\)")


@dataclass(frozen=True)
class Search:
    """A 12-design search of a small model, and its result run to the end in this process."""

    argv: list[str]
    designs: int
    best: dict[str, object]
    evaluated: list[str]


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, small_space_file: Path) -> Search:
    model = tmp_path_factory.mktemp("model") / "config.json"
    model.write_text(json.dumps(MODEL))
    argv = ["search", "--model", str(model), "--space", str(small_space_file), "--devices", "64",
            "--global-batch", "64", "--micro-batch", "1", "--micro-batch", "2",
            "--strategy", "exhaustive-all", "--exact-top", "0", "--baseline", "none"]
    out = tmp_path_factory.mktemp("reference") / "fresh.json"
    with pytest.raises(SystemExit) as exc:  # also fills the graph cache the subprocesses share
        main([*argv, "--jobs", "1", "--out", str(out)])
    assert exc.value.code in (0, None)
    fresh = json.loads(out.read_text())
    return Search(argv, fresh["considered"], fresh["best"], _names(fresh))


@pytest.fixture()
def sigint_restored() -> Iterator[None]:
    """A harmless SIGINT handler for a test that signals this process, the previous one after."""
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    yield
    signal.signal(signal.SIGINT, previous)


def _names(result: dict[str, object]) -> list[str]:
    evaluated = result["evaluated"]
    assert isinstance(evaluated, list)
    return sorted(r["accelerator"]["name"] for r in evaluated)


def _rows(db: Path) -> dict[str, float]:
    """Design -> finish time of every stored result; {} while the store is being created."""
    try:
        with sqlite3.connect(db) as connection:
            return dict(connection.execute("SELECT design, finished FROM results").fetchall())
    except sqlite3.OperationalError:
        return {}


Launch = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture()
def launch() -> Iterator[Launch]:
    """``launch(argv, **env)`` starts ``python -m archplace.cli`` in a session of its own, stderr
    piped; what is left of its process group when the test ends is killed."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-m", "archplace.cli", *argv], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True, env={**os.environ, **env},
                                   preexec_fn=_sigint_default)
        started.append(process)
        return process

    yield start
    for process in started:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def _sigint_default() -> None:
    """In the child before it runs Python: SIGINT at its default and not blocked, as a shell
    starts a command (an ignored or blocked SIGINT is inherited, and Python would leave it so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _wait_for(process: subprocess.Popen[bytes], ready: Callable[[], bool], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert process.poll() is None, "the run ended before it was signalled"
        assert time.monotonic() < deadline, "the run never got ready"
        time.sleep(0.01)


def _busy(pid: int, cpu_s: float = 1.0) -> Callable[[], bool]:
    """Ready once process ``pid`` has used ``cpu_s`` seconds of CPU (its imports take ~0.4 s)."""

    def ready() -> bool:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            return False
        return times.user + times.system >= cpu_s

    return ready


def _ctrl_c(process: subprocess.Popen[bytes], children: list[psutil.Process]) -> tuple[float, int, str]:
    """SIGINT to the process group; (seconds until the CLI exited, its exit status, its stderr).
    Fails if a child process outlives it by more than a few seconds."""
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("the interrupted run did not exit")
    took = time.monotonic() - sent
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        child.kill()
    assert not alive, f"left behind: {alive}"
    assert process.stderr is not None
    return took, code, process.stderr.read().decode()


def _one_line(err: str, pattern: str) -> re.Match[str]:
    assert "Traceback" not in err, f"the whole stderr:\n{err}"  # shown whole: a rare, timing-bound fault
    lines = err.splitlines()
    assert len(lines) == 1, err
    match = re.fullmatch(pattern, lines[0])
    assert match, lines[0]
    return match


@pytest.mark.slow
def test_ctrl_c_during_a_search_stops_its_workers_and_the_store_resumes(
        search: Search, launch: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "run.db"
    argv = [*search.argv, "--jobs", "2", "--store", str(db)]
    process = launch(argv)
    _wait_for(process, lambda: len(_rows(db)) >= 2)
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 2  # the pool's workers

    took, code, err = _ctrl_c(process, children)
    kept = _rows(db)
    match = _one_line(err, STORED)
    assert code == 130 and took < EXIT_WITHIN_S
    assert int(match[1]) == len(kept) >= 2 and match[2] == str(db)

    out = tmp_path / "resumed.json"
    with pytest.raises(SystemExit) as exc:  # the same command again, as the message says
        main([*argv, "--out", str(out)])
    capsys.readouterr()
    assert exc.value.code in (0, None)
    after = _rows(db)
    assert len(after) == search.designs
    assert all(after[design] == finished for design, finished in kept.items())  # read back, not redone
    resumed = json.loads(out.read_text())
    assert resumed["best"] == search.best and _names(resumed) == search.evaluated


@pytest.mark.slow
def test_workers_end_with_a_killed_parent_and_the_store_resumes(
        search: Search, launch: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "run.db"
    argv = [*search.argv, "--store", str(db)]
    process = launch([*argv, "--jobs", "2"])
    _wait_for(process, lambda: len(_rows(db)) >= 2)
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 2

    process.kill()  # SIGKILL: no clean-up of any kind in the parent
    process.wait()
    killed = time.monotonic()
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        child.kill()
    assert not alive and time.monotonic() - killed < 3.0

    kept = _rows(db)
    out = tmp_path / "resumed.json"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--jobs", "1", "--out", str(out)])
    capsys.readouterr()
    assert exc.value.code in (0, None)
    after = _rows(db)
    assert len(after) == search.designs and all(after[d] == t for d, t in kept.items())
    assert json.loads(out.read_text())["best"] == search.best


@pytest.mark.slow
def test_ctrl_c_without_a_store_says_how_many_designs_were_evaluated(
        search: Search, launch: Launch, tmp_path: Path) -> None:
    # The slower model, traced into an empty graph cache: ~10 s of CPU in all, of which the
    # CLI's imports take 0.7-1 s; signalled at 3 s, it is tracing or searching by then on any
    # machine (at 1 s, a loaded CI machine was still importing: the bare one-line message).
    model = tmp_path / "config.json"
    model.write_text(json.dumps(SLOW_MODEL))
    argv = [str(model) if arg.endswith("config.json") else arg for arg in search.argv]
    process = launch([*argv, "--jobs", "1"], ARCHPLACE_CACHE_DIR=str(tmp_path / "graphs"))
    _wait_for(process, _busy(process.pid, cpu_s=3.0))
    took, code, err = _ctrl_c(process, psutil.Process(process.pid).children(recursive=True))
    match = _one_line(err, EVALUATED)
    assert code == 130 and took < EXIT_WITHIN_S and 0 <= int(match[1]) < search.designs


@pytest.mark.parametrize("command", [
    ["plan", "--hardware", "tpuv4", "--devices", "64", "--global-batch", "64"],
    ["evaluate", "--hardware", "tpuv4", "--devices", "64", "--global-batch", "64", "--tp", "1", "--pp", "1",
     "--dp", "64", "--micro-batch", "1"],
])
def test_ctrl_c_during_model_tracing_or_planning(command: list[str], launch: Launch, tmp_path: Path) -> None:
    model = tmp_path / "model" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(SLOW_MODEL))
    # an empty graph cache: the model is traced (seconds) and then planned
    process = launch([*command, "--model", str(model)], ARCHPLACE_CACHE_DIR=str(tmp_path / "cache"))
    _wait_for(process, _busy(process.pid))
    took, code, err = _ctrl_c(process, [])
    _one_line(err, r"archplace: interrupted")
    assert code == 130 and took < EXIT_WITHIN_S


def _hard_problem(path: Path) -> Path:
    """60 operators on 3 tensor and 2 vector cores that neither solver proves optimal in a minute."""
    rng = random.Random(0)
    ops = []
    for i in range(60):
        single = rng.randint(50, 999) * 1e-6
        preds = sorted(rng.sample(range(i), rng.randint(0, 2))) if i > 5 else []
        ops.append({"id": i, "core_type": rng.choice(["tensor", "vector", "fused"]), "single_s": single,
                    "all_s": single * rng.uniform(0.3, 0.6), "preds": preds})
    path.write_text(json.dumps({"tensor_cores": 3, "vector_cores": 2, "ops": ops}))
    return path


def test_ctrl_c_stops_cp_sat_at_once(launch: Launch, tmp_path: Path) -> None:
    process = launch(["schedule", "--problem", str(_hard_problem(tmp_path / "p.json")), "--backend", "cpsat",
                      "--time-limit", "60", "--workers", "2"])
    _wait_for(process, _busy(process.pid))
    took, code, err = _ctrl_c(process, [])
    _one_line(err, r"archplace: interrupted")
    assert code == 130 and took < EXIT_WITHIN_S


def _highs_worker(process: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """Ready once the HiGHS worker of ``process`` has solved for a while."""

    def ready() -> bool:
        children = psutil.Process(process.pid).children()
        return bool(children) and _busy(children[0].pid, 0.8)()

    return ready


def test_ctrl_c_kills_the_highs_worker(launch: Launch, tmp_path: Path) -> None:
    process = launch(["schedule", "--problem", str(_hard_problem(tmp_path / "p.json")), "--backend", "highs",
                      "--time-limit", "60", "--workers", "1"])
    _wait_for(process, _highs_worker(process))
    worker = psutil.Process(process.pid).children()
    assert os.getpgid(worker[0].pid) != process.pid  # its own group: the Ctrl-C reaches only the CLI
    took, code, err = _ctrl_c(process, worker)
    _one_line(err, r"archplace: interrupted")
    assert code == 130 and took < EXIT_WITHIN_S


def test_the_highs_worker_ends_with_a_killed_parent(launch: Launch, tmp_path: Path) -> None:
    process = launch(["schedule", "--problem", str(_hard_problem(tmp_path / "p.json")), "--backend", "highs",
                      "--time-limit", "60", "--workers", "1"])
    _wait_for(process, _highs_worker(process))
    worker = psutil.Process(process.pid).children()
    process.kill()
    process.wait()
    _, alive = psutil.wait_procs(worker, timeout=3)
    for child in alive:
        child.kill()
    assert not alive


def _searches(db: Path) -> int:
    """Searches begun in the store; 0 while it is being created."""
    try:
        with sqlite3.connect(db) as connection:
            return int(connection.execute("SELECT count(*) FROM searches").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


PHAZE_WITHIN_S = 1.0
"""Ctrl-C of a search of the full phaze space (88,080 designs) with a store: what the store
keeps is counted by the search's key, known since the search was checked, not by reading its
designs again (that took 3 s idle, 8.5 s loaded)."""


@pytest.mark.slow
def test_ctrl_c_of_a_phaze_search_with_a_store_is_fast(launch: Launch, tmp_path: Path) -> None:
    """The graph cache is filled first: a run that traces imports torch, and the interpreter's
    exit then takes ~2 s more (the CLI's exit, not the search's)."""
    from archplace.front import api
    api.search_request("gpt2-xl", space="phaze", devices=1024, global_batch=4096, baseline=None).all_chains(2)
    db = tmp_path / "phaze.db"
    process = launch(["search", "--model", "gpt2-xl", "--space", "phaze", "--devices", "1024",
                      "--global-batch", "4096", "--jobs", "2", "--exact-top", "0", "--baseline", "none",
                      "--store", str(db)])
    _wait_for(process, lambda: _searches(db) == 1, timeout_s=300)  # begun: bounding and evaluating
    time.sleep(1.0)
    took, code, err = _ctrl_c(process, psutil.Process(process.pid).children(recursive=True))
    match = _one_line(err, STORED)
    assert code == 130 and took < PHAZE_WITHIN_S, took
    assert int(match[1]) == len(_rows(db)) and match[2] == str(db)


@pytest.mark.slow
def test_ctrl_c_during_a_dask_search(search: Search, launch: Launch, tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    process = launch([*search.argv, "--executor", "dask", "--jobs", "2", "--store", str(db)])
    _wait_for(process, lambda: len(_rows(db)) >= 1)
    children = psutil.Process(process.pid).children(recursive=True)
    took, code, err = _ctrl_c(process, children)
    match = _one_line(err, STORED)
    assert code == 130 and took < EXIT_WITHIN_S and int(match[1]) == len(_rows(db))


def test_the_cli_in_process_stops_cp_sat_and_says_so(tmp_path: Path, sigint_restored: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    problem = _hard_problem(tmp_path / "p.json")
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main(["schedule", "--problem", str(problem), "--backend", "cpsat", "--time-limit", "30"])
    assert exc.value.code == 130 and time.monotonic() - started < 0.5 + EXIT_WITHIN_S
    assert capsys.readouterr().err == "archplace: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the way out is not interrupted again


def test_an_interrupt_stops_a_blocking_call_at_once(sigint_restored: None) -> None:
    released = threading.Event()
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(Interrupted), raising_interrupts():
        call_interruptibly(lambda: released.wait(30), released.set)
    assert released.is_set() and time.monotonic() - started < 1.0  # stop() was called
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name == "archplace-call"]


@pytest.mark.parametrize("handler", ["ignored", "raising"])
def test_call_interruptibly_passes_results_and_errors_through(handler: str, sigint_restored: None) -> None:
    """SIGINT ignored: the call runs in this thread; raising: in a helper thread."""

    def fail() -> None:
        raise ValueError("from the call")

    if handler == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    context: AbstractContextManager[None] = raising_interrupts() if handler == "raising" else nullcontext()
    before = signal.getsignal(signal.SIGINT)
    with context:
        ran_in = call_interruptibly(threading.current_thread, lambda: None)
        assert (ran_in is threading.main_thread()) is (handler == "ignored")
        assert call_interruptibly(lambda: 42, lambda: None) == 42
        with pytest.raises(ValueError, match="from the call"):
            call_interruptibly(fail, lambda: None)
    assert signal.getsignal(signal.SIGINT) is before  # restored: no interrupt happened


class _SignalsItself:
    """An object whose destructor gets SIGINT delivered while it runs."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:  # the handler runs here, inside __del__
            pass


def test_an_interrupt_lost_in_a_destructor_is_raised_again(sigint_restored: None,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with pytest.raises(Interrupted), raising_interrupts():
        victim = _SignalsItself()
        del victim
        survived = time.monotonic()
        time.sleep(10)
    assert survived - started >= 0.1  # not raised inside __del__, where it would be lost
    assert time.monotonic() - started < 1.5  # but sent again (every 0.25 s) and raised here
    assert "Exception ignored" not in capfd.readouterr().err


def _line(stream: IO[str], timeout_s: float = 30) -> str:
    """The next line of ``stream``, or a test failure after ``timeout_s``."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert found and found[0], "no line in time"
    return found[0].strip()


_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {child!r}])
print(child.pid, flush=True)
time.sleep(60)
"""
_GUARDED = ("import os, time; from archplace.base.lifetime import guard_child; guard_child(os.getppid()); "
            "print('ready', flush=True); time.sleep(60)")
_WATCHED = ("import os, threading, time; from archplace.base import lifetime; "
            "threading.Thread(target=lifetime._watch_parent, args=(os.getppid(),)).start(); "
            "print('ready', flush=True); time.sleep(60)")


@pytest.mark.parametrize("child", [_GUARDED, _WATCHED], ids=["guard_child", "polling-thread-only"])
def test_a_child_ends_with_its_parent(child: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT.format(child=child)], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    orphan = psutil.Process(int(_line(parent.stdout)))
    try:
        assert _line(parent.stdout) == "ready"  # the child shares its parent's stdout
        if child == _GUARDED:
            orphan.send_signal(signal.SIGINT)  # ignored: the parent stops its children
            time.sleep(0.2)
            assert orphan.status() != psutil.STATUS_ZOMBIE
        parent.kill()
        parent.wait()
        orphan.wait(timeout=3)  # psutil.TimeoutExpired: it outlived its parent
    finally:
        if orphan.is_running():
            orphan.kill()
        parent.kill()
        parent.wait()


def _workers(before: set[int]) -> list[psutil.Process]:
    """Children of this process started since ``before``, except multiprocessing's resource tracker."""
    return [p for p in psutil.Process().children() if p.pid not in before
            and "resource_tracker import main" not in " ".join(p.cmdline())]


def test_the_local_pool_ignores_sigint_and_stops_at_once_on_an_interrupt() -> None:
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(Interrupted), make_executor("local", 2) as pool:
        assert pool is not None
        assert pool.submit(signal.raise_signal, signal.SIGINT).exception() is None  # ignored
        busy: list[Future[None]] = [pool.submit(time.sleep, 60) for _ in range(10)]
        deadline = time.monotonic() + 60
        while sum(f.running() for f in busy) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = _workers(before)
        started = time.monotonic()
        raise Interrupted()
    assert time.monotonic() - started < EXIT_WITHIN_S
    _, alive = psutil.wait_procs(workers, timeout=1)
    assert len(workers) == 2 and not alive
    deadline = time.monotonic() + 1  # the running ones fail (BrokenProcessPool): none sleeps on
    while not all(f.done() for f in busy) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(f.done() for f in busy)
    # cancelled: all but those running or in the call queue (2 workers + 3 places) never started
    assert sum(f.cancelled() for f in busy) >= len(busy) - 5


def test_one_job_runs_in_this_process() -> None:
    with make_executor("local", 1) as pool:
        assert pool is None


def test_stop_processes_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = ("import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    stubborn = multiprocessing.get_context("spawn").Process(target=exec, args=(code,))
    stubborn.start()
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    stop_processes([stubborn], grace_s=0.3)
    assert not stubborn.is_alive() and stubborn.exitcode == -signal.SIGKILL
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(("store", "said"), [
    (False, "0 designs evaluated; use --store FILE to keep results across runs"),
    (True, "nothing stored in {db}"),
])
def test_a_search_interrupted_before_it_began_says_nothing_was_kept(
        store: bool, said: str, small_space_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while the search command checks its outputs, before a request is built: the
    search's own line, not the bare one."""
    import archplace.cli.search as cli

    def interrupted(*args: object, **kwargs: object) -> None:
        raise Interrupted()

    monkeypatch.setattr(cli, "check_outputs", interrupted)
    model = tmp_path / "config.json"
    model.write_text(json.dumps(MODEL))
    db = tmp_path / "run.db"
    argv = ["search", "--model", str(model), "--space", str(small_space_file), "--devices", "64",
            "--global-batch", "64", *(["--store", str(db)] if store else [])]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 130
    assert capsys.readouterr().err == f"archplace: interrupted ({said.format(db=db)})\n"
    assert not db.exists()
