"""``archplace schedule`` end to end: problem files, a (tiny) model layer, JSON and Gantt
output, and bad input -> one line on stderr, exit status 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from schedule_helpers import F, T, V, validate

from archplace.scheduling.problem import SchedOp, ScheduleProblem
from archplace.scheduling.timeline import Schedule, ScheduledOp
from cli_helpers import run

TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
            "vocab_size": 512, "bos_token_id": 0, "eos_token_id": 0}
PROBLEM = ScheduleProblem((
    SchedOp(0, T, 4e-6, 1e-6, name="mm"),
    SchedOp(1, V, 2e-6, 2e-6, (0,), name="gelu"),
    SchedOp(2, T, 4e-6, 1e-6, (1,)),
    SchedOp(3, F, 3e-6, 2e-6),
    SchedOp(4, V, 0.0, 0.0, (2, 3)),
), 4, 2)


def schedule_from_json(data: dict[str, Any]) -> Schedule:
    return Schedule(data["makespan_s"], tuple(
        ScheduledOp(o["id"], o["start_s"], o["end_s"], o["mode"], o["core"], o.get("vector_core"))
        for o in data["ops"]))


@pytest.fixture()
def problem_file(tmp_path: Path) -> Path:
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(PROBLEM.to_dict()))
    return path


def test_problem_round_trip_and_json_schema(problem_file: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    dumped = tmp_path / "out" / "dumped.json"
    code, out, err = run(["schedule", "--problem", str(problem_file), "--dump-problem", str(dumped),
                          "--json"], capsys)
    assert code == 0, err
    assert ScheduleProblem.from_dict(json.loads(dumped.read_text())) == PROBLEM
    data = json.loads(out)
    assert {"makespan_s", "lower_bound_s", "optimal", "ops"} <= data.keys()
    assert data["optimal"] is True and data["backend"] == "cpsat"
    assert [o["id"] for o in data["ops"]] == list(range(5))
    for o in data["ops"]:
        assert {"id", "start_s", "end_s", "mode", "core"} <= o.keys() and o["mode"] in ("single", "all")
    validate(PROBLEM, schedule_from_json(data))
    # the dumped file is read back by --problem: same answer with every backend but gurobi
    for backend in ("list", "highs"):
        code, out, _ = run(["schedule", "--problem", str(dumped), "--backend", backend, "--json"],
                           capsys)
        assert code == 0
        other = json.loads(out)
        validate(PROBLEM, schedule_from_json(other))
        assert other["makespan_s"] >= data["makespan_s"] - 1e-12


def test_table_and_gantt(problem_file: Path, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "charts" / "gantt.png"
    code, out, _ = run(["schedule", "--problem", str(problem_file), "--gantt", str(png),
                        "--time-limit", "5", "--seed", "3", "--workers", "1"], capsys)
    assert code == 0
    assert "makespan" in out and "lower bound" in out and "yes (proven)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-gpt") / "config.json"
    path.write_text(json.dumps(TINY_GPT))
    return path


def test_model_layer_is_solved_to_proven_optimality(tiny_model: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    dumped = tmp_path / "block-bwd.json"
    code, out, err = run(["schedule", "--model", str(tiny_model), "--hardware", "tpuv4",
                          "--layer", "block", "--phase", "bwd", "--tp", "2",
                          "--dump-problem", str(dumped), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    problem = ScheduleProblem.from_dict(json.loads(dumped.read_text()))
    assert len(problem.ops) > 20 and (problem.tensor_cores, problem.vector_cores) == (8, 2)
    assert data["optimal"] is True and data["gap"] < 1e-3
    validate(problem, schedule_from_json(data))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--problem", "{missing}"], "not found"),
        (["--problem", "{bad_json}"], "not valid JSON"),
        (["--problem", "{bad_problem}"], "ops[0]: missing field 'core_type'"),
        (["--problem", "{problem}", "--backend", "quantum"], "unknown schedule backend"),
        (["--problem", "{problem}", "--time-limit", "0"], "time limit"),
        (["--problem", "{problem}", "--model", "gpt2-xl"], "either --problem"),
        ([], "either --problem"),
        (["--model", "{model}", "--layer", "middle"], "unknown layer"),
        (["--model", "{model}", "--phase", "sideways"], "unknown phase"),
        (["--model", "{model}", "--tp", "3"], "TP width 3"),
        (["--model", "no-such-model"], "no-such-model"),
        (["--problem", "{problem}", "--backend", "gurobi"], "gurobi backend needs gurobipy"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str, problem_file: Path,
                                         tiny_model: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "gurobipy", None)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    bad_problem = tmp_path / "bad-problem.json"
    bad_problem.write_text(json.dumps({"tensor_cores": 1, "vector_cores": 1, "ops": [{"id": 0}]}))
    paths = {"missing": tmp_path / "missing.json", "bad_json": bad_json,
             "bad_problem": bad_problem, "problem": problem_file, "model": tiny_model}
    code, out, err = run(["schedule", *(a.format(**paths) for a in argv)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("archplace: error:"), err
    assert message in err


def test_python_api(tiny_model: Path) -> None:
    from archplace.base.errors import ConfigError
    from archplace.front.app import layer_problem, schedule_layer
    from archplace.scheduling.solve import get_scheduler, solve_problem

    listed = solve_problem(PROBLEM, "list")
    exact = solve_problem(PROBLEM)
    assert exact.backend == "cpsat" and exact.optimal
    assert listed.lower_bound_s <= exact.makespan_s <= listed.makespan_s
    assert listed.optimal == (listed.makespan_s <= listed.lower_bound_s)
    with pytest.raises(ConfigError, match="unknown schedule backend"):
        get_scheduler("nope")
    problem = layer_problem(str(tiny_model), "tpuv4", "block", "fwd", seq_len=64)
    result = schedule_layer(str(tiny_model), "tpuv4", "block", "fwd", seq_len=64, backend="list")
    validate(problem, result.schedule)
