"""archplace's SCALE-Sim array timing against SCALE-Sim itself (the ``scalesim`` 2.0.2 package),
and the timing as a field of hardware presets, spaces, the cost model and the CLI.

Each case writes a SCALE-Sim config (array shape, dataflow, SRAMs far larger than
the operands, bandwidth-estimation mode so that no memory stall can occur) and a
one-GEMM topology in ``tmp_path``, runs the simulator through its Python API and
reads its ``COMPUTE_REPORT.csv``.  SCALE-Sim's "Total Cycles" is the 0-based index
of the last cycle of its demand matrices, so it is one less than the number of
cycles the GEMM occupies the array, which is what archplace returns; both that
number and the demand matrices' length are compared exactly.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from scalesim.scale_sim import scalesim

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.cost import gemm
from archplace.cost.configs import CoreConfigArray
from archplace.cost.systolic import SystolicCostModel
from archplace.hw import presets
from archplace.hw.accelerator import Accelerator, ArrayTiming
from archplace.hw.presets import load_accelerator
from archplace.hw.space import load_space
from archplace.workload.graph import Operator, OpKind, Phase

# Large enough that every operand of every case fits (kB; SCALE-Sim's word is 1 byte here).
_SRAM_KB = 65536


def _config_text(rows: int, cols: int, dataflow: str) -> str:
    return "\n".join([
        "[general]", "run_name = archplace_case", "",
        "[architecture_presets]",
        f"ArrayHeight: {rows}", f"ArrayWidth: {cols}",
        f"IfmapSramSzkB: {_SRAM_KB}", f"FilterSramSzkB: {_SRAM_KB}", f"OfmapSramSzkB: {_SRAM_KB}",
        "IfmapOffset: 0", "FilterOffset: 10000000", "OfmapOffset: 20000000",
        f"Dataflow: {dataflow}", "Bandwidth: 10", "",
        "[run_presets]", "InterfaceBandwidth: CALC", "",
    ])


def run_scalesim(tmp: Path, gemms: list[tuple[int, int, int]], rows: int, cols: int,
                 dataflow: str) -> list[tuple[int, int, int]]:
    """Run SCALE-Sim on ``gemms`` ([m, k] x [k, n] each, one topology layer each).

    Returns:
        per layer (reported Total Cycles, reported Stall Cycles, rows of the demand matrices).
    """
    config, topology = tmp / "array.cfg", tmp / "gemms.csv"
    config.write_text(_config_text(rows, cols, dataflow))
    # SCALE-Sim's GEMM topology columns are: name, M, N, K (each row ends with a comma).
    lines = ["Layer, M, N, K,"] + [f"g{i}, {m}, {n}, {k}," for i, (m, k, n) in enumerate(gemms)]
    topology.write_text("\n".join(lines) + "\n")
    sim = scalesim(save_disk_space=True, verbose=False, config=str(config), topology=str(topology),
                   input_type_gemm=True)
    sim.run_scale(top_path=str(tmp))
    with (tmp / "archplace_case" / "COMPUTE_REPORT.csv").open() as handle:
        report = list(csv.reader(handle, skipinitialspace=True))[1:]
    layers = sim.runner.single_layer_sim_object_list
    assert len(report) == len(layers) == len(gemms)
    out = []
    for row, layer in zip(report, layers, strict=True):
        demand_rows = layer.compute_system.get_ofmap_demand_mat().shape[0]
        out.append((int(row[1]), int(row[2]), demand_rows))
    return out


def archplace_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str) -> int:
    """archplace's SCALE-Sim timing of one GEMM on one array."""
    if dataflow == "is":
        return gemm.is_cycles_scalesim(m, k, n, rows, cols)
    return gemm.matmul_cycles(1, m, k, n, rows, cols, 1, dataflow == "os", ArrayTiming.SCALESIM)


def generated_cases(count: int, seed: int) -> list[tuple[int, int, int, int, int, str]]:
    """``count`` (m, k, n, rows, cols, dataflow) cases: arrays 4x4..32x32 (some rectangular),
    dimensions from 1 to a few times the array (most not multiples of it), WS and OS alternating."""
    rng = random.Random(seed)
    shapes = [(4, 4), (8, 8), (16, 16), (32, 32), (4, 8), (8, 4), (16, 8), (8, 32), (32, 16), (4, 16)]
    cases = []
    for i in range(count):
        rows, cols = shapes[i % len(shapes)]
        m = rng.randint(1, 3 * max(rows, cols) + 5)
        k = rng.randint(1, 3 * rows + 3)
        n = rng.randint(1, 3 * cols + 3)
        cases.append((m, k, n, rows, cols, "ws" if i % 2 == 0 else "os"))
    return cases


