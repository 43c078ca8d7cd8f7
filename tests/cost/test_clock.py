"""The sustained clock under the power limit (archplace.cost.clock, efficiency.sustained_clock)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost import clock
from archplace.cost.attention import attention_flop
from archplace.cost.measured_tables import REQUIRED_KEYS, load_table, read_table
from archplace.cost.model import SystolicCostModel
from archplace.hw.accelerator import Accelerator, KernelEfficiency
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase

A100 = load_accelerator("a100-80gb")
H100 = load_accelerator("h100-80gb")
PRESETS = Path(load_accelerator.__code__.co_filename).parent / "presets"


def at_clock(acc: Accelerator, hz: float) -> Accelerator:
    assert acc.efficiency is not None
    fp8_hz = acc.efficiency.sustained_clock_fp8_hz if hz else 0.0  # 0: no sustained clock at all
    return replace(acc, efficiency=replace(acc.efficiency, sustained_clock_hz=hz,
                                           sustained_clock_fp8_hz=fp8_hz))


def matmul(b: int, m: int, k: int, n: int) -> Operator:
    return Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                    batch=b, m=m, k=k, n=n, elements=b * m * n, flop=2.0 * b * m * k * n,
                    bytes_read=2.0 * b * (m * k + k * n), bytes_written=2.0 * b * m * n)


def attention(phase: Phase, s: int = 2048) -> Operator:
    target = "archplace.attention" if phase is Phase.FWD else "archplace.attention_backward"
    return Operator(id=0, name="attn", target=target, kind=OpKind.ATTENTION, phase=phase,
                    batch=64, m=s, k=128, n=s, elements=64 * s * 128, flop=0.0, bytes_read=0.0,
                    bytes_written=0.0, causal=True, skip_masked_blocks=True, dtype_bytes=2)


def streaming(kind: OpKind, target: str, elements: int) -> Operator:
    return Operator(id=0, name="v", target=target, kind=kind, phase=Phase.FWD, batch=0, m=0, k=0, n=0,
                    elements=elements,
                    flop=0.0, bytes_read=4.0 * elements, bytes_written=2.0 * elements)


def test_presets_declare_cited_sustained_clocks() -> None:
    assert A100.efficiency is not None and A100.efficiency.sustained_clock_hz == 1.228e9
    assert H100.efficiency is not None  # the GH100's throughput-equivalent clocks, measured on an H200
    assert (H100.efficiency.sustained_clock_hz, H100.efficiency.sustained_clock_fp8_hz) == (1.88e9, 1.647e9)
    h800 = load_accelerator("h800-80gb")
    assert h800.efficiency is not None
    assert (h800.efficiency.sustained_clock_hz, h800.efficiency.sustained_clock_fp8_hz) == (1.88e9, 1.647e9)
    b200 = load_accelerator("b200-192gb")  # no published sustained clock found: not declared
    assert b200.efficiency is not None and b200.efficiency.sustained_clock_hz == 0.0


def test_gemm_tables_state_their_clock() -> None:
    assert clock.table_clock_hz(load_table("gemm_a100_llmcompass")) == 1.41e9
    assert clock.table_clock_hz(load_table("gpt3_block_a100_llmcompass_gemm")) == 1.41e9
    assert clock.table_clock_hz(load_table("gemm_h100_xla")) == 1.98e9
    assert clock.table_clock_hz(load_table("gemm_h800_deepgemm")) == 1.98e9
    assert clock.table_clock_hz(load_table("softmax_a100_llmcompass")) == 0.0  # memory-bound: none


def test_a_table_gemm_by_hand() -> None:
    # LLMCompass 8192x12288x12288 took 8.6216 ms wall-clock, 29.6 us of it host overhead; measured
    # at 1.41 GHz, it runs at 1.228 GHz in training: x 1.41 / 1.228
    row_s = 8.6216e-3 - 2.96e-5
    gemm = matmul(1, 8192, 12288, 12288)
    model = SystolicCostModel(cache_size=0)
    assert model.estimate(gemm, at_clock(A100, 0.0)).all_cores_s == pytest.approx(row_s, rel=1e-9)
    assert model.estimate(gemm, A100).all_cores_s == pytest.approx(row_s * 1.41 / 1.228, rel=1e-9)


def test_attention_by_hand() -> None:
    # FlashAttention-2's fractions of H100's peak (0.339 forward), quoted at the preset's 1.83 GHz,
    # run at the sustained 1.88 GHz: x 1.83 / 1.88 is below 1, so not scaled (never faster)
    assert H100.efficiency is not None
    fractions = replace(H100, efficiency=replace(H100.efficiency, attention_kernel=None))
    op = attention(Phase.FWD)
    expected = attention_flop(op) / (H100.peak_flop_per_s * H100.efficiency.attention_fwd)
    est = SystolicCostModel(cache_size=0).estimate(op, fractions)
    assert est.all_cores_s == pytest.approx(expected, rel=1e-12)
    assert est.single_core_s == pytest.approx(expected * H100.tensor_cores, rel=1e-12)


def test_a_measured_attention_table_is_stretched_alike() -> None:
    # the preset's FlashAttention-2 table (flash2/h100-80gb) states no clock, so it is taken at the
    # preset's 1.83 GHz; at a sustained 1.575 GHz its time is x 1.83 / 1.575
    op = attention(Phase.FWD)
    model = SystolicCostModel(cache_size=0)
    table_s = model.estimate(op, at_clock(H100, 0.0)).all_cores_s
    slow = at_clock(H100, 1.575e9)
    assert model.estimate(op, slow).all_cores_s == pytest.approx(table_s * 1.83 / 1.575, rel=1e-12)


OPS = [matmul(1, 8192, 12288, 12288), matmul(1, 4097, 4096, 11008), matmul(32, 2048, 128, 2048),
       matmul(1, 1, 4096, 4096), matmul(1, 100_000, 100_000, 100_000), attention(Phase.FWD),
       attention(Phase.BWD, 512), streaming(OpKind.SOFTMAX, "aten._softmax.default", 26_214_400),
       streaming(OpKind.ELEMENTWISE, "aten.gelu.default", 3_000_001),
       streaming(OpKind.NORM, "aten.native_layer_norm.default", 1 << 24)]


@pytest.mark.parametrize("acc", [A100, H100], ids=["a100", "h100"])
def test_no_sustained_clock_changes_nothing(acc: Accelerator) -> None:
    # a preset without the field loads with 0 and costs every operator bit-for-bit as one whose
    # sustained clock equals its tables' clock
    text = (PRESETS / f"{acc.name}.yaml").read_text(encoding="utf-8")
    start = text.index("  sustained_clock:")
    end = text.index("  attention_fwd:", start)
    without = load_accelerator_text(text[:start] + text[end:], acc.name)
    assert without.efficiency is not None and without.efficiency.sustained_clock_hz == 0.0
    assert without == at_clock(acc, 0.0)
    table_clock = 1.41e9 if acc is A100 else 1.98e9
    model = SystolicCostModel(cache_size=0)
    for op in OPS:
        if op.kind is OpKind.MATMUL:
            assert model.estimate(op, without) == model.estimate(op, at_clock(acc, table_clock))


def load_accelerator_text(text: str, name: str) -> Accelerator:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        return load_accelerator(str(path))


@pytest.mark.parametrize("acc", [A100, H100], ids=["a100", "h100"])
def test_memory_bound_operators_are_not_scaled(acc: Accelerator) -> None:
    model = SystolicCostModel(cache_size=0)
    for op in OPS:
        slow, fast = model.estimate(op, acc), model.estimate(op, at_clock(acc, 0.0))
        assert slow.memory_s == fast.memory_s and slow.hbm_bytes == fast.hbm_bytes
        if op.kind not in (OpKind.MATMUL, OpKind.ATTENTION):
            assert slow == fast


@settings(max_examples=40, deadline=None)
@given(chip=st.sampled_from([A100, H100]),
       b=st.integers(1, 64), m=st.integers(1, 1 << 16), k=st.integers(1, 1 << 15), n=st.integers(1, 1 << 16),
       s=st.sampled_from([128, 1024, 4096]), phase=st.sampled_from([Phase.FWD, Phase.BWD]),
       low=st.floats(0.6e9, 2.0e9), gap=st.floats(0.0, 0.8e9))
def test_a_lower_sustained_clock_never_makes_an_operator_faster(
        chip: Accelerator, b: int, m: int, k: int, n: int, s: int, phase: Phase, low: float,
        gap: float) -> None:
    model = SystolicCostModel(cache_size=0)
    for op in (matmul(b, m, k, n), attention(phase, s)):
        slow, fast = model.estimate(op, at_clock(chip, low)), model.estimate(op, at_clock(chip, low + gap))
        assert slow.all_cores_s >= fast.all_cores_s and slow.single_core_s >= fast.single_core_s


def test_bad_clocks_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sustained_clock_hz"):
        KernelEfficiency(sms=108, gemm_tiles=((256, 128),), gemm_sustained=0.86, hbm=0.9,
                         attention_fwd=0.73, attention_bwd=0.63, sustained_clock_hz=-1.0)
    text = (PRESETS / "a100-80gb.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("value: 1.228 GHz", "value: 1.228 GB"), encoding="utf-8")
    with pytest.raises(ConfigError, match="sustained_clock"):
        load_accelerator(str(bad))
    table = tmp_path / "t.csv"
    source = (Path(clock.__file__).parent / "measured" / "gemm_h100_xla.csv").read_text(encoding="utf-8")
    table.write_text(source.replace("# clock: 1.98 GHz", "# clock: fast GHz"), encoding="utf-8")
    with pytest.raises(ConfigError, match="clock"):
        clock.table_clock_hz(read_table(table))


def test_a_table_without_clock_is_taken_at_the_preset_clock(tmp_path: Path) -> None:
    # one compute-bound row (2 x 8192^3 FLOP in 1.2 ms, 916 TFLOP/s, faster than the tile/wave
    # model's MAMF rate, so all compute): no clock header, so measured at h100-80gb's 1.83 GHz and
    # stretched to a sustained 1.575 GHz in full
    table = tmp_path / "mine.csv"
    header = {key: "x" for key in REQUIRED_KEYS} | {"kernel": "gemm", "timing": "kernel"}
    table.write_text("".join(f"# {key}: {value}\n" for key, value in header.items())
                     + "label,batch,m,n,k,calls,dtype,latency_s\n-,1,8192,8192,8192,1,bf16,1.2e-3\n",
                     encoding="utf-8")
    text = (PRESETS / "h100-80gb.yaml").read_text(encoding="utf-8")
    preset = tmp_path / "mine.yaml"
    shipped = "value: [gemm_h100_xla, gemm_h200_profiled_fp8]"
    preset.write_text(text.replace(shipped, f"value: [{table}]"), encoding="utf-8")
    acc = at_clock(load_accelerator(str(preset)), 1.575e9)
    est = SystolicCostModel(cache_size=0).estimate(matmul(1, 8192, 8192, 8192), acc)
    assert est.all_cores_s == pytest.approx(1.2e-3 * 1.83 / 1.575, rel=1e-12)
    assert SystolicCostModel(cache_size=0).estimate(
        matmul(1, 8192, 8192, 8192), at_clock(acc, 0.0)).all_cores_s == pytest.approx(1.2e-3, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(chip=st.sampled_from([A100, H100]), b=st.integers(1, 16), m=st.integers(1, 1 << 15),
       n=st.integers(1, 1 << 15), k=st.integers(1, 1 << 15), axis=st.integers(0, 3),
       grow=st.integers(1, 1 << 14))
def test_sustained_gemm_time_is_monotone_in_each_dimension(
        chip: Accelerator, b: int, m: int, n: int, k: int, axis: int, grow: int) -> None:
    sizes = [b, m, k, n]
    larger = list(sizes)
    larger[axis] += grow
    model = SystolicCostModel(cache_size=0)
    bigger, smaller = model.estimate(matmul(*larger), chip), model.estimate(matmul(*sizes), chip)
    assert bigger.all_cores_s >= smaller.all_cores_s


H200 = load_accelerator("h200-141gb")


def test_h200_declares_its_measured_clocks_and_tables() -> None:
    eff = H200.efficiency
    assert eff is not None
    assert (eff.sustained_clock_hz, eff.sustained_clock_fp8_hz) == (1.88e9, 1.647e9)
    assert eff.attention_kernel == "flash2/h200-141gb" and eff.kernel_floor_s == pytest.approx(5.056e-6)
    assert clock.table_clock_hz(load_table("gemm_h200_profiled")) == 1.98e9
    assert clock.table_clock_hz(load_table("gemm_h200_profiled_fp8")) == 1.98e9


def test_fp8_gemm_tables_scale_by_the_fp8_clock() -> None:
    eff = H200.efficiency
    assert eff is not None
    assert clock.gemm_table_scale(eff, "bf16", H200.clock_hz) == pytest.approx(1.98 / 1.88, rel=1e-12)
    assert clock.gemm_table_scale(eff, "fp8", H200.clock_hz) == pytest.approx(1.98 / 1.647, rel=1e-12)
    # without an FP8 clock, FP8 tables take the 16-bit one
    one = replace(eff, sustained_clock_fp8_hz=0.0)
    assert clock.gemm_table_scale(one, "fp8", H200.clock_hz) == pytest.approx(1.98 / 1.88, rel=1e-12)


def test_an_fp8_clock_alone_scales_fp8_gemms_only() -> None:
    eff = H200.efficiency
    assert eff is not None
    alone = replace(eff, sustained_clock_hz=0.0)
    assert clock.gemm_table_scale(alone, "bf16", H200.clock_hz) == 1.0
    assert clock.gemm_table_scale(alone, "fp8", H200.clock_hz) == pytest.approx(1.98 / 1.647)


def test_a_profiled_attention_table_scales_from_its_own_clock_header() -> None:
    # flash2/h200-141gb states the 1.98 GHz it was measured at: x 1.98 / 1.88, not the preset's
    # 1.83 GHz over 1.88 (which would make it faster than measured)
    op = attention(Phase.FWD)
    model = SystolicCostModel(cache_size=0)
    table_s = model.estimate(op, at_clock(H200, 0.0)).all_cores_s
    assert model.estimate(op, H200).all_cores_s == pytest.approx(table_s * 1.98 / 1.88, rel=1e-12)
    # a sustained clock above the measuring clock never makes attention faster than its table
    fast = at_clock(H200, 1.99e9)
    assert model.estimate(op, fast).all_cores_s == pytest.approx(table_s, rel=1e-12)


def test_an_fp8_gemm_priced_from_a_16_bit_table_runs_at_the_fp8_clock() -> None:
    # H100's FP8 GEMMs come from its bf16 table at the FP8 speed-up; the power limit they meet
    # is the FP8 kernels': f_m the bf16 table's 1.98 GHz, f_s the FP8 clock
    eff = H200.efficiency
    assert eff is not None
    assert clock.gemm_table_scale(eff, "bf16", H200.clock_hz, fp8=True) == pytest.approx(1.98 / 1.647)
    assert clock.gemm_table_scale(eff, "fp8", H200.clock_hz, fp8=False) == pytest.approx(1.98 / 1.88)
