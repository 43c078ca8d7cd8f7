"""Hostile outputs and names on the command line: an output option never replaces a FIFO, a device
node, a socket or a result store; a refused command leaves the disk as it was; names are printed
as text, never as rich markup; the error line stays one bounded line; a Ctrl-C while the command
is being built gives the one-line interrupt message."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.base.outputs import check_output, check_outputs
from archplace.cli.options import MAX_ERROR_CHARS, one_line
from archplace.dse.objective import Objective
from archplace.dse.store import APPLICATION_ID, ResultStore, SearchLabel
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.workload.graph import CoreType
from cli_helpers import run
from hostile import device_node

PRESETS = Path(__file__).resolve().parents[1] / "src" / "archplace" / "hw" / "presets"
TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
            "vocab_size": 1024}
SPACE = ("base: tpuv4\ntensor_cores: [2, 8]\narray_dim: [128]\nvector_cores: [2]\nbuffer: [128 MiB]\n"
         "hbm: [32 GiB]\narea_min_fraction: 0.0\n")
HOSTILE_NAMES = ["[/oops]", "[bold]x[/bold]", "[link=file:///etc]x", ":smile: [red]"]
PREFIX = "archplace: error: "


def one_error(err: str) -> str:
    """The one line of ``err`` (no traceback), without its ``archplace: error:`` prefix."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX) and "Traceback" not in err, err
    return lines[0].removeprefix(PREFIX)


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every path under ``root``: its kind and size, and a regular file's bytes."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            info = path.lstat()
            content = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            out[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, content)
    return out


def refuse(path: Path, option: str = "--out") -> str:
    """The message with which :func:`check_output` refuses ``path``, in a thread so that a check
    that opened a FIFO (and waited for a writer) fails the test instead of hanging it."""
    found: list[BaseException | None] = []

    def check() -> None:
        try:
            check_output(path, option)
            found.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            found.append(exc)

    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(10)
    assert found, f"check_output({path}) did not return: it opened the file"
    assert isinstance(found[0], ConfigError), found[0]
    message = str(found[0])
    assert "\n" not in message and message.startswith(f"{option} {path}: ")
    return message


def make_store(path: Path) -> Path:
    request = {"models": [{"name": "gpt2-xl"}], "cluster": {"devices": 8}, "global_batch": 8}
    ResultStore(path).begin(request, SearchLabel(("gpt2-xl",), Objective("throughput"), 8, 8))
    return path


def other_database(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pipe.html"
    os.mkfifo(path)
    yield path
    assert stat.S_ISFIFO(path.lstat().st_mode)  # still a FIFO, never opened or replaced


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = Path(f"/tmp/archplace-{os.getpid()}-{tmp_path.name[-12:]}.sock")  # sun_path is short
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()
        path.unlink()


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(ScheduleProblem((SchedOp(0, CoreType.TENSOR, 2.0, 1.0, ()),), 2, 1).to_dict()))
    return path


# --- check_output ---------------------------------------------------------------------------


def test_special_files_are_refused_by_kind(fifo: Path, unix_socket: Path, tmp_path: Path) -> None:
    assert refuse(fifo) == f"--out {fifo}: is a FIFO (named pipe), not a regular file"
    assert refuse(unix_socket, "--csv") == f"--csv {unix_socket}: is a socket, not a regular file"
    device = device_node(tmp_path)  # /dev/null, or a private node of it when run as root
    assert refuse(device, "--report") == f"--report {device}: is a character device, not a regular file"
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    assert refuse(link) == f"--out {link}: is a symbolic link to a FIFO (named pipe), not a regular file"
    assert refuse(tmp_path) == f"--out {tmp_path}: is a directory, not a regular file"


def test_databases_are_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path / "results.html")  # a store under any name
    before = store.read_bytes()
    assert "is an archplace result store, which this output would destroy" in refuse(store)
    database = other_database(tmp_path / "x.db")
    assert "is an SQLite database, which this output would destroy" in refuse(database)
    header = tmp_path / "header-only.db"  # a store's header, written by SQLite itself
    with sqlite3.connect(header) as db:
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("CREATE TABLE t (x)")
    assert "archplace result store" in refuse(header)
    assert store.read_bytes() == before


