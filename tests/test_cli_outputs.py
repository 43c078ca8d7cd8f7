"""Output paths of the CLI: a path that cannot be written fails at once, in one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archplace.cli import main
from archplace.dse.objective import Objective
from archplace.dse.store import ResultStore, SearchLabel
from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.workload.graph import CoreType

SEARCH = ["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    problem = ScheduleProblem((SchedOp(0, CoreType.TENSOR, 2.0, 1.0, ()),), 2, 1)
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(problem.to_dict()))
    return path


def bad_paths(tmp_path: Path) -> list[tuple[Path, str]]:
    """A directory, and a file whose parent is a regular file."""
    blocker = tmp_path / "plain.txt"
    blocker.write_text("x")
    return [(tmp_path, "is a directory"), (blocker / "out.json", "cannot create")]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_search_out_is_checked_before_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path, reason in bad_paths(tmp_path):
        # --space huge would fail too, but only once the search is set up: the --out check comes first
        code, err = run([*SEARCH, "--space", "huge", "--out", str(path)], capsys)
        line = one_line(err)
        assert code == 2 and line.startswith(f"archplace: error: --out {path}") and reason in line


def test_results_csv_and_schedule_files(tmp_path: Path, problem_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "run.db"
    ResultStore(store).begin({"models": [{"name": "gpt2-xl"}], "cluster": {"devices": 8}, "global_batch": 8},
                             SearchLabel(("gpt2-xl",), Objective("throughput"), 8, 8))
    for path, reason in bad_paths(tmp_path):
        code, err = run(["results", str(store), "--csv", str(path)], capsys)
        assert code == 2 and f"--csv {path}" in one_line(err) and reason in err
        for option in ("--gantt", "--dump-problem"):
            code, err = run(["schedule", "--problem", str(problem_file), option, str(path)], capsys)
            assert code == 2 and f"{option} {path}" in one_line(err) and reason in err


def test_the_wrote_line_is_the_path_verbatim_on_one_line(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A path longer than a terminal, with brackets rich would read as markup, comes back as is."""
    store = tmp_path / "run.db"
    ResultStore(store).begin({"models": [{"name": "gpt2-xl"}], "cluster": {"devices": 8}, "global_batch": 8},
                             SearchLabel(("gpt2-xl",), Objective("throughput"), 8, 8))
    csv = tmp_path / ("a-long-directory-name-" * 6) / "[bold]results[/bold] [1].csv"
    code, err = run(["results", str(store), "--csv", str(csv)], capsys)
    assert code == 0 and err == f"wrote {csv}\n" and csv.is_file()


def test_good_paths_are_created(tmp_path: Path, problem_file: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    dumped = tmp_path / "new" / "dir" / "dump.json"
    code, _ = run(["schedule", "--problem", str(problem_file), "--dump-problem", str(dumped)], capsys)
    assert code == 0 and ScheduleProblem.from_dict(json.loads(dumped.read_text())).ops[0].single_s == 2.0


def test_negative_exact_top(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run([*SEARCH, "--exact-top", "-1"], capsys)
    assert code == 2 and "--exact-top must be a whole number from 0 to 1,000, got -1" in one_line(err)


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_an_output_that_is_the_store_is_refused(tmp_path: Path, option: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "run.png"  # a name any output option would accept
    code, err = run([*SEARCH, "--store", str(store), option, str(store)], capsys)
    assert code == 2
    expected = f"archplace: error: {option} {store} is the result store (--store): choose another file"
    assert one_line(err) == expected
    assert not store.exists()


def test_an_unknown_strategy_is_refused_before_a_scheduler_is_reached(
        capsys: pytest.CaptureFixture[str]) -> None:
    # an unreachable scheduler would take 10 s to time out: the strategy is checked first
    code, err = run([*SEARCH, "--strategy", "nope", "--scheduler", "tcp://127.0.0.1:9"], capsys)
    assert code == 2 and "unknown strategy 'nope'" in one_line(err)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_an_output_interrupted_while_written_is_left_as_it_was(tmp_path: Path, failure: type) -> None:
    from archplace.base.errors import ConfigError
    from archplace.base.outputs import write_output

    path = tmp_path / "out.json"
    path.write_text("the previous results\n")

    def half(handle: Any) -> None:
        handle.write("half of the new")
        raise failure(28, "No space left on device")

    with pytest.raises(ConfigError if failure is OSError else failure):
        write_output(path, "--out", half)
    assert path.read_text() == "the previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no partial file left


def test_an_output_is_replaced_whole(tmp_path: Path) -> None:
    from archplace.base.outputs import write_text_output

    path = tmp_path / "out.csv"
    path.write_text("old, longer than the new text\n")
    write_text_output(path, "--csv", "new\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_results_on_a_bad_store_makes_no_output_directory(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "new" / "dir" / "rows.csv"
    code, err = run(["results", str(tmp_path / "missing.db"), "--csv", str(csv)], capsys)
    assert code == 2 and "result store not found" in one_line(err)
    assert not (tmp_path / "new").exists()
