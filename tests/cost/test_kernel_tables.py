"""Measured kernel tables as the cost of known chips (archplace.cost.kernel_tables, measured_gemm)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost import efficiency
from archplace.cost.kernel_tables import (
    BandwidthCurve,
    GemmSurface,
    chip_tables,
    dtype_class,
    kernel_time_s,
    resolve_table,
)
from archplace.cost.measured_gemm import K_SLICE, gemm_model_s
from archplace.cost.measured_tables import load_table, read_table
from archplace.cost.model import SystolicCostModel
from archplace.hw.accelerator import Accelerator, KernelEfficiency
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase


def _as_measured(name: str) -> Accelerator:
    """The preset without its sustained clock: its tables' times as measured (the sustained
    clock's scaling is tested in tests/cost/test_clock.py)."""
    acc = load_accelerator(name)
    assert acc.efficiency is not None
    return replace(acc, efficiency=replace(acc.efficiency, sustained_clock_hz=0.0))


A100 = _as_measured("a100-80gb")
H100 = _as_measured("h100-80gb")


def matmul(b: int, m: int, k: int, n: int) -> Operator:
    return Operator(id=0, name="mm", target="aten.bmm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                    batch=b, m=m, k=k, n=n, elements=b * m * n, flop=2.0 * b * m * k * n,
                    bytes_read=2.0 * b * (m * k + k * n), bytes_written=2.0 * b * m * n)


def vector(kind: OpKind, target: str, elements: int) -> Operator:
    size = 2.0 * elements
    return Operator(id=0, name="v", target=target, kind=kind, phase=Phase.FWD, batch=0, m=0, k=0, n=0,
                    elements=elements, flop=float(elements), bytes_read=size, bytes_written=size)


