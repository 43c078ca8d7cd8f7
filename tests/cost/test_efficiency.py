"""Declared kernel efficiency of known chips (archplace.cost.efficiency, presets' `efficiency`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost import efficiency
from archplace.cost.attention import attention_flop, computed_area
from archplace.cost.collective import cluster_collective_time_s
from archplace.cost.configs import CoreConfigArray
from archplace.cost.model import SystolicCostModel
from archplace.cost.systolic import matmul_estimate
from archplace.hw.accelerator import Dataflow, KernelEfficiency
from archplace.hw.presets import efficiency_sources, load_accelerator, load_cluster
from archplace.hw.space import load_space
from archplace.workload.graph import Operator, OpKind, Phase

A100 = load_accelerator("a100-80gb")
H100 = load_accelerator("h100-80gb")
# The a100-80gb preset without its measured kernel tables and floor: the one-fraction-per-class
# model that presets without tables keep (the tables are tested in tests/cost/test_kernel_tables.py).
assert A100.efficiency is not None
# the preset with one fraction per kernel class: its measured GEMM, streaming and attention tables
# and kernel floor aside (tested in test_kernel_tables.py and test_attention_tables.py)
A100_FRACTIONS = replace(A100, efficiency=replace(A100.efficiency, kernel_tables=(), kernel_floor_s=0.0,
                                                   attention_kernel=None))
EFF = KernelEfficiency(sms=108, gemm_tiles=((256, 128), (128, 256)), gemm_sustained=0.859, hbm=0.9,
                       attention_fwd=0.73, attention_bwd=0.63)


def op(kind: OpKind, target: str, *, batch: int = 0, m: int = 0, k: int = 0, n: int = 0,
       elements: int = 0, flop: float = 0.0, phase: Phase = Phase.FWD, fused: int = 0) -> Operator:
    if kind is OpKind.MATMUL:
        flop = 2.0 * batch * m * k * n
        read, written = 2.0 * batch * (m * k + k * n), 2.0 * batch * m * n
    else:
        read, written = 4.0 * elements, 2.0 * elements
    return Operator(id=0, name="x", target=target, kind=kind, phase=phase, batch=batch, m=m, k=k, n=n,
                    elements=elements, flop=flop, bytes_read=read, bytes_written=written,
                    fused_elements=fused)


def test_tile_and_wave_quantization_by_hand() -> None:
    # 4096 x 4096 on 108 SMs: 16 x 32 = 512 tiles of 256x128 (no tile waste), 5 waves = 540 slots
    assert efficiency.tile_quantization(4096, 4096, 256, 128) == 1.0
    assert efficiency.wave_quantization(512, 108) == 512 / 540
    assert efficiency.gemm_efficiency(1, 4096, 4096, EFF) == pytest.approx(0.859 * 512 / 540, rel=1e-12)
    # M = 4097: 256x128 pads to 17 x 32 = 544 tiles (6 waves, 648 slots); 128x256 to 33 x 16 = 528
    # tiles (5 waves, 540 slots), which wastes less and is taken
    wide = (4097 / 4352) * (544 / 648)
    tall = (4097 / 4224) * (528 / 540)
    assert tall > wide
    assert efficiency.gemm_efficiency(1, 4097, 4096, EFF) == pytest.approx(0.859 * tall, rel=1e-12)
    # one core runs its tiles one after the other: tile quantization only
    assert efficiency.gemm_efficiency(1, 4097, 4096, EFF, waves=False) == pytest.approx(
        0.859 * 4097 / 4224, rel=1e-12)
    # a batch of GEMMs shares the waves: 2 x 512 tiles = 1024 in 10 waves of 108 (1080 slots)
    assert efficiency.gemm_efficiency(2, 4096, 4096, EFF) == pytest.approx(0.859 * 1024 / 1080, rel=1e-12)


def test_skinny_dimension_takes_a_smaller_tile() -> None:
    assert efficiency.clipped_side(256, 1) == 8
    assert efficiency.clipped_side(256, 9) == 16
    assert efficiency.clipped_side(256, 4097) == 256
    # m = 1: 8-row tiles, 4096/128 = 32 of them in one wave of 108
    assert efficiency.gemm_efficiency(1, 1, 4096, EFF) == pytest.approx(0.859 * (1 / 8) * (32 / 108))


@given(st.integers(1, 4), st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 20000),
       st.integers(1, 64))
def test_efficiency_in_unit_interval_and_time_monotonic(batch: int, m: int, n: int, k: int,
                                                        grow: int) -> None:
    fraction = efficiency.gemm_efficiency(batch, m, n, EFF)
    assert 0.0 < fraction <= EFF.gemm_sustained <= 1.0

    def seconds(b: int, mm: int, nn: int) -> float:
        return 2.0 * b * mm * k * nn / (A100.peak_flop_per_s * efficiency.gemm_efficiency(b, mm, nn, EFF))

    base = seconds(batch, m, n)
    # more rows, columns or batch never make a GEMM faster
    for bigger in (seconds(batch, m + grow, n), seconds(batch, m, n + grow), seconds(batch + 1, m, n)):
        assert bigger >= base * (1 - 1e-12)


@pytest.mark.parametrize(("acc", "shape", "published_tflop_per_s"), [
    (A100, (6912, 16384), 267.9),  # MAMF table, A100 SXM bf16, CUDA 12.1
    (H100, (6144, 17920), 792.1),  # MAMF table, H100 SXM bf16, CUDA 12.1
])
def test_presets_reproduce_the_cited_cublas_measurement(acc: object, shape: tuple[int, int],
                                                        published_tflop_per_s: float) -> None:
    assert isinstance(acc, type(A100)) and acc.efficiency is not None
    achieved = acc.peak_flop_per_s * efficiency.gemm_efficiency(1, *shape, acc.efficiency)
    assert achieved / 1e12 == pytest.approx(published_tflop_per_s, rel=1e-3)


def test_matmul_latency_is_max_of_declared_compute_and_memory() -> None:
    model = SystolicCostModel()
    for shape in ((1, 4096, 4096, 4096), (1, 1, 8192, 8192), (16, 2048, 128, 2048)):
        mm = op(OpKind.MATMUL, "aten.bmm.default", batch=shape[0], m=shape[1], k=shape[2], n=shape[3])
        est = model.estimate(mm, A100_FRACTIONS)
        cycle = matmul_estimate(*shape, rows=16, cols=16, cores=432, clock_hz=A100.clock_hz,
                                buffer_bytes=A100.buffer_bytes,
                                hbm_bandwidth_bytes_per_s=A100.hbm_bandwidth_bytes_per_s,
                                traced_bytes=mm.bytes_read + mm.bytes_written)
        assert A100.efficiency is not None
        compute = mm.flop / (A100.peak_flop_per_s
                             * efficiency.gemm_efficiency(shape[0], shape[1], shape[3], A100.efficiency))
        memory = cycle.hbm_bytes / (A100.hbm_bandwidth_bytes_per_s * 0.90)
        assert est.hbm_bytes == cycle.hbm_bytes and est.energy_j == cycle.energy_j
        assert est.all_cores_s == pytest.approx(max(compute, memory), rel=1e-12)
        assert 0 < mm.flop / est.all_cores_s / A100.peak_flop_per_s <= 0.859


def attention_estimate_traffic(attention: Operator) -> float:
    """Q, K, V, O (and gradients) and the log-sum-exp once, by hand (e = 2 bytes, LSE fp32)."""
    b, s, d = attention.batch, attention.m, attention.k
    if attention.phase is Phase.BWD:
        return 2.0 * b * (4 * s * d + 4 * s * d * 0.53125) + 2 * 4.0 * b * s * 0.53125
    return 2.0 * b * (2 * s * d + 2 * s * d * 0.53125) + 4.0 * b * s


def test_vector_op_and_attention_on_a100() -> None:
    model = SystolicCostModel()
    add = op(OpKind.ELEMENTWISE, "aten.add.Tensor", elements=1 << 24)
    est = model.estimate(add, A100_FRACTIONS)
    a100 = A100_FRACTIONS
    assert est.all_cores_s == pytest.approx(6.0 * (1 << 24) / (2.039e12 * 0.90), rel=1e-12)
    for phase, target, fraction in ((Phase.FWD, "archplace.attention", 0.73),
                                    (Phase.BWD, "archplace.attention_backward", 0.63)):
        # FlashAttention on b*a = 64 heads of s = 2048, d = 128, causal blocks skipped
        attention = Operator(id=0, name="attn", target=target, kind=OpKind.ATTENTION, phase=phase,
                             batch=64, m=2048, k=128, n=2048, elements=64 * 2048 * 128,
                             flop=0.0, bytes_read=0.0, bytes_written=0.0, causal=True,
                             skip_masked_blocks=True, dtype_bytes=2)
        est = model.estimate(attention, a100)
        # at the preset's sustained clock, 1.228 GHz, not the 1.41 GHz the fraction was measured at
        compute = attention_flop(attention) / (A100.peak_flop_per_s * fraction) * (1.41e9 / 1.228e9)
        traffic = attention_estimate_traffic(attention)
        # causal with 128-blocks: (16 * 17 / 2) / 256 = 0.53125 of the score blocks computed
        assert computed_area(2048, 2048, True, True)[0] / 2048**2 == 0.53125
        assert est.hbm_bytes == pytest.approx(traffic, rel=1e-12)
        assert est.all_cores_s == pytest.approx(
            max(compute, traffic / (A100.hbm_bandwidth_bytes_per_s * 0.90)), rel=1e-12)
        assert est.all_cores_s == pytest.approx(compute, rel=1e-12)  # compute-bound at s = 2048


def test_vectorised_path_equals_scalar_path() -> None:
    space_design = load_space("tiny").designs()[0]
    designs = [A100, H100, load_accelerator("tpuv4"), space_design, replace(A100, name="a", efficiency=None),
               replace(H100, dataflow=Dataflow.OS, name="h-os")]
    configs = CoreConfigArray.from_accelerators(designs)
    ops = [op(OpKind.MATMUL, "aten.mm.default", batch=1, m=4097, k=4096, n=11008),
           op(OpKind.MATMUL, "aten.bmm.default", batch=32, m=2048, k=128, n=2048),
           op(OpKind.MATMUL, "aten.addmm.default", batch=1, m=1024, k=1600, n=6400, fused=1024 * 6400),
           op(OpKind.MATMUL, "aten.mm.default", batch=1, m=1, k=4096, n=4096),
           op(OpKind.SOFTMAX, "aten._softmax.default", elements=26_214_400),
           op(OpKind.ELEMENTWISE, "aten.gelu.default", elements=3_000_001)]
    vectorised, scalar = SystolicCostModel(), SystolicCostModel(cache_size=0)
    for operator in ops:
        many = vectorised.estimate_many(operator, configs)
        for i, acc in enumerate(designs):
            est = scalar.estimate(operator, acc)
            assert (many.single_core_s[i], many.all_cores_s[i], many.memory_s[i], many.hbm_bytes[i],
                    many.energy_j[i]) == (est.single_core_s, est.all_cores_s, est.memory_s,
                                          est.hbm_bytes, est.energy_j), (operator.target, acc.name)
    attention = op(OpKind.ATTENTION, "aten._scaled_dot_product_flash_attention.default",
                   elements=1 << 20, flop=1e12, phase=Phase.BWD)
    declared = CoreConfigArray.from_accelerators([A100, H100])
    many = vectorised.estimate_many(attention, declared)
    assert np.array_equal(many.all_cores_s, [scalar.estimate(attention, a).all_cores_s for a in (A100, H100)])


def test_space_designs_keep_the_cycle_model(tmp_path: Path) -> None:
    space = tmp_path / "gpu-space.yaml"
    space.write_text("base: a100-80gb\ntensor_cores: [432]\narray_dim: [16]\nvector_cores: [108]\n"
                     "buffer: [40 MiB]\nhbm: [80 GiB]\narea_min_fraction: 0.0\n"
                     "area_max_mm2: 100000\n")
    designs = load_space(str(space)).designs()
    assert designs and all(d.efficiency is None for d in designs)
    assert all(d.efficiency is None for d in load_space("tiny").designs())
    mm = op(OpKind.MATMUL, "aten.mm.default", batch=1, m=4096, k=4096, n=4096)
    est = SystolicCostModel().estimate(mm, designs[0])
    cycle = matmul_estimate(1, 4096, 4096, 4096, rows=16, cols=16, cores=432, clock_hz=A100.clock_hz,
                            buffer_bytes=A100.buffer_bytes,
                            hbm_bandwidth_bytes_per_s=A100.hbm_bandwidth_bytes_per_s,
                            traced_bytes=mm.bytes_read + mm.bytes_written)
    assert est == cycle  # the cycle model, unchanged: about 99 % of the peak
    assert mm.flop / est.all_cores_s / A100.peak_flop_per_s > 0.95


def test_ring_all_reduce_on_a100_is_nccls_ring_simple() -> None:
    cluster = load_cluster("a100-80gb", 16)
    assert (cluster.intra_node_efficiency, cluster.inter_node_efficiency) == (0.767, 0.96)
    # 8 GPUs of one node, 1 GB, NCCL's ring Simple (archplace.cost.nccl): 12 channels of 20 GB/s
    # (12 NVLinks x 20 GB/s), algorithm bandwidth 240 x 8/14, latency 8.4 + 14 x 3.4 us
    expected = (8.4 + 14 * 3.4) * 1e-6 + 1e9 / (240e9 * 8 / 14)
    seconds = cluster_collective_time_s(cluster, "all_reduce", 1e9, 8, algorithm="ring")
    assert seconds == pytest.approx(expected, rel=1e-12)
    # 2 nodes: 8 channels of 24 GB/s (one per HDR NIC, PCIe Gen4 x16 24 GB/s), 2 of the 30
    # steps cross the network (14 us), the 28 others 3 x 1 us of network overhead or the NVLink
    # 3.4 us, whichever is larger; x 1.4 for the multi-node ring plateau
    latency = (8.4 + 28 * 3.4 + 2 * 14.0) * 1.4e-6
    across = cluster_collective_time_s(cluster, "all_reduce", 1e9, 16, algorithm="ring")
    assert across == pytest.approx(latency + 1e9 / (192e9 * 16 / 30), rel=1e-12)


@pytest.mark.parametrize("name", ["a100-80gb", "h100-80gb"])
def test_gpu_presets_cite_every_efficiency_figure(name: str) -> None:
    sources = efficiency_sources(name)
    assert set(sources) == {"sms", "gemm_tiles", "gemm_sustained", "hbm", "attention_fwd",
                            "attention_bwd", "intra_node_collective", "inter_node_collective"}
    for field, source in sources.items():
        assert len(source) > 20, field
    assert efficiency_sources("tpuv4") == {} and load_accelerator("tpuv4").efficiency is None


def _preset(tmp_path: Path, efficiency_text: str) -> Path:
    text = (Path(__file__).parents[2] / "src/archplace/hw/presets/a100-80gb.yaml").read_text()
    head = text[: text.index("\nefficiency:")]
    path = tmp_path / "gpu.yaml"
    path.write_text(head + "\nefficiency:\n" + efficiency_text)
    return path


GOOD = {"sms": "108", "gemm_tiles": "[256x128]", "gemm_sustained": "0.85", "hbm": "0.9",
        "attention_fwd": "0.7", "attention_bwd": "0.6", "intra_node_collective": "0.8",
        "inter_node_collective": "0.9"}


def _fields(**changes: str) -> str:
    values = {**GOOD, **changes}
    return "".join(f"  {k}: {{value: {v}, source: \"a source\"}}\n" for k, v in values.items())


@pytest.mark.parametrize(("text", "message"), [
    (_fields().replace(', source: "a source"', "", 1), "efficiency.sms: expected {value: ..., source"),
    (_fields(hbm="1.5"), "efficiency.hbm: expected a fraction in (0, 1], got 1.5"),
    (_fields(gemm_tiles="[256y128]"), "gemm_tiles[0]: expected a tile ROWSxCOLS"),
    (_fields(sms="0"), "efficiency.sms: must be positive"),
    (_fields() + "  extra: {value: 1, source: x}\n", "unknown field 'extra'"),
])
def test_bad_efficiency_section(tmp_path: Path, text: str, message: str) -> None:
    path = _preset(tmp_path, text)
    with pytest.raises(ConfigError, match=None) as err:
        load_accelerator(str(path))
    assert message in str(err.value) and "gpu.yaml" in str(err.value)


def test_accelerator_round_trips_through_its_dict() -> None:
    from archplace.hw.accelerator import Accelerator

    assert Accelerator(**A100.to_dict()) == A100
    assert Accelerator(**load_space("tiny").designs()[0].to_dict()).efficiency is None