def check(tmp: Path, case: tuple[int, int, int, int, int, str]) -> None:
    m, k, n, rows, cols, dataflow = case
    ((total, stalls, demand_rows),) = run_scalesim(tmp, [(m, k, n)], rows, cols, dataflow)
    ours = archplace_cycles(m, k, n, rows, cols, dataflow)
    assert stalls == 0, case
    assert demand_rows == ours, case
    assert total == ours - 1, case


# Hand-picked: a multiple of the array, everything smaller than it, rectangular arrays (PHAZE's
# space varies rows and cols separately) in both dataflows.
FAST_CASES = [(64, 64, 64, 16, 16, "ws"), (10, 7, 13, 4, 4, "os"), (33, 20, 9, 8, 4, "ws"),
              (21, 13, 40, 4, 16, "os"), (50, 9, 5, 16, 2, "ws"), (7, 30, 3, 2, 8, "os")]


@pytest.mark.parametrize("case", FAST_CASES)
def test_scalesim_matches_fast(tmp_path: Path, case: tuple[int, int, int, int, int, str]) -> None:
    check(tmp_path, case)


@pytest.mark.slow
def test_scalesim_matches_40_generated_cases(tmp_path: Path) -> None:
    cases = generated_cases(40, seed=20200823)
    assert {c[5] for c in cases} == {"ws", "os"}
    assert any(c[3] != c[4] for c in cases)  # rectangular arrays
    assert any(c[0] % c[3] and c[1] % c[3] for c in cases)  # non-multiples of the array
    for i, case in enumerate(cases):
        where = tmp_path / str(i)
        where.mkdir()
        check(where, case)


def test_input_stationary_matches(tmp_path: Path) -> None:
    for i, (m, k, n, rows, cols) in enumerate([(9, 10, 11, 4, 4), (5, 40, 3, 4, 8), (20, 7, 30, 8, 4)]):
        where = tmp_path / str(i)
        where.mkdir()
        check(where, (m, k, n, rows, cols, "is"))


def test_batch_runs_folds_back_to_back(tmp_path: Path) -> None:
    # A batch of 3 GEMMs occupies the array for the sum of 3 one-GEMM runs (3 topology layers).
    layers = run_scalesim(tmp_path, [(12, 9, 7)] * 3, 8, 4, "ws")
    assert gemm.matmul_cycles(3, 12, 9, 7, 8, 4, 1, False, ArrayTiming.SCALESIM) == sum(
        total + 1 for total, _, _ in layers)


# ----------------------------------------------------------------- the timing as a design field

TPUV4 = Path(presets.__file__).parent / "presets" / "tpuv4.yaml"
TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
            "vocab_size": 1024}


def preset_file(tmp: Path, timing: Any, name: str = "hw.yaml") -> Path:
    """The tpuv4 preset with ``accelerator.array_timing: timing`` (left out when None)."""
    data = yaml.safe_load(TPUV4.read_text())
    if timing is not None:
        data["accelerator"]["array_timing"] = timing
    path = tmp / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_preset_field(tmp_path: Path) -> None:
    cited = {"value": "scalesim", "source": "SCALE-Sim 2.0.2 (Samajdar et al., ISPASS 2020)"}
    assert load_accelerator(preset_file(tmp_path, cited)).array_timing is ArrayTiming.SCALESIM
    assert load_accelerator(preset_file(tmp_path, "overlapped")).array_timing is ArrayTiming.OVERLAPPED
    assert load_accelerator(preset_file(tmp_path, None)).array_timing is ArrayTiming.OVERLAPPED
    assert load_accelerator("tpuv4").array_timing is ArrayTiming.OVERLAPPED
    with pytest.raises(ConfigError, match=r"accelerator\.array_timing: unknown array_timing 'fast'; "
                                          r"choose from: overlapped, scalesim"):
        load_accelerator(preset_file(tmp_path, "fast"))
    with pytest.raises(ConfigError, match=r"accelerator\.array_timing"):
        load_accelerator(preset_file(tmp_path, 3))


def test_accelerator_field_round_trip() -> None:
    acc = replace(load_accelerator("tpuv4"), array_timing="scalesim")  # type: ignore[arg-type]
    assert acc.array_timing is ArrayTiming.SCALESIM
    data = acc.to_dict()
    assert data["array_timing"] == "scalesim"
    assert Accelerator(**data) == acc
    with pytest.raises(ConfigError, match="unknown array_timing 'slow'"):
        replace(acc, array_timing="slow")


def space_file(tmp: Path, timing: Any) -> Path:
    path = tmp / "space.yaml"
    text = ("base: tpuv4\ntensor_cores: [2, 8]\narray_dim: [64, 128]\nvector_cores: [2]\n"
            "buffer: [32 MiB]\nhbm: [32 GiB]\narea_min_fraction: 0.0\n")
    if timing is not None:
        text += yaml.safe_dump({"array_timing": timing})
    path.write_text(text)
    return path