def write_gemm_table(path: Path, rows: list[tuple[int, int, int, int, float]],
                     timing: str = "kernel") -> Path:
    header = {"kernel": "gemm", "source_repo": "test/test", "source_path": "x", "source_commit": "0" * 40,
              "gpu": "test", "preset": "h100-80gb", "dtype": "bf16", "library": "test",
              "measured": "hand-written", "units": "seconds", "timing": timing, "made_by": "hand"}
    lines = [f"# {k}: {v}" for k, v in header.items()]
    lines.append("label,batch,m,n,k,calls,dtype,latency_s")
    lines += [f"-,{b},{m},{n},{k},1,bf16,{t!r}" for b, m, n, k, t in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dtype_classes() -> None:
    assert dtype_class("fp16") == dtype_class("bf16 (batch 1)") == "bf16"
    assert dtype_class("FP8") == "fp8"


def test_shipped_tables_are_exact_at_their_rows_up_to_the_monotone_correction() -> None:
    # H100 (OpenXLA sm_90, traced kernel times): every row whose time violates no order is exact
    table = load_table("gemm_h100_xla")
    floor = H100.efficiency.kernel_floor_s if H100.efficiency else 0.0
    kernel = kernel_time_s(table, floor)
    surface = GemmSurface.build((table,), "bf16", floor)
    s = table.sizes
    shapes = np.stack([s["batch"], s["m"], s["n"], s["k"]], axis=1)
    exact = 0
    for i in range(len(table)):
        lower, upper = surface.bounds_s(*(int(v) for v in shapes[i]))
        assert lower == upper
        below = np.all(shapes <= shapes[i], axis=1)
        above = np.all(shapes >= shapes[i], axis=1)
        if kernel[below].max() <= kernel[i] <= kernel[above].min():  # violates no order
            assert lower == pytest.approx(kernel[i], rel=1e-9)
            exact += 1
    assert exact >= 300  # of 375; the rest sit in an order violation (256x256x2048 slower than x4096)
    # and through the cost model on the preset
    est = SystolicCostModel().estimate(matmul(1, 4096, 4096, 4096), H100)
    row = int(np.flatnonzero(np.all(shapes == (1, 4096, 4096, 4096), axis=1))[0])
    assert est.all_cores_s == pytest.approx(float(kernel[row]), rel=1e-9)


def test_a100_rows_lose_the_host_overhead_of_their_method() -> None:
    # LLMCompass: wall-clock with a 29.6 us plateau; 8192x12288x12288 took 8.6216 ms
    est = SystolicCostModel().estimate(matmul(1, 8192, 12288, 12288), A100)
    assert est.all_cores_s == pytest.approx(8.6216e-3 - 2.96e-5, rel=1e-9)
    # the plateau row itself is at the floor
    assert SystolicCostModel().estimate(matmul(1, 8192, 64, 64), A100).all_cores_s == pytest.approx(5.232e-6)


def test_exact_and_monotone_on_a_hand_made_scattered_table(tmp_path: Path) -> None:
    rows = [(1, 256, 256, 256, 6e-6), (1, 1024, 256, 256, 8e-6), (1, 256, 1024, 1024, 20e-6),
            (1, 4096, 4096, 4096, 200e-6), (2, 1024, 1024, 1024, 60e-6)]
    table = read_table(write_gemm_table(tmp_path / "t.csv", rows))
    surface = GemmSurface.build((table,), "bf16", 0.0)
    for b, m, n, k, t in rows:
        assert surface.bounds_s(b, m, n, k) == (pytest.approx(t, rel=1e-12), pytest.approx(t, rel=1e-12))
    # inside the box the surface lies between the rows below and above
    lower, upper = surface.bounds_s(1, 2048, 2048, 2048)
    assert lower == upper and 20e-6 <= lower <= 200e-6


def test_an_order_violation_is_averaged_in_log_space(tmp_path: Path) -> None:
    # a larger k measured faster: both rows become the geometric mean of the envelopes
    rows = [(1, 256, 256, 2048, 8e-6), (1, 256, 256, 4096, 2e-6)]
    table = read_table(write_gemm_table(tmp_path / "t.csv", rows))
    surface = GemmSurface.build((table,), "bf16", 0.0)
    assert surface.bounds_s(1, 256, 256, 2048)[0] == pytest.approx(4e-6, rel=1e-12)
    assert surface.bounds_s(1, 256, 256, 4096)[0] == pytest.approx(4e-6, rel=1e-12)


SIZES = st.sampled_from([1, 3, 8, 64, 100, 256, 300, 1000, 2048, 4096, 6000, 12288, 40000])


@settings(max_examples=60, deadline=None)
@given(b=st.sampled_from([1, 2, 3, 8, 192]), m=SIZES, n=SIZES, k=SIZES,
       axis=st.integers(0, 3), factor=st.sampled_from([1.01, 1.5, 2.0, 7.0]),
       preset=st.sampled_from(["a100", "h100"]))
def test_gemm_latency_is_monotone_in_each_dimension(b: int, m: int, n: int, k: int, axis: int,
                                                    factor: float, preset: str) -> None:
    acc = A100 if preset == "a100" else H100
    model = SystolicCostModel(cache_size=0)
    shape = [b, m, k, n]
    bigger = list(shape)
    bigger[axis] = int(np.ceil(shape[axis] * factor))
    small = model.estimate(matmul(*shape), acc).all_cores_s
    large = model.estimate(matmul(*bigger), acc).all_cores_s
    assert small <= large * (1 + 1e-12), (shape, bigger)


def test_split_k_makes_a_small_output_with_long_k_cheap() -> None:
    assert H100.efficiency is not None
    eff = replace(H100.efficiency, kernel_tables=())
    chip = efficiency.ChipColumns.of([H100])
    op = matmul(1, 256, 65536, 256)  # 2 tiles of 256x128 on 132 SMs: s = min(66, 65536 / 256) = 66
    per_sm = H100.peak_flop_per_s * eff.gemm_sustained / 132
    compute = gemm_model_s(op, eff, chip, compute_only=True)[0]
    assert compute == pytest.approx(2.0 * 256 * 128 * (65536 / 66) / per_sm, rel=1e-12)
    assert K_SLICE == 256.0
    # without the split the two tiles would take 66 x longer
    no_split = 2.0 * 256 * 128 * 65536 / per_sm
    assert no_split / compute == pytest.approx(66.0)


def test_every_kernel_pays_the_floor() -> None:
    add = vector(OpKind.ELEMENTWISE, "aten.add.Tensor", 16)
    for acc in (A100, H100):
        assert SystolicCostModel().estimate(add, acc).all_cores_s == pytest.approx(5.232e-6)


def test_a100_streaming_kernels_follow_the_measured_curves() -> None:
    # softmax of 4096 x 4096 fp16 (LLMCompass): the two rows of that size (the row and the column
    # sweeps both hold it), each less the 13.1 us plateau, averaged in log space
    softmax_table = load_table("softmax_a100_llmcompass")
    size = softmax_table.sizes["rows"] * softmax_table.sizes["cols"]
    same = (size == 4096 * 4096) & (softmax_table.latency_s > 0)
    assert same.sum() == 2
    expected = float(np.exp(np.mean(np.log(softmax_table.latency_s[same] - 1.31130218506e-05))))
    softmax = vector(OpKind.SOFTMAX, "aten._softmax.default", 4096 * 4096)
    assert SystolicCostModel().estimate(softmax, A100).all_cores_s == pytest.approx(expected, rel=1e-9)
    # beyond the largest gelu row: at that row's achieved bandwidth
    assert A100.efficiency is not None
    curve = chip_tables(A100.efficiency.kernel_tables, A100.efficiency.kernel_floor_s).curves["gelu"]
    largest_bytes, largest_s = float(np.exp(curve.log_bytes[-1])), float(np.exp(curve.log_time[-1]))
    big = 1 << 31
    assert 4.0 * big > largest_bytes
    gelu = vector(OpKind.ELEMENTWISE, "aten.gelu.default", big)
    assert SystolicCostModel().estimate(gelu, A100).all_cores_s == pytest.approx(
        largest_s * 4.0 * big / largest_bytes, rel=1e-9)


def test_curve_is_monotone_in_bytes() -> None:
    tables = chip_tables(A100.efficiency.kernel_tables if A100.efficiency else (), 5.232e-6)
    for curve in tables.curves.values():
        assert isinstance(curve, BandwidthCurve)
        sizes = np.logspace(2, 11, 400)
        times = curve.time_s(sizes, np.maximum(sizes / 2e12, 5.232e-6))
        assert np.all(np.diff(times) >= -1e-18)


def test_fp8_without_an_fp8_table_halves_the_bf16_table() -> None:
    from archplace.cost.precision import cast_bytes, fp8_gemm_estimate

    assert H100.efficiency is not None
    # without the preset's FP8 table (measured on the same die) and with one sustained clock for
    # both (no FP8 clock): the FP8 GEMM is the bf16 table's time halved
    one_clock = replace(H100, efficiency=replace(H100.efficiency, sustained_clock_fp8_hz=0.0,
                                                 kernel_tables=("gemm_h100_xla",)))
    op = replace(matmul(1, 4096, 4096, 4096), target="aten.mm.default")
    bf16 = SystolicCostModel().estimate(op, one_clock).all_cores_s
    fp8 = fp8_gemm_estimate(op, one_clock)
    cast_s = cast_bytes(op) / (H100.hbm_bandwidth_bytes_per_s * H100.efficiency.hbm)
    assert fp8.all_cores_s - cast_s == pytest.approx(bf16 / 2.0, rel=1e-9)
    # the preset's FP8 table (FP8 runs 1.4-2.2x as fast as bf16 there, not 2x at every shape) at
    # its lower FP8 clock (1.647 against 1.88 GHz) makes it slower, never faster
    assert fp8_gemm_estimate(op, H100).all_cores_s > fp8.all_cores_s


def test_bad_kernel_tables() -> None:
    with pytest.raises(ConfigError, match="neither a shipped table"):
        resolve_table("no_such_table")
    with pytest.raises(ConfigError, match="kernel_tables"):
        KernelEfficiency(sms=1, gemm_tiles=((8, 8),), gemm_sustained=1.0, hbm=1.0, attention_fwd=1.0,
                         attention_bwd=1.0, kernel_tables="gemm_h100_xla")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="kernel_floor_s"):
        KernelEfficiency(sms=1, gemm_tiles=((8, 8),), gemm_sustained=1.0, hbm=1.0, attention_fwd=1.0,
                         attention_bwd=1.0, kernel_floor_s=-1.0)


