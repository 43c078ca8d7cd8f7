"""FP8 training's GEMM cost (cost/precision.py): exact small cases on the cycle model and on a
chip with declared efficiency, which operators run in FP8, and chips without FP8."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cost import efficiency
from archplace.cost.precision import (
    CAST_BYTES_PER_ELEMENT,
    Fp8CostModel,
    Precision,
    cast_bytes,
    check_precision,
    fp8_gemm_estimate,
    fp8_weight_params,
    is_fp8_gemm,
)
from archplace.cost.systolic import SystolicCostModel
from archplace.hw import presets
from archplace.hw.accelerator import Accelerator
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase

# power-of-two clock, unbounded buffer: every count below is exact in binary floating point
CHIP = Accelerator(name="fp8-chip", tensor_cores=4, array_rows=16, array_cols=16, vector_cores=2,
                   vector_lanes=64, buffer_bytes=math.inf, hbm_bytes=2**34,
                   hbm_bandwidth_bytes_per_s=math.inf, clock_hz=2.0**30, fp8_speedup=2)


def gemm(m: int, k: int, n: int, target: str = "aten.mm.default", batch: int = 1) -> Operator:
    return Operator(id=0, name="g", target=target, kind=OpKind.MATMUL, phase=Phase.FWD, batch=batch,
                    m=m, k=k, n=n, elements=batch * m * n, flop=2.0 * batch * m * k * n,
                    bytes_read=2.0 * batch * (m * k + k * n), bytes_written=2.0 * batch * m * n)


def test_a_compute_bound_gemm_at_fp8_takes_half_its_bf16_time_on_the_cycle_model() -> None:
    op = gemm(512, 256, 384)
    bf16 = SystolicCostModel().estimate(op, CHIP)
    fp8 = Fp8CostModel(SystolicCostModel()).estimate(op, CHIP)
    assert bf16.all_cores_s > 0 and bf16.memory_s == 0.0  # unbounded bandwidth: compute-bound
    assert fp8.all_cores_s == bf16.all_cores_s / 2
    assert fp8.single_core_s == bf16.single_core_s / 2


def test_fp8_traffic_and_cast_time_by_hand() -> None:
    bandwidth = 2.0**40
    chip = replace(CHIP, hbm_bandwidth_bytes_per_s=bandwidth)
    m, k, n = 64, 32, 48
    op = gemm(m, k, n)
    fp8 = fp8_gemm_estimate(op, chip)
    bf16 = SystolicCostModel().estimate(op, chip)
    cast = CAST_BYTES_PER_ELEMENT * (m * k + k * n)
    assert cast_bytes(op) == cast == 3 * (64 * 32 + 32 * 48)
    # operands at 1 byte, the output at 2, everything fits: the compulsory traffic, then the casts
    assert fp8.hbm_bytes == (m * k + k * n) + 2 * m * n + cast
    assert bf16.hbm_bytes == 2 * (m * k + k * n + m * n)
    gemm_memory_s = ((m * k + k * n) + 2 * m * n) / bandwidth
    cast_s = cast / bandwidth
    assert fp8.memory_s == gemm_memory_s + cast_s
    assert fp8.all_cores_s == max(fp8.compute_all_s, gemm_memory_s) + cast_s


def test_only_the_linear_layers_gemms_run_in_fp8() -> None:
    model = Fp8CostModel(SystolicCostModel())
    scores = gemm(128, 64, 128, target="aten.bmm.default", batch=4)  # attention's score GEMM
    assert not is_fp8_gemm(scores)
    assert model.estimate(scores, CHIP) == SystolicCostModel().estimate(scores, CHIP)
    assert is_fp8_gemm(gemm(8, 8, 8, target="aten.addmm.default"))
    assert fp8_weight_params([gemm(256, 256, 768), gemm(256, 64, 256, target="aten.bmm.default", batch=8),
                              gemm(256, 768, 256, target="aten.addmm.default")]) == 2 * 256 * 768


def test_declared_efficiency_runs_fp8_gemms_at_twice_the_peak() -> None:
    # the one-fraction model (the preset without its measured tables; FP8 on the tables is in
    # tests/cost/test_kernel_tables.py)
    preset = load_accelerator("h100-80gb")
    assert preset.efficiency is not None
    h100 = replace(preset, efficiency=replace(preset.efficiency, kernel_tables=(), kernel_floor_s=0.0))
    assert h100.fp8_speedup == 2.0 and h100.efficiency is not None
    op = gemm(8192, 8192, 8192)  # compute-bound on H100 at either precision
    bf16 = SystolicCostModel().estimate(op, h100)
    fp8 = fp8_gemm_estimate(op, h100)
    flop = 2.0 * 8192**3
    sustained = efficiency.gemm_efficiency(1, 8192, 8192, h100.efficiency)
    assert bf16.compute_all_s == flop / (h100.peak_flop_per_s * sustained)
    assert fp8.compute_all_s == flop / (h100.peak_flop_per_s * 2.0 * sustained)
    cast_s = cast_bytes(op) / (h100.hbm_bandwidth_bytes_per_s * h100.efficiency.hbm)
    assert fp8.all_cores_s == fp8.compute_all_s + cast_s
    assert fp8.all_cores_s < bf16.all_cores_s


def test_a_chip_without_fp8_is_refused_by_name() -> None:
    a100 = load_accelerator("a100-80gb")
    assert a100.fp8_speedup is None
    check_precision(a100, Precision.BF16)
    with pytest.raises(ConfigError, match="^a100-80gb has no FP8 tensor cores"):
        check_precision(a100, Precision.FP8)
    with pytest.raises(ConfigError, match="no FP8 tensor cores"):
        Fp8CostModel(SystolicCostModel()).estimate(gemm(8, 8, 8), a100)


@pytest.mark.parametrize("value, message", [("0.5", "must be >= 1"), ("fast", "expected a bare number"),
                                            ("-2", "must be positive")])
def test_a_bad_fp8_speedup_in_a_preset_file_is_one_line(value: str, message: str, tmp_path: Path) -> None:
    text = (Path(presets.__file__).parent / "presets" / "h100-80gb.yaml").read_text()
    path = tmp_path / "chip.yaml"
    path.write_text(text.replace("  fp8_speedup:\n    value: 2\n", f"  fp8_speedup:\n    value: {value}\n"))
    with pytest.raises(ConfigError, match=message) as exc:
        load_accelerator(path)
    assert "accelerator.fp8_speedup" in str(exc.value) and "\n" not in str(exc.value)


def test_fp8_speedup_is_checked_on_the_accelerator() -> None:
    with pytest.raises(ConfigError, match="fp8_speedup must be a number >= 1"):
        replace(CHIP, fp8_speedup=0.5)
    assert replace(CHIP, fp8_speedup=None).fp8_speedup is None
