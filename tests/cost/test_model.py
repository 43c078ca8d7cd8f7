"""The cost models on whole operators: peak fraction, memory bound, collectives, protocol, cache."""

from __future__ import annotations

import dataclasses
import types
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost.collective import cluster_collective_time_s
from archplace.cost.model import (
    Bound,
    CostModel,
    EstimatingCostModel,
    OpLatency,
    RooflineCostModel,
    SystolicCostModel,
)
from archplace.hw.accelerator import Accelerator, Dataflow
from archplace.hw.power import HBM_PATH_ENERGY_J_PER_BYTE, LOCAL_SRAM_ENERGY_J_PER_BYTE, MAC_ENERGY_J
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase

_FIELDS = {f.name for f in dataclasses.fields(Operator)}


def matmul(batch: int, m: int, k: int, n: int, e: int = 2, extra: float = 0.0) -> Operator:
    return Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                    batch=batch, m=m, k=k, n=n, elements=batch * m * n, flop=2.0 * batch * m * k * n,
                    bytes_read=e * batch * (m * k + k * n) + extra, bytes_written=e * batch * m * n)


def with_fields(op: Operator, **values: Any) -> Any:
    """``op`` with extra fields (``group``, ``fused_elements``) whether or not Operator has them yet."""
    if set(values) <= _FIELDS:
        return replace(op, **values)
    data = {f: getattr(op, f) for f in _FIELDS}
    data.update(values)
    return types.SimpleNamespace(**data)


@pytest.mark.parametrize("shape", [(1, 4096, 4096, 4096), (1, 8192, 8192, 8192), (1, 16384, 8192, 8192),
                                   (8, 2048, 2048, 2048), (1, 4096, 16384, 4096)])
def test_large_square_matmuls_reach_90_percent_of_peak(shape: tuple[int, int, int, int]) -> None:
    acc = load_accelerator("tpuv4")
    est = SystolicCostModel().estimate(matmul(*shape), acc)
    flop = 2.0 * shape[0] * shape[1] * shape[2] * shape[3]
    assert est.bound_all is Bound.COMPUTE
    assert flop / est.all_cores_s / acc.peak_flop_per_s >= 0.90
    assert flop / est.single_core_s / (acc.peak_flop_per_s / acc.tensor_cores) >= 0.90


@pytest.mark.parametrize("hardware", ["tpuv4", "a100-80gb", "h100-80gb"])
@pytest.mark.parametrize(("k", "n"), [(4096, 4096), (8192, 8192), (4096, 11008)])
def test_m_equals_1_is_memory_bound_at_hbm_bandwidth(hardware: str, k: int, n: int) -> None:
    acc = load_accelerator(hardware)
    est = SystolicCostModel().estimate(matmul(1, 1, k, n), acc)
    assert est.bound_all is Bound.MEMORY
    assert est.hbm_bytes == 2 * (k + k * n + n)  # every weight once: the compulsory traffic
    # the GPU presets declare that streaming kernels reach a fraction of the datasheet bandwidth
    hbm = 1.0 if acc.efficiency is None else acc.efficiency.hbm
    streaming = est.hbm_bytes / (acc.hbm_bandwidth_bytes_per_s * hbm)
    if acc.efficiency is not None and acc.efficiency.kernel_tables:
        # measured tables: the GEMV is clamped by the nearest measured shapes (m = 64 on A100,
        # 256 on H100), never faster than the datasheet bandwidth nor slower than the streaming model
        assert est.hbm_bytes / acc.hbm_bandwidth_bytes_per_s <= est.all_cores_s <= streaming
    else:
        assert est.all_cores_s == streaming
    assert est.memory_s == est.all_cores_s


def test_small_buffer_rereads_operands() -> None:
    acc = load_accelerator("tpuv4")
    small = replace(acc, buffer_bytes=2 * 2**20)
    op = matmul(1, 8192, 8192, 8192)
    model = SystolicCostModel()
    big_bytes, small_bytes = model.estimate(op, acc).hbm_bytes, model.estimate(op, small).hbm_bytes
    assert big_bytes < small_bytes
    assert small_bytes > 5 * 2 * 3 * 8192**2  # a 2 MiB buffer re-reads each operand many times


def test_output_stationary_design() -> None:
    acc = replace(load_accelerator("tpuv4"), dataflow=Dataflow.OS)
    est = SystolicCostModel().estimate(matmul(1, 8192, 8192, 8192), acc)
    assert 2.0 * 8192**3 / est.all_cores_s / acc.peak_flop_per_s >= 0.90
    assert acc.to_dict()["dataflow"] == "os"