def test_a_user_table_file_is_read_through_a_preset(tmp_path: Path) -> None:
    table = write_gemm_table(tmp_path / "mine.csv", [(1, 512, 512, 512, 9e-6), (1, 1024, 1024, 1024, 30e-6)])
    presets = Path(load_accelerator.__code__.co_filename).parent / "presets"
    text = (presets / "h100-80gb.yaml").read_text(encoding="utf-8")
    text = text.replace("value: [gemm_h100_xla, gemm_h200_profiled_fp8]", f"value: [{table}]")
    preset = tmp_path / "mine.yaml"
    preset.write_text(text, encoding="utf-8")
    acc = load_accelerator(str(preset))
    assert acc.efficiency is not None and acc.efficiency.kernel_tables == (str(table),)
    acc = replace(acc, efficiency=replace(acc.efficiency, sustained_clock_hz=0.0))  # as measured
    est = SystolicCostModel().estimate(matmul(1, 512, 512, 512), acc)
    assert est.all_cores_s == pytest.approx(9e-6, rel=1e-12)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(str(table), str(tmp_path / "missing.csv")), encoding="utf-8")
    with pytest.raises(ConfigError, match="missing.csv"):
        load_accelerator(str(bad))


def test_a_table_no_operator_is_costed_by_is_one_config_error(tmp_path: Path) -> None:
    # a profiled HBM copy table (archplace profile writes one) named as a chip's kernel table
    header = {"kernel": "copy", "source_repo": "local", "source_path": "-", "source_commit": "-",
              "gpu": "test", "preset": "a100-80gb", "dtype": "bf16", "library": "torch",
              "measured": "copy", "units": "s", "made_by": "test"}
    path = tmp_path / "copy_test.csv"
    path.write_text("".join(f"# {k}: {v}\n" for k, v in header.items())
                    + "label,bytes,dtype,latency_s\n-,1048576,bf16,1e-05\n-,2097152,bf16,2e-05\n")
    read_table(path)  # a valid table ...
    with pytest.raises(ConfigError, match="copy tables cost no operator"):
        chip_tables((str(path),), 0.0)  # ... that no operator uses