def test_a_check_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "plain.txt"
    blocker.write_text("x")
    before = tree(tmp_path)
    check_output(tmp_path / "new" / "dir" / "out.json", "--out")  # fine: made when written
    check_output(blocker, "--out")  # an ordinary file may be replaced
    assert "cannot create" in refuse(blocker / "sub" / "out.json")
    inside = blocker / "out.json"
    assert refuse(inside) == f"--out {inside}: cannot create it: {blocker} is not a directory"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x.json")
    check_output(dangling, "--out")
    assert tree(tmp_path) == {**before, "dangling.json": tree(tmp_path)["dangling.json"]}
    assert not (tmp_path / "new").exists() and not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        deeper = refuse(locked / "a" / "b.csv", "--csv")
        assert deeper.endswith(f"cannot create {locked / 'a'}: {locked} is not writable")
        assert refuse(locked / "b.csv", "--csv").endswith(f"{locked} is not writable")
    finally:
        locked.chmod(0o700)


def test_two_options_naming_one_file_are_refused(tmp_path: Path) -> None:
    same = tmp_path / "same.html"
    with pytest.raises(ConfigError, match=r"^--report .*same\.html: is also the file of --out"):
        check_outputs({"--out": same, "--plot": None, "--report": tmp_path / "." / "same.html"})


# --- the commands ----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return make_store(tmp_path / "run.db")


def commands(store: Path, problem: Path) -> dict[str, list[str]]:
    """Every command with an output option, up to that option (cheap arguments)."""
    plan = ["--model", "gpt2-xl", "--hardware", "tpuv4", "--devices", "8", "--global-batch", "8"]
    return {
        "search --out": ["search", *plan[:2], *plan[4:], "--space", "tiny", "--out"],
        "search --plot": ["search", *plan[:2], *plan[4:], "--space", "tiny", "--plot"],
        "search --report": ["search", *plan[:2], *plan[4:], "--space", "tiny", "--report"],
        "results --csv": ["results", str(store), "--csv"],
        "results --plot": ["results", str(store), "--plot"],
        "report -o": ["report", str(store), "--baseline", "none", "-o"],
        "plan --report": ["plan", *plan, "--report"],
        "evaluate --report": ["evaluate", *plan, "--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1",
                              "--report"],
        "schedule --dump-problem": ["schedule", "--problem", str(problem), "--dump-problem"],
        "schedule --gantt": ["schedule", "--problem", str(problem), "--gantt"],
    }


@pytest.mark.parametrize("command", ["search --out", "search --plot", "search --report", "results --csv",
                                     "results --plot", "report -o", "plan --report", "evaluate --report",
                                     "schedule --dump-problem", "schedule --gantt"])
