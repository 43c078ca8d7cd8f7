"""archplace profile on torch's CPU backend with the smoke grid (seconds): the tables it writes
load as measured tables, estimate matmul --kernel-table reads them back, the budget stops the
grid cleanly, and bad options are refused in one line before any work."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

import archplace
from archplace.base.errors import ConfigError
from archplace.cost.measured_tables import REQUIRED_KEYS, SIZE_COLUMNS, read_table
from archplace.profiling import ProfileResult, profile
from archplace.profiling.grid import KERNELS, grid
from archplace.profiling.tables import ATTENTION_COLUMNS, table_gemm
from archplace.schemas import load_schema
from cli_helpers import run

PROFILED_KEYS = ("device", "torch", "cuda", "date", "grid", "warmup", "repeats")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> ProfileResult:
    """One smoke run on the CPU, every kernel class (about a second)."""
    out = tmp_path_factory.mktemp("profile") / "tables"
    return profile(out, grid="smoke", device="cpu", preset="-")


def _data_rows(path: str) -> list[list[str]]:
    lines = [line for line in Path(path).read_text().splitlines() if not line.startswith("#")]
    return [line.split(",") for line in lines]


def test_every_class_is_written_with_a_row_per_grid_point(smoke: ProfileResult) -> None:
    the_grid = grid("smoke")
    assert [t.kernel for t in smoke.tables] == list(KERNELS)
    assert smoke.measured == smoke.planned == sum(the_grid.points(k) for k in KERNELS) == 20
    assert not smoke.stopped_early and smoke.skipped == ()
    for table in smoke.tables:
        assert table.rows == the_grid.points(table.kernel)
        assert Path(table.path).name == f"{table.kernel}_profiled.csv"
        assert table.best_rate > 0 and math.isfinite(table.best_rate)


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k in SIZE_COLUMNS])
def test_tables_load_as_measured_tables(smoke: ProfileResult, kernel: str) -> None:
    path = next(t.path for t in smoke.tables if t.kernel == kernel)
    table = read_table(path)
    assert table.kernel == kernel and len(table) == grid("smoke").points(kernel)
    for key in (*REQUIRED_KEYS, *PROFILED_KEYS):
        assert table.header[key], key
    assert table.header["source_repo"] == "local" and table.header["source_commit"] == "-"
    assert table.header["timing"] == "kernel"
    assert table.header["made_by"] == smoke.made_by
    assert table.header["torch"].startswith("2.") and table.header["grid"] == "smoke"
    assert (table.latency_s > 0).all() and set(table.dtypes) == {"bf16"}


def test_sizes_are_the_grid_points(smoke: ProfileResult) -> None:
    the_grid = grid("smoke")
    gemm = read_table(next(t.path for t in smoke.tables if t.kernel == "gemm"))
    got = set(zip(*(gemm.size(c).tolist() for c in ("m", "n", "k", "batch", "calls")), strict=True))
    assert got == {(p.m, p.n, p.k, 1, 1) for p in the_grid.gemm}
    copy = read_table(next(t.path for t in smoke.tables if t.kernel == "copy"))
    assert copy.size("bytes").tolist() == [4096, 16384]
    gelu = read_table(next(t.path for t in smoke.tables if t.kernel == "gelu"))
    assert gelu.size("elements").tolist() == [2048, 8192]  # bf16: 2 bytes an element
    softmax = read_table(next(t.path for t in smoke.tables if t.kernel == "softmax"))
    assert softmax.size("rows").tolist() == [8, 32] and softmax.size("cols").tolist() == [256, 256]


def test_attention_table(smoke: ProfileResult) -> None:
    path = next(t.path for t in smoke.tables if t.kernel == "attention")
    rows = _data_rows(path)
    assert tuple(rows[0]) == ATTENTION_COLUMNS
    # smoke: 128 tokens, width 32, head_dim 16 -> 2 heads; causal; forward and backward
    assert [r[1:7] for r in rows[1:]] == [
        ["4", "2", "32", "16", "1", "fwd"], ["4", "2", "32", "16", "1", "bwd"],
        ["2", "2", "64", "16", "1", "fwd"], ["2", "2", "64", "16", "1", "bwd"]]
    assert all(float(r[-1]) > 0 for r in rows[1:])
    text = Path(path).read_text()
    assert "# family: cpu-flash\n" in text and "# use: model\n" in text
    try:  # the attention-table reader, where this branch has it
        from archplace.cost.attention_tables import read_attention_table
    except ImportError:
        return
    assert len(read_attention_table(path)) == 4


def test_estimate_reads_a_profiled_row_exactly(smoke: ProfileResult,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = next(t.path for t in smoke.tables if t.kernel == "gemm")
    table = read_table(path)
    for row in (0, 5):
        m, n, k = (int(table.size(c)[row]) for c in ("m", "n", "k"))
        status, out, err = run(["estimate", "matmul", "--m", str(m), "--k", str(k), "--n", str(n),
                                "--hardware", "h100-80gb", "--kernel-table", path, "--json"], capsys)
        assert status == 0, err
        data = json.loads(out)
        assert Draft202012Validator(load_schema("estimate-matmul")).is_valid(data)
        looked_up = data["kernel_table"]
        assert looked_up["at_table_point"] is True and looked_up["table"] == "gemm_profiled"
        assert looked_up["latency_s"] == pytest.approx(float(table.latency_s[row]), rel=1e-12)
        flop_per_s = 2 * m * n * k / table.latency_s[row]
        assert looked_up["achieved_flop_per_s"] == pytest.approx(flop_per_s, rel=1e-12)


def test_estimate_text_puts_the_table_beside_the_model(smoke: ProfileResult,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = next(t.path for t in smoke.tables if t.kernel == "gemm")
    status, out, err = run(["estimate", "matmul", "--m", "24", "--k", "24", "--n", "24", "--array", "8x8",
                            "--kernel-table", path], capsys)
    assert status == 0, err
    assert "from kernel table gemm_profiled" in out and "model_over_table" in out
    assert "not a row of the table" in out


def test_table_gemm_on_a_shipped_table() -> None:
    # gemm_h100_xla's first row: 1 x 256 x 256 x 256 bf16 in 5.424e-06 s (OpenXLA sm_90 table)
    looked_up = table_gemm("gemm_h100_xla", 256, 256, 256)
    assert looked_up.at_table_point and looked_up.latency_s == pytest.approx(5.424e-06, rel=1e-12)
    assert not table_gemm("gemm_h100_xla", 300, 256, 256).at_table_point


def test_budget_stops_cleanly_and_keeps_the_rows(tmp_path: Path) -> None:
    ticks = iter(range(1000))  # a fake clock: one second per reading
    result = profile(tmp_path / "t", grid="smoke", device="cpu", max_seconds=3.5, kernels=("gemm", "copy"),
                     clock=lambda: float(next(ticks)))
    # read at start (0), then before each shape: 1, 2, 3 start a shape, 4 >= 3.5 stops the run
    assert result.stopped_early and result.measured == 3 and result.planned == 10
    assert [t.kernel for t in result.tables] == ["gemm"]
    assert len(read_table(tmp_path / "t" / "gemm_profiled.csv")) == 3
    assert not (tmp_path / "t" / "copy_profiled.csv").exists()
    assert "--max-seconds 3.5" in result.made_by
    snippet = yaml.safe_load((tmp_path / "t" / "kernel_tables.yaml").read_text())
    gemm = str((tmp_path / "t" / "gemm_profiled.csv").resolve())
    assert snippet["efficiency"]["kernel_tables"]["value"] == [gemm]
    assert snippet["efficiency"]["kernel_tables"]["source"].endswith(result.made_by)
    fastest = float(read_table(gemm).latency_s.min())
    assert snippet["efficiency"]["kernel_floor"]["value"] == f"{fastest * 1e6:.4g} us"


def test_the_snippet_names_what_a_preset_reads(smoke: ProfileResult) -> None:
    assert smoke.snippet is not None
    text = Path(smoke.snippet).read_text()
    named = yaml.safe_load(text)["efficiency"]["kernel_tables"]["value"]
    assert [Path(p).name for p in named] == ["gemm_profiled.csv", "softmax_profiled.csv",
                                             "layernorm_profiled.csv", "gelu_profiled.csv"]
    assert ("# Not named here (a preset does not read them): attention_profiled.csv, "
            "copy_profiled.csv.") in text


def test_budget_before_the_first_shape_is_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(["profile", "--out-dir", str(tmp_path / "t"), "--grid", "smoke", "--device", "cpu",
                          "--max-seconds", "1e-300", "--kernel", "gelu"], capsys)
    assert status == 2 and err.count("\n") == 1 and "budget ended before the first shape" in err
    assert not (tmp_path / "t").exists()


def test_cli_writes_tables_and_their_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "--out-dir", str(tmp_path / "t"), "--grid", "smoke", "--device", "cpu",
            "--dtype", "fp32", "--kernel", "gemm", "--kernel", "layernorm", "--tag", "mine"]
    status, out, err = run(argv, capsys)
    assert status == 0, err
    assert "gemm" in out and "layernorm" in out and "shapes timed" in out
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["gemm_mine.csv", "kernel_tables.yaml",
                                                                   "layernorm_mine.csv"]
    table = read_table(tmp_path / "t" / "layernorm_mine.csv")
    assert table.header["made_by"] == shlex.join(["archplace", *argv]) and set(table.dtypes) == {"fp32"}
    # fp32 elements are 4 bytes: 4 KiB / 4 / 256 columns = 4 rows
    assert table.size("rows").tolist() == [4, 16]


def test_fp8_times_gemms_in_fp8_and_the_rest_in_bf16(tmp_path: Path) -> None:
    result = profile(tmp_path, grid="smoke", device="cpu", dtype="fp8", kernels=("gemm", "gelu"))
    assert {read_table(t.path).kernel: set(read_table(t.path).dtypes) for t in result.tables} == {
        "gemm": {"fp8"}, "gelu": {"bf16"}}
    assert "_scaled_mm" in read_table(result.tables[0].path).header["library"]


@pytest.mark.parametrize(("argv", "says"), [
    (["--device", "gpu"], "--device 'gpu': expected cpu, cuda or cuda:N"),
    (["--device", "cuda:x"], "--device 'cuda:x'"),
    (["--dtype", "int8"], "--dtype 'int8': choose from bf16, fp16, fp32, fp8"),
    (["--grid", "huge"], "--grid 'huge': choose from full, quick, smoke"),
    (["--quick", "--grid", "smoke"], "--quick and --grid smoke ask for two grids"),
    (["--max-seconds", "0"], "--max-seconds 0.0 must be a positive number"),
    (["--max-seconds", "-5"], "--max-seconds -5.0 must be a positive number"),
    (["--max-seconds", "inf"], "--max-seconds inf must be a positive number"),
    (["--kernel", "conv"], "--kernel: 'conv'; choose from gemm, attention"),
    (["--tag", "../up"], "--tag '../up' must be a plain name"),
    (["--max-seconds", "soon"], "Invalid value for '--max-seconds'"),
])
def test_bad_options_are_one_line_and_change_nothing(argv: list[str], says: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["profile", "--out-dir", str(tmp_path / "t"), "--device", "cpu", *argv], capsys)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("archplace: error: ")
    assert says in err
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_that_is_a_file_is_refused_before_any_work(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    status, _, err = run(["profile", "-o", str(tmp_path / "f"), "--device", "cpu"], capsys)
    assert status == 2 and err.count("\n") == 1 and "--out-dir" in err and "is not a directory" in err
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "gemm_profiled.csv").mkdir()  # a directory where a table goes
    status, _, err = run(["profile", "-o", str(tmp_path / "d"), "--device", "cpu"], capsys)
    assert status == 2 and "gemm_profiled.csv: is a directory" in err
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["gemm_profiled.csv"]
    os.mkfifo(tmp_path / "d" / "copy_profiled.csv")  # never opened: refused from its status
    status, _, err = run(["profile", "-o", str(tmp_path / "d"), "--device", "cpu", "--kernel", "copy"],
                         capsys)
    assert status == 2 and "copy_profiled.csv: is a FIFO" in err


def test_cuda_without_cuda_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot happen here")
    status, _, err = run(["profile", "-o", str(tmp_path / "t"), "--quick"], capsys)
    assert status == 2 and err.count("\n") == 1 and "--device 'cuda'" in err and "--device cpu" in err
    assert not (tmp_path / "t").exists()


def test_kernel_table_errors_are_one_line(smoke: ProfileResult, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    softmax = next(t.path for t in smoke.tables if t.kernel == "softmax")
    base = ["estimate", "matmul", "--m", "16", "--k", "16", "--n", "16", "--array", "8x8", "--kernel-table"]
    for table, says in ((softmax, "holds softmax kernels, not gemm"),
                        (str(tmp_path / "missing.csv"), "neither a file"),
                        (str(tmp_path), "is not a regular file")):
        status, _, err = run([*base, table], capsys)
        assert status == 2 and err.count("\n") == 1 and says in err, err


def test_a_fifo_kernel_table_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "table.csv"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        table_gemm(fifo, 16, 16, 16)


def test_public_api_and_round_trip(smoke: ProfileResult) -> None:
    assert archplace.profile is profile
    assert archplace.ProfileResult.from_dict(json.loads(json.dumps(smoke.to_dict()))) == smoke