def test_a_sibling_s_fp8_table_never_streams_faster_than_this_chip_s_hbm() -> None:
    """The H100 prices FP8 GEMMs from the H200's table (the same GH100 die, 4.8 against 3.35 TB/s
    of HBM): a memory-bound shape takes at least its operands and result, one byte an element,
    at the H100's 3.35 TB/s, while the H200 keeps its own measurement, faster (the casts of the
    inputs, streamed at each chip's rate, are left out of both)."""
    from archplace.cost.precision import cast_bytes, fp8_gemm_estimate

    def gemm_s(op: Operator, acc: Accelerator) -> float:  # the FP8 GEMM without its input casts
        assert acc.efficiency is not None
        cast_s = cast_bytes(op) / (acc.hbm_bandwidth_bytes_per_s * acc.efficiency.hbm)
        return fp8_gemm_estimate(op, acc).all_cores_s - cast_s

    h100, h200 = load_accelerator("h100-80gb"), load_accelerator("h200-141gb")
    # the one shape of the table the H200 ran faster than the H100's HBM streams it (by 2 %)
    op = replace(matmul(1, 128, 16384, 16384), target="aten.mm.default")
    floor = (128 * 16384 + 16384 * 16384 + 128 * 16384) / h100.hbm_bandwidth_bytes_per_s
    assert gemm_s(op, h100) >= floor * (1 - 1e-12)
    assert gemm_s(op, h200) < floor
    # a compute-bound shape takes the table's time on both (the same die and clocks)
    big = replace(matmul(1, 8192, 8192, 8192), target="aten.mm.default")
    assert gemm_s(big, h100) == pytest.approx(gemm_s(big, h200), rel=1e-9)