def test_space_field(tmp_path: Path) -> None:
    plain = load_space(space_file(tmp_path, None)).designs()
    assert {a.array_timing for a in plain} == {ArrayTiming.OVERLAPPED}
    one = load_space(space_file(tmp_path, "scalesim")).designs()
    assert [a.name for a in one] == [f"{a.name}-scalesim" for a in plain]
    assert {a.array_timing for a in one} == {ArrayTiming.SCALESIM}
    cited = load_space(space_file(tmp_path, {"value": "scalesim", "source": "ISPASS 2020"})).designs()
    assert cited == one
    space = load_space(space_file(tmp_path, ["overlapped", "scalesim"]))
    both = space.designs()
    assert space.size_before_area_rule == 2 * len(plain) == len(both)
    assert len({a.name for a in both}) == len(both)
    assert both[0::2] == plain and both[1::2] == one
    for bad, message in ((["scalesim", "scalesim"], "repeated"), (["fast"], r"array_timing\[0\]"),
                         ([], "non-empty list")):
        with pytest.raises(ConfigError, match=message):
            load_space(space_file(tmp_path, bad))


def test_cost_model_uses_the_timing() -> None:
    # Compute bound (no HBM limit): the latency is the cycle count over the clock.
    base = replace(load_accelerator("tpuv4"), hbm_bandwidth_bytes_per_s=math.inf)
    scalesim = replace(base, array_timing=ArrayTiming.SCALESIM)
    op = Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                  batch=1, m=2048, k=4096, n=4096, elements=2048 * 4096, flop=2.0 * 2048 * 4096 * 4096,
                  bytes_read=0.0, bytes_written=0.0)
    model = SystolicCostModel()
    for acc in (base, scalesim):
        est = model.estimate(op, acc)
        for cores, got in ((1, est.compute_single_s), (acc.tensor_cores, est.compute_all_s)):
            cycles = gemm.matmul_cycles(1, 2048, 4096, 4096, 128, 128, cores, False, acc.array_timing)
            assert got == cycles / acc.clock_hz
    # 1024 folds of 2048 rows on one 128x128 array: (2*128 + 128 + 2048 - 2) / 2048 per fold
    assert model.estimate(op, scalesim).compute_single_s == 1024 * 2430 / base.clock_hz
    many = model.estimate_many(op, CoreConfigArray.from_accelerators([base, scalesim]))
    assert list(many.all_cores_s) == [model.estimate(op, base).all_cores_s,
                                      model.estimate(op, scalesim).all_cores_s]


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_cli_matmul(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "matmul", "--m", "100", "--k", "40", "--n", "50", "--array", "16x8", "--json"]
    code, out, _ = cli([*argv, "--array-timing", "scalesim"], capsys)
    assert code == 0
    assert json.loads(out)["compute_cycles"] == 3 * 7 * (2 * 16 + 8 + 100 - 2)
    code, out, _ = cli([*argv, "--dataflow", "os", "--array-timing", "SCALESIM"], capsys)
    assert json.loads(out)["compute_cycles"] == 7 * 7 * (40 + 16 + 8 - 2)
    code, out, err = cli([*argv, "--array-timing", "fast"], capsys)
    assert code == 2 and out == ""
    assert err == ("archplace: error: matmul: unknown array_timing 'fast'; "
                   "choose from: overlapped, scalesim\n")


def test_cli_estimate_and_plan_with_a_scalesim_preset(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny-gpt" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_GPT))
    totals = {}
    for timing in ("overlapped", "scalesim"):
        hw = str(preset_file(tmp_path, timing, f"{timing}.yaml"))
        code, out, err = cli(["estimate", "--model", str(model), "--hardware", hw, "--json"], capsys)
        assert code == 0, err
        totals[timing] = json.loads(out)["total"]["fwd"]["single_core_s"]
        code, out, err = cli(["plan", "--model", str(model), "--hardware", hw, "--devices", "4",
                              "--global-batch", "8", "--tp", "1", "--micro-batch", "2",
                              "--recompute", "none", "--schedule", "1f1b", "--top", "1", "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["iteration_time_s"] > 0
    # Weight stationary under SCALE-Sim's count is never faster (test_gemm), and slower here.
    assert totals["scalesim"] > totals["overlapped"]
    code, _, err = cli(["estimate", "--model", str(model), "--hardware",
                        str(preset_file(tmp_path, "fast")), "--json"], capsys)
    assert code == 2 and err.count("\n") == 1 and "accelerator.array_timing" in err
