"""Numeric boundaries at the front door (archplace.base.limits): sizes beyond what NumPy, torch and the
solvers hold, quantities that are not finite, sizes that make the work explode, and answers that
would be silently wrong (an infinite makespan, MFU above 1, a Gantt chart written elsewhere)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base import limits
from archplace.base.errors import ConfigError, SolverError
from archplace.front import api
from archplace.scheduling.list_scheduler import list_schedule
from archplace.scheduling.problem import ScheduleProblem
from cli_helpers import run

BIG = "100000000000000000000000"  # 10**23: typer takes it, NumPy and torch overflow on it
TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128,
            "vocab_size": 256}


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``, assert exit 2 with exactly one stderr line ``archplace: error: ...`` and no
    traceback; return that line."""
    code, _, err = run(argv, capsys)
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("archplace: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY_GPT))
    return str(path)


def with_options(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with each (option, value) pair of ``extra`` replacing the option's value, or
    appended."""
    out = list(argv)
    for option, value in zip(extra[::2], extra[1::2], strict=True):
        if option in out:
            out[out.index(option) + 1] = value
        else:
            out += [option, value]
    return out


def cluster(model: str) -> list[str]:
    return ["--model", model, "--hardware", "tpuv4", "--devices", "8", "--global-batch", "8"]


def fixed_plan() -> list[str]:
    return ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1"]


# ------------------------------------------------------------------------ integers out of range

@pytest.mark.parametrize(("option", "name", "cap"), [
    ("--devices", "devices", "1,048,576"), ("--global-batch", "global_batch", "1,073,741,824"),
    ("--tp", "tp", "1,048,576"), ("--pp", "pp", "1,048,576"), ("--dp", "dp", "1,048,576"),
    ("--chunks", "chunks", "1,048,576"), ("--micro-batch", "micro_batch", "1,048,576"),
    ("--seq-len", "seq_len", "1,048,576"),
])
@pytest.mark.parametrize("value", [BIG, "-1", "0"])
def test_evaluate_sizes(option: str, name: str, cap: str, value: str, model: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(with_options(["evaluate", *cluster(model), *fixed_plan()], [option, value]), capsys)
    assert f"{option} must be a whole number from 1 to {cap}, got {value}" in line  # the option given


@pytest.mark.parametrize(("extra", "message"), [
    (["--devices", BIG], "--devices must be a whole number from 1 to 1,048,576, got 1000"),
    (["--devices", str(2**20 + 1)], "--devices must be a whole number from 1 to 1,048,576, got 1048577"),
    (["--global-batch", str(2**30 + 1)], "--global-batch must be a whole number from 1 to 1,073,741,824"),
    (["--micro-batch", BIG], "--micro-batch must be a whole number from 1 to 1,048,576"),
    (["--tp", BIG], "--tp must be a whole number from 1 to 1,048,576"),
    (["--top", BIG], "--top must be a whole number from 1 to 1,000"),
    (["--top", "1001"], "--top must be a whole number from 1 to 1,000, got 1001"),
    (["--seq-len", BIG], "--seq-len must be a whole number from 1 to 1,048,576"),
])
def test_plan_sizes(extra: list[str], message: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", model, "--hardware", "tpuv4", "--devices", "8", "--global-batch", "8"]
    assert message in refused(with_options(argv, extra), capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--devices", BIG], "--devices must be a whole number from 1 to 1,048,576"),
    (["--global-batch", BIG], "--global-batch must be a whole number from 1 to 1,073,741,824"),
    (["--micro-batch", BIG], "--micro-batch must be a whole number from 1 to 1,048,576"),
    (["--tp", BIG], "--tp must be a whole number from 1 to 1,048,576"),
    (["--seq-len", BIG], "--seq-len must be a whole number from 1 to 1,048,576"),
    (["--top", BIG], "--top must be a whole number from 1 to 1,000"),
    (["--exact-top", "1001"], "--exact-top must be a whole number from 0 to 1,000, got 1001"),
    (["--trials", BIG], "--trials must be a whole number from 1 to 1,000,000"),
    (["--seed", BIG], "--seed must be a whole number from 0 to 4,294,967,295"),
    (["--seed", str(2**32)], "--seed must be a whole number from 0 to 4,294,967,295, got 4294967296"),
    (["--seed", "-1"], "--seed must be a whole number from 0 to 4,294,967,295, got -1"),
    (["--jobs", BIG], "jobs must be a whole number from 1 to "),
    (["--jobs", "0"], "jobs must be a whole number from 1 to "),
    (["--area-budget", "1e400 mm2"], "area_budget: must be finite, got '1e400 mm2'"),
    (["--area-budget", "-5 mm2"], "area_budget: must be positive, got '-5 mm2'"),
    (["--power-budget", "nan W"], "power_budget: cannot parse 'nan W'"),
    (["--power-budget", "1e306 kW"], "power_budget: must be finite, got '1e306 kW'"),
])
def test_search_options(extra: list[str], message: str, model: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "--model", model, "--devices", "8", "--global-batch", "8", "--jobs", "1",
            "--baseline", "none"]
    assert message in refused(with_options(argv, extra), capsys)


def test_jobs_cap_follows_the_cpus(capsys: pytest.CaptureFixture[str], model: str) -> None:
    cap = limits.JOBS_PER_CPU * limits.usable_cpus()
    line = refused(["search", "--model", model, "--devices", "8", "--global-batch", "8",
                    "--jobs", str(cap + 1)], capsys)
    assert f"jobs must be a whole number from 1 to {cap:,} ({limits.JOBS_PER_CPU} per usable CPU" in line


@pytest.mark.parametrize(("extra", "message"), [
    (["--micro-batch", BIG], "--micro-batch must be a whole number from 1 to 1,048,576"),
    (["--tp", BIG], "--tp must be a whole number from 1 to 1,048,576"),
    (["--seq-len", BIG], "--seq-len must be a whole number from 1 to 1,048,576"),
    (["--micro-batch", str(2**20)], "a micro-batch of 1,048,576 samples x 128 tokens is 134,217,728 tokens"),
    (["--tp", "1", "--sp"], "--sp needs --tp > 1"),
])
def test_graph_sizes(extra: list[str], message: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in refused(["graph", "--model", model, *extra], capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--micro-batch", BIG], "--micro-batch must be a whole number from 1 to 1,048,576"),
    (["--tp", BIG], "--tp must be a whole number from 1 to 1,048,576"),
    (["--seq-len", BIG], "--seq-len must be a whole number from 1 to 1,048,576"),
])
def test_estimate_model_sizes(extra: list[str], message: str, model: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert message in refused(["estimate", "--model", model, "--hardware", "tpuv4", *extra], capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--m", BIG], "matmul: m must be a whole number from 1 to 2,147,483,647"),
    (["--k", str(2**31)], "matmul: k must be a whole number from 1 to 2,147,483,647, got 2147483648"),
    (["--n", "0"], "matmul: n must be a whole number from 1"),
    (["--batch", BIG], "matmul: batch must be a whole number from 1 to 2,147,483,647"),
    (["--cores", BIG], "matmul: cores must be a whole number from 1 to 1,048,576"),
    (["--array", "70000x8"], "--array: rows and cols must be at most 65,536, got '70000x8'"),
    (["--array", "1" * 5000 + "x8"], "--array: expected ROWSxCOLS"),
    (["--clock", "1e400 GHz"], "--clock: must be finite, got '1e400 GHz'"),
    (["--clock", "0 GHz"], "matmul: clock must be a finite number above 0"),
    (["--clock", "-1 GHz"], "matmul: clock must be a finite number above 0"),
    (["--buffer", "1e300 PB"], "--buffer: must be finite, got '1e300 PB'"),
    (["--hbm-bandwidth", "1e309 B/s"], "--hbm-bandwidth: must be finite"),
    (["--hbm-bandwidth", "-2 TB/s"], "matmul: hbm bandwidth must be positive"),
    (["--bytes-per-element", "3"], "matmul: bytes_per_element must be 1, 2, 4 or 8, got 3"),
])
def test_estimate_matmul_sizes(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "matmul", "--m", "4", "--k", "4", "--n", "4", "--array", "4x4"]
    assert message in refused(with_options(argv, extra), capsys)


@pytest.fixture()
def problem_file(tmp_path: Path) -> Path:
    """A three-op chain on two tensor cores, latencies 1 ms."""
    ops = [{"id": i, "core_type": "tensor", "single_s": 1e-3, "all_s": 1e-3, "preds": [i - 1] if i else []}
           for i in range(3)]
    path = tmp_path / "problem.json"
    path.write_text(json.dumps({"ops": ops, "tensor_cores": 2, "vector_cores": 1}))
    return path


@pytest.mark.parametrize(("extra", "message"), [
    (["--seed", BIG], "seed must be a whole number from 0 to 2,147,483,647"),
    (["--seed", str(2**31)], "seed must be a whole number from 0 to 2,147,483,647, got 2147483648"),
    (["--seed", "-1"], "seed must be a whole number from 0 to 2,147,483,647, got -1"),
    (["--workers", BIG], "workers must be a whole number from 0 to 256"),
    (["--workers", "100000"], "workers must be a whole number from 0 to 256, got 100000"),
    (["--time-limit", "1e300"], "time limit (s) must be a finite number above 0 and at most 86400"),
    (["--time-limit", "inf"], "time limit (s) must be a finite number above 0"),
    (["--time-limit", "nan"], "time limit (s) must be a finite number above 0"),
    (["--time-limit", "0"], "time limit (s) must be a finite number above 0"),
])
@pytest.mark.parametrize("backend", ["cpsat", "highs"])
def test_schedule_solver_options(extra: list[str], message: str, backend: str, problem_file: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["schedule", "--problem", str(problem_file), "--backend", backend, *extra], capsys)
    assert message in line


def test_schedule_layer_sizes(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["schedule", "--model", model, "--micro-batch", BIG, "--backend", "list"], capsys)
    assert "--micro-batch must be a whole number from 1 to 1,048,576" in line


# ------------------------------------------------------------------------ the limits module

def test_shown_keeps_huge_numbers_short() -> None:
    assert limits.shown(10**23) == "100000000000000000000000"
    assert limits.shown(10**40) == "1.000e+40"
    assert limits.shown(-(10**5000)) == "-a number of about 5,000 digits"
    assert limits.shown(True) == "True"


@given(st.one_of(st.integers(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3)))
def test_whole_accepts_exactly_the_range(value: object) -> None:
    inside = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100
    if inside:
        assert limits.whole("x", value, 1, 100) == value
    else:
        with pytest.raises(ConfigError, match=r"^x must be a whole number from 1 to 100, got "):
            limits.whole("x", value, 1, 100)


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans()))
def test_finite_accepts_exactly_the_range(value: float) -> None:
    ok = (isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
          and 0 < value <= 10.0)
    if ok:
        assert limits.finite("t", value, 0.0, 10.0, low_open=True) == float(value)
    else:
        with pytest.raises(ConfigError, match=r"^t must be a finite number above 0 and at most 10, got "):
            limits.finite("t", value, 0.0, 10.0, low_open=True)


def test_api_names_parameters_not_flags(model: str) -> None:
    with pytest.raises(ConfigError, match=r"^devices must be a whole number from 1 to 1,048,576, got True$"):
        api.evaluate(model, "tpuv4", devices=True, global_batch=8, tp=1, pp=1, dp=1,  # type: ignore[arg-type]
                     micro_batch=1)
    with pytest.raises(ConfigError,
                       match=r"^micro_batch must be a whole number from 1 to 1,048,576, got 2.0$"):
        api.graph(model, micro_batch=2.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="seed must be a whole number from 0 to 4,294,967,295"):
        api.search(model, devices=8, global_batch=8, seed=2**32)
    with pytest.raises(ConfigError, match="^sp needs tp > 1"):
        api.graph(model, tp=1, sp=True)


# ------------------------------------------------------------------------ sizes that explode

def test_a_chain_too_long_is_refused_before_tracing(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "deep" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({**TINY_GPT, "n_layer": 10_000}))
    for argv in (["plan", "--hardware", "tpuv4", "--devices", "8", "--global-batch", "8"],
                 ["search", "--devices", "8", "--global-batch", "8", "--jobs", "1"]):
        line = refused([*argv, "--model", str(config)], capsys)
        # the config reader's cap (1,000 layers) comes before the plan search's (2,048 layers)
        assert "field 'n_layer' is 10000; archplace accepts at most 1,000 layers" in line


def test_a_million_devices_give_a_bounded_plan(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["plan", "--model", model, "--hardware", "tpuv4", "--devices", str(2**20),
                          "--global-batch", str(2**20), "--tp", "1", "--micro-batch", "1", "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] <= 2**20 and 0 < json.loads(out)["mfu"] <= 1


# ------------------------------------------------------------------------ silent wrong answers

def test_an_overflowing_makespan_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = [{"id": i, "core_type": "tensor", "single_s": 1e308, "all_s": 1e308, "preds": [i - 1] if i else []}
           for i in range(3)]
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"ops": ops, "tensor_cores": 2, "vector_cores": 1}))
    for backend in ("list", "cpsat"):
        line = refused(["schedule", "--problem", str(path), "--backend", backend, "--json"], capsys)
        assert "the schedule's makespan overflows: 3 ops with latencies up to 1e+308 s" in line
    with pytest.raises(SolverError, match="makespan overflows"):
        list_schedule(ScheduleProblem.from_dict(json.loads(path.read_text())))


def test_a_large_but_finite_makespan_is_an_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = [{"id": i, "core_type": "tensor", "single_s": 1e300, "all_s": 1e300, "preds": [i - 1] if i else []}
           for i in range(3)]
    path = tmp_path / "large.json"
    path.write_text(json.dumps({"ops": ops, "tensor_cores": 2, "vector_cores": 1}))
    code, out, err = run(["schedule", "--problem", str(path), "--backend", "highs", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(3e300)


@pytest.mark.parametrize("name", ["chart", "chart.PNG", "chart.svg"])
def test_gantt_writes_exactly_the_path_given(name: str, problem_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out" / name
    code, _, err = run(["schedule", "--problem", str(problem_file), "--backend", "list",
                        "--gantt", str(target)], capsys)
    assert code == 0, err
    assert sorted(p.name for p in target.parent.iterdir()) == [name]
    head = target.read_bytes()[:8]
    assert head.startswith(b"<?xml") if name.endswith(".svg") else head == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["chart.foo", "chart.json", "chart.png.txt"])
def test_unknown_image_suffixes_are_refused_before_the_work(name: str, problem_file: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / name
    line = refused(["schedule", "--problem", str(problem_file), "--backend", "list", "--gantt", str(target),
                    "--json"], capsys)
    assert f"--gantt {target}: unknown image format" in line and "png" in line
    assert not target.exists()


@pytest.mark.parametrize("name", ["space", "space.foo"])
def test_plot_suffixes_are_refused_before_the_work(name: str, model: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / name
    line = refused(["search", "--model", model, "--devices", "8", "--global-batch", "8", "--jobs", "1",
                    "--plot", str(target)], capsys)
    assert f"--plot {target}: unknown image format" in line and not target.exists()


def test_a_one_by_one_array_keeps_mfu_below_one(model: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The 1x1-array chip of the issue: its vector cores outrun its arrays, and counting their
    FLOP against the arrays' peak gave MFU 100.9 % (evaluate) and 1401 % (estimate)."""
    hardware = tmp_path / "one.yaml"
    hardware.write_text(
        "accelerator:\n  name: one\n  tensor_cores: 8\n  array_rows: 1\n  array_cols: 1\n"
        "  vector_cores: 2\n  vector_lanes: 1024\n  buffer: 128 MiB\n  hbm: 32 GiB\n"
        "  hbm_bandwidth: 1.2 TB/s\n  clock: 1.05 GHz\n  bytes_per_element: 2\n  dataflow: ws\n"
        "cluster:\n  devices_per_node: 4\n  intra_node_bandwidth: 300 GB/s\n"
        "  inter_node_bandwidth: 300 GB/s\n  intra_node_latency: 1 us\n  inter_node_latency: 2 us\n"
        "  topology: torus3d\n")
    code, out, err = run(["evaluate", "--model", model, "--hardware", str(hardware), "--devices", "8",
                          "--global-batch", "8", *fixed_plan(), "--json"], capsys)
    assert code == 0, err
    assert 0.9 < json.loads(out)["mfu"] <= 1.0  # the arrays are the bottleneck, and busy
    code, out, err = run(["estimate", "--model", model, "--hardware", str(hardware), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    mfus = [layer[phase]["mfu"] for layer in data["layers"] for phase in ("fwd", "bwd")]
    assert all(0.0 <= mfu <= 1.0 for mfu in mfus) and max(mfus) > 0.9
    assert data["layers"][0]["name"] == "embedding" and data["layers"][0]["fwd"]["mfu"] == 0.0