def test_every_output_option_refuses_a_fifo_a_device_and_a_store(
        command: str, store: Path, problem_file: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = commands(store, problem_file)[command]
    option = argv[-1].replace("-o", "--out") if argv[-1] == "-o" else argv[-1]
    pipe = tmp_path / "pipe.svg"
    os.mkfifo(pipe)
    other = make_store(tmp_path / "other.svg")  # another store, under a name any option takes
    kept = other.read_bytes()
    device = device_node(tmp_path)  # as root a private node: a regression must not replace /dev/null
    for target, kind in ((pipe, "a FIFO"), (device, "a character device"),
                         (other, "an archplace result store")):
        before = tree(tmp_path)
        code, _, err = run([*argv, str(target)], capsys)
        assert code == 2 and one_error(err).startswith(f"{option} {target}: is {kind}"), err
        assert tree(tmp_path) == before
    assert stat.S_ISFIFO(pipe.lstat().st_mode) and stat.S_ISCHR(os.lstat(device).st_mode)
    assert other.read_bytes() == kept


def refused_cases(store: Path, problem: Path, tmp: Path) -> dict[str, list[str]]:
    """Per command, an invocation refused only after an output option was checked (a bad value
    or a bad second output): each names outputs in directories that do not exist yet."""
    new = tmp / "new"
    model = ["--model", "gpt2-xl", "--devices", "8", "--global-batch", "8"]
    return {
        "search, a bad second output": ["search", *model, "--store", str(new / "s" / "run.db"),
                                        "--out", str(new / "o" / "out.json"), "--report", str(store)],
        "search, a bad plot suffix": ["search", *model, "--out", str(new / "o" / "out.json"),
                                      "--plot", str(new / "p" / "plot.nope")],
        "search, two options one file": ["search", *model, "--out", str(new / "x.html"),
                                         "--report", str(new / "x.html")],
        "search, an unknown space": ["search", *model, "--store", str(new / "s" / "run.db"),
                                     "--out", str(new / "o" / "out.json"), "--space", "nope"],
        "results, a bad plot suffix": ["results", str(store), "--csv", str(new / "c" / "rows.csv"),
                                       "--plot", str(new / "p" / "plot.nope")],
        "report, an unknown baseline": ["report", str(store), "-o", str(new / "r" / "page.html"),
                                        "--baseline", "nope"],
        "plan, an unknown hardware": ["plan", *model, "--hardware", "nope", "--report",
                                      str(new / "r" / "page.html")],
        "evaluate, a bad plan": ["evaluate", *model, "--hardware", "tpuv4", "--tp", "3", "--pp", "1",
                                 "--dp", "8", "--micro-batch", "1", "--report", str(new / "r" / "page.html")],
        "schedule, a bad gantt suffix": ["schedule", "--problem", str(problem), "--dump-problem",
                                         str(new / "d" / "dump.json"), "--gantt", str(new / "g" / "g.nope")],
        "schedule, an unknown backend": ["schedule", "--problem", str(problem), "--backend", "nope",
                                         "--dump-problem", str(new / "d" / "dump.json")],
    }


@pytest.mark.parametrize("case", ["search, a bad second output", "search, a bad plot suffix",
                                  "search, two options one file", "search, an unknown space",
                                  "results, a bad plot suffix", "report, an unknown baseline",
                                  "plan, an unknown hardware", "evaluate, a bad plan",
                                  "schedule, a bad gantt suffix", "schedule, an unknown backend"])
def test_a_refused_command_leaves_the_disk_as_it_was(case: str, store: Path, problem_file: Path,
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = refused_cases(store, problem_file, tmp_path)[case]
    before = tree(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == 2 and one_error(err), err
    assert tree(tmp_path) == before  # no directory, no file, no store


def test_report_never_overwrites_another_store(store: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    other = make_store(tmp_path / "B.db")
    kept = other.read_bytes()
    code, _, err = run(["report", str(store), "--baseline", "none", "-o", str(other)], capsys)
    assert code == 2 and "is an archplace result store, which this output would destroy" in one_error(err)
    assert other.read_bytes() == kept


# --- names printed as text -------------------------------------------------------------------


def hostile_chip(folder: Path, name: str) -> Path:
    """The tpuv4 preset under the hardware name ``name``, in a file whose path holds markup too."""
    path = folder / "[bold]chips[" / f"{name.replace('/', '_')}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (PRESETS / "tpuv4.yaml").read_text()
    assert "\n  name: tpuv4\n" in text
    path.write_text(text.replace("\n  name: tpuv4\n", f"\n  name: {json.dumps(name)}\n"))
    return path


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_estimate_prints_names_as_text(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chip = hostile_chip(tmp_path, name)
    code, out, err = run(["estimate", "--model", "gpt2-xl", "--hardware", str(chip)], capsys)
    assert code == 0, err
    assert f"on {name}: tp=1" in out and f"{name}: " in out  # the title and the caption
    matmul = ["estimate", "matmul", "--m", "64", "--k", "64", "--n", "64", "--hardware", str(chip)]
    code, out, err = run(matmul, capsys)
    squeezed = "".join(out.split())  # the title wraps the long path
    assert code == 0 and "".join(str(chip).split()) in squeezed, err


def test_plan_prints_a_hardware_path_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chip = hostile_chip(tmp_path, "[/oops]")
    code, out, err = run(["plan", "--model", "gpt2-xl", "--hardware", str(chip), "--devices", "8",
                          "--global-batch", "8", "--tp", "1", "--micro-batch", "1", "--recompute", "none",
                          "--schedule", "1f1b", "--top", "1"], capsys)
    assert code == 0 and f"× {chip}," in out.replace("\n", ""), err


@pytest.mark.slow
def test_search_with_a_hostile_baseline_writes_its_outputs(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_GPT))
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    chip = hostile_chip(tmp_path, "[/oops]")
    out, report = tmp_path / "o" / "out.json", tmp_path / "r" / "page.html"
    code, stdout, err = run(["search", "--model", str(model), "--space", str(space), "--devices", "8",
                             "--global-batch", "8", "--micro-batch", "1", "--jobs", "1", "--exact-top", "0",
                             "--baseline", str(chip), "--out", str(out), "--report", str(report)], capsys)
    assert code == 0, err
    assert "[/oops]" in stdout and "best / [/oops]:" in stdout
    assert json.loads(out.read_text())["baseline"]["accelerator"]["name"] == "[/oops]"
    assert "[/oops]" in report.read_text()


def test_rich_tables_keep_markup_as_text() -> None:
    from rich.console import Console

    from archplace.reporting.estimate_tables import figures_table

    table = figures_table("[/oops] on [bold]x[/bold]", {"[link=file:///etc]x": 1.0}, caption=":smile: [/]")
    table.caption = f"{table.caption} [/late]"
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115 - closed by exit
    console.print(table)
    text = console.export_text()
    for shown in ("[/oops] on [bold]x[/bold]", "[link=file:///etc]x", ":smile: [/] [/late]"):
        assert shown in text


# --- the error line and interrupts ----------------------------------------------------------


def test_a_huge_error_is_one_bounded_line(capsys: pytest.CaptureFixture[str]) -> None:
    huge = "a" * 100 + "\n\r\x1b[31m" + "b" * 262_144 + "THE END"
    code, _, err = run(["estimate", "--model", huge, "--hardware", "tpuv4"], capsys)
    line = one_error(err)
    assert code == 2 and len(line) <= MAX_ERROR_CHARS and "characters left out" in line
    assert line.startswith("unknown model 'aaaa") and line.endswith("config.json")
    assert "\x1b" not in err and "\r" not in err
    code, _, err = run(["results", "/nowhere/a\nb\x1b[2J.db"], capsys)  # a raw path in the message
    assert code == 2 and one_error(err) == "result store not found: /nowhere/a b\\x1b[2J.db"


def test_one_line() -> None:
    assert one_line("a\nb\r\nc\u2028d\x1b[0m\te") == "a b c d\\x1b[0m\te"
    for size in (1000, 1001, 1500, 10**6):
        text = "".join(chr(97 + i % 26) for i in range(size))
        short = one_line(text, 1000)
        assert len(short) <= 1000 and short[:500] == text[:500] and short[-200:] == text[-200:]
        if size <= 1000:
            assert short == text
            continue
        marker = re.search(r" …\(([\d,]+) characters left out\)… ", short)
        assert marker is not None and len(short) > 990
        assert int(marker.group(1).replace(",", "")) == size - (len(short) - len(marker.group(0)))


@pytest.mark.parametrize("where", ["get_command", "basicConfig"])
def test_an_interrupt_while_the_command_is_built(where: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    import typer

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(typer.main if where == "get_command" else logging, where, interrupted)
    code, out, err = run(["models"], capsys)
    assert (code, out, err) == (130, "", "archplace: interrupted\n")