def test_energy_by_hand() -> None:
    acc = Accelerator("e", 1, 4, 4, 1, 4, 2.0**30, 2.0**30, 1e12, 1e9)
    est = SystolicCostModel().estimate(matmul(1, 8, 4, 4), acc)
    # 128 MACs; feed = inputs 8*4*1 + weights 16 + psums 32*(2*1-1) = 80 elements; HBM 2*(32+16+32) B
    expected = 128 * MAC_ENERGY_J + 2 * 80 * LOCAL_SRAM_ENERGY_J_PER_BYTE + 160 * HBM_PATH_ENERGY_J_PER_BYTE
    assert est.energy_j == pytest.approx(expected, rel=1e-12, abs=0)


def test_fused_epilogue_runs_on_the_vector_cores() -> None:
    acc = replace(load_accelerator("tpuv4"), vector_cores=1, vector_lanes=1)
    op = with_fields(matmul(1, 64, 128, 128), fused_elements=64 * 128)
    est = SystolicCostModel().estimate(op, acc)
    assert est.compute_single_s == pytest.approx(64 * 128 / acc.clock_hz)  # one lane: 8192 cycles


def test_extra_traced_bytes_are_added() -> None:
    acc = load_accelerator("tpuv4")
    model = SystolicCostModel()
    assert (model.estimate(matmul(1, 1, 4096, 4096, extra=8192.0), acc).hbm_bytes
            == model.estimate(matmul(1, 1, 4096, 4096), acc).hbm_bytes + 8192.0)


def collective(group: int, target: str = "all_reduce", size: float = 64e6) -> Any:
    op = Operator(id=0, name="ar", target=target, kind=OpKind.COLLECTIVE, phase=Phase.FWD, batch=0, m=0,
                  k=0, n=0, elements=int(size // 2), flop=0.0, bytes_read=size, bytes_written=size)
    return with_fields(op, group=group)


def test_collectives_use_the_cluster_links() -> None:
    acc = load_accelerator("a100-80gb")
    cluster = load_cluster("a100-80gb", 64)
    for model in (SystolicCostModel(cluster), RooflineCostModel(cluster)):
        est = model.estimate(collective(8), acc)
        assert est.bound_all is Bound.COMMUNICATION
        assert est.all_cores_s == cluster_collective_time_s(cluster, "all_reduce", 64e6, 8)
        assert est.single_core_s == est.all_cores_s > 0
        assert model.estimate(collective(16), acc).all_cores_s > est.all_cores_s  # leaves the node
    with pytest.raises(ConfigError, match="cluster"):
        SystolicCostModel().latency(collective(8), acc)
    assert SystolicCostModel().latency(collective(1), acc) == OpLatency(0.0, 0.0)


def test_cache_is_per_instance_and_shared_across_hbm_sizes() -> None:
    acc = load_accelerator("tpuv4")
    model, other = SystolicCostModel(), SystolicCostModel()
    op = matmul(2, 64, 256, 512)
    first = model.latency(op, acc)
    assert model.latency(op, replace(acc, hbm_bytes=80 * 2**30, name="x")) == first
    assert model.cache_info()["hits"] == 1
    assert other.cache_info()["size"] == 0
    model.cache_clear()
    assert model.cache_info() == {"hits": 0, "misses": 0, "size": 0}


def test_models_are_interchangeable_in_the_scheduler() -> None:
    acc = load_accelerator("tpuv4")
    ops = (matmul(1, 512, 512, 512),
           replace(matmul(1, 512, 512, 512), id=1, preds=(0,)))
    graph = OpGraph(ops)
    for model in (SystolicCostModel(), RooflineCostModel()):
        assert isinstance(model, CostModel) and isinstance(model, EstimatingCostModel)
        problem = ScheduleProblem.from_graph(graph, acc, model)
        assert len(problem.ops) == 2 and problem.ops[0].all_s > 0


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 8), m=st.integers(1, 4096), k=st.integers(1, 4096), n=st.integers(1, 4096),
       dim=st.sampled_from([2, 16, 128, 256]), cores=st.sampled_from([1, 8, 64, 4096]),
       buf_mib=st.sampled_from([2, 32, 128]))
def test_roofline_is_a_lower_bound(batch: int, m: int, k: int, n: int, dim: int, cores: int,
                                   buf_mib: int) -> None:
    acc = Accelerator("r", cores, dim, dim, 2, dim, buf_mib * 2.0**20, 2.0**35, 1.2e12, 1.05e9)
    op = matmul(batch, m, k, n)
    systolic = SystolicCostModel(cache_size=0).latency(op, acc)
    roofline = RooflineCostModel().latency(op, acc)
    assert systolic.single_core_s >= roofline.single_core_s * (1 - 1e-12)
    assert systolic.all_cores_s >= roofline.all_cores_s * (1 - 1e-12)
