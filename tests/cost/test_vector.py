"""Vector-op cycle counts (archplace.cost.vector) and vector latency (cost.model)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.cost.model import OpLatency, SystolicCostModel
from archplace.cost.vector import (
    TRANSCENDENTAL_CYCLES_PER_ELEMENT,
    aten_op_name,
    cycles_per_element,
    is_transcendental,
    vector_cycles,
    vector_hbm_bytes,
)
from archplace.hw.accelerator import Accelerator
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase


def passes_by_loop(elements: int, width: int) -> int:
    passes = 0
    while elements > 0:
        elements -= width
        passes += 1
    return passes


@given(elements=st.integers(0, 10**6), lanes=st.integers(1, 512), cores=st.integers(1, 64),
       cpe=st.integers(0, 10))
def test_vector_cycles_is_passes_times_cycles(elements: int, lanes: int, cores: int,
                                              cpe: int) -> None:
    assert vector_cycles(elements, lanes, cores, cpe) == passes_by_loop(elements,
                                                                        lanes * cores) * cpe


def test_vector_cycles_hand_counts() -> None:
    assert vector_cycles(1000, 128, 1, 1) == 8
    assert vector_cycles(1000, 128, 2, 1) == 4
    assert vector_cycles(1024, 128, 8, 8) == 8
    assert vector_cycles(1025, 128, 8, 8) == 16
    assert vector_cycles(0, 128, 8, 8) == 0


def test_vector_cycles_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        vector_cycles(10, 0, 1, 1)
    with pytest.raises(ValueError):
        vector_cycles(10, 8, 0, 1)
    with pytest.raises(ValueError):
        vector_cycles(10, 8, 1, -1)


@pytest.mark.parametrize(
    ("kind", "target", "expected"),
    [
        (OpKind.ELEMENTWISE, "aten.add.Tensor", 1),
        (OpKind.ELEMENTWISE, "aten.mul.Tensor", 1),
        (OpKind.ELEMENTWISE, "aten.expand.default", 1),
        (OpKind.ELEMENTWISE, "aten.gelu.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.ELEMENTWISE, "aten.gelu_backward.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.ELEMENTWISE, "aten.tanh.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.ELEMENTWISE, "aten.exp.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.ELEMENTWISE, "aten.rsqrt.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.ELEMENTWISE, "aten.silu.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.REDUCTION, "aten.sum.dim_IntList", 1),
        (OpKind.REDUCTION, "aten.logsumexp.default", TRANSCENDENTAL_CYCLES_PER_ELEMENT),
        (OpKind.EMBEDDING, "aten.embedding.default", 1),
        (OpKind.SOFTMAX, "aten._softmax.default", 8),
        (OpKind.SOFTMAX, "aten._softmax_backward_data.default", 4),
        (OpKind.NORM, "aten.native_layer_norm.default", 6),
        (OpKind.NORM, "aten.native_layer_norm_backward.default", 8),
        (OpKind.COLLECTIVE, "_c10d_functional.all_reduce.default", 0),
    ],
)
def test_cycles_per_element(kind: OpKind, target: str, expected: int) -> None:
    assert cycles_per_element(kind, target) == expected


def test_transcendental_costs_more_than_simple() -> None:
    assert TRANSCENDENTAL_CYCLES_PER_ELEMENT > 1
    assert cycles_per_element(OpKind.SOFTMAX) > cycles_per_element(OpKind.ELEMENTWISE)
    assert cycles_per_element(OpKind.NORM) > cycles_per_element(OpKind.ELEMENTWISE)


def test_matmul_is_not_a_vector_op() -> None:
    with pytest.raises(ValueError):
        cycles_per_element(OpKind.MATMUL, "aten.mm.default")


def test_aten_names() -> None:
    assert aten_op_name("aten.gelu_backward.default") == "gelu_backward"
    assert aten_op_name("gelu") == "gelu"
    assert is_transcendental("aten.erf.default")
    assert not is_transcendental("aten.add.Tensor")
    assert not is_transcendental("aten.expand.default")


def vector_op(kind: OpKind, target: str, elements: int, bytes_moved: float) -> Operator:
    return Operator(id=0, name="v", target=target, kind=kind, phase=Phase.FWD, batch=0, m=0,
                    k=0, n=0, elements=elements, flop=float(elements),
                    bytes_read=bytes_moved / 2, bytes_written=bytes_moved / 2)


def test_latency_compute_then_memory_bound() -> None:
    acc = load_accelerator("tpuv4")  # 2 vector cores x 1024 lanes, 1.05 GHz, 1.2 TB/s
    op = vector_op(OpKind.ELEMENTWISE, "aten.add.Tensor", 10_000_000, 6e6)
    lat = SystolicCostModel().latency(op, acc)
    # single: ceil(1e7 / 1024) = 9766 cycles = 9.30 us > 6 MB / 1.2 TB/s = 5 us
    assert lat.single_core_s == pytest.approx(9766 / 1.05e9, rel=1e-12)
    # all: ceil(1e7 / 2048) = 4883 cycles = 4.65 us < 5 us: memory bound
    assert lat.all_cores_s == pytest.approx(5e-6, rel=1e-12)


def test_softmax_latency() -> None:
    acc = load_accelerator("tpuv4")
    op = vector_op(OpKind.SOFTMAX, "aten._softmax.default", 2048 * 100, 0.0)
    lat = SystolicCostModel().latency(op, acc)
    assert lat.single_core_s == pytest.approx(200 * 8 / 1.05e9, rel=1e-12)
    assert lat.all_cores_s == pytest.approx(100 * 8 / 1.05e9, rel=1e-12)


def test_zero_elements_and_single_device_collectives_cost_nothing() -> None:
    acc = load_accelerator("tpuv4")
    model = SystolicCostModel()
    assert model.latency(vector_op(OpKind.ELEMENTWISE, "aten.add.Tensor", 0, 1e6), acc) == \
        OpLatency(0.0, 0.0)
    collective = vector_op(OpKind.COLLECTIVE, "_c10d_functional.all_reduce.default", 10**6, 1e6)
    assert model.latency(collective, acc) == OpLatency(0.0, 0.0)


def test_allocations_and_generators() -> None:
    assert vector_hbm_bytes("aten.empty_like.default", 100.0, 100.0) == 0.0
    assert cycles_per_element(OpKind.ELEMENTWISE, "aten.empty_like.default") == 0
    assert vector_hbm_bytes("aten.bernoulli_.float", 100.0, 100.0) == 100.0
    assert vector_hbm_bytes("aten.add.Tensor", 200.0, 100.0) == 300.0
    acc = load_accelerator("tpuv4")
    op = vector_op(OpKind.ELEMENTWISE, "aten.empty_like.default", 10**6, 4e6)
    assert SystolicCostModel().latency(op, acc) == OpLatency(0.0, 0.0)


@given(elements=st.integers(0, 10**7), cores=st.integers(1, 4096), lanes=st.integers(1, 256),
       bytes_moved=st.floats(0, 1e9), kind=st.sampled_from([OpKind.ELEMENTWISE, OpKind.SOFTMAX, OpKind.NORM]))
def test_all_cores_never_slower(elements: int, cores: int, lanes: int, bytes_moved: float,
                                kind: OpKind) -> None:
    acc = Accelerator("v", 1, 2, 2, cores, lanes, 2.0**20, 2.0**30, 1e12, 1e9)
    lat = SystolicCostModel(cache_size=0).latency(vector_op(kind, "aten.mul.Tensor", elements, bytes_moved),
                                                  acc)
    assert 0.0 <= lat.all_cores_s <= lat.single_core_s
    if elements:
        assert lat.all_cores_s >= bytes_moved / 1e12 * (1 - 1e-12)


def test_op_latency_rejects_negative() -> None:
    from archplace.base.errors import ConfigError

    with pytest.raises(ConfigError):
        OpLatency(-1.0, 0.0)
    with pytest.raises(ConfigError):
        OpLatency(0.0, float("nan"))
