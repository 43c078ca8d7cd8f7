"""MFU and utilisation never exceed 1, on any array shape and core count: per matmul
(``estimate matmul``), per layer (``estimate``) and per plan (``evaluate``).

The 1x1-array chip of issue #11 showed the mechanism: the layers' FLOP included the element-wise
work of the vector cores, while the peak counts the arrays' MACs only; a chip whose vector cores
outrun its arrays then "beat" its peak (MFU 100.9 % in evaluate, 1401 % in estimate). MFU now
counts the matmuls' FLOP (``archplace.cost.model.array_flop``).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import InternalError
from archplace.cost import gemm
from archplace.cost.estimate import estimate_layers, estimate_matmul, utilisation
from archplace.cost.model import RooflineCostModel, SystolicCostModel, array_flop
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.placement.costs import layer_costs
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import Plan, Recompute, TrainingSetup
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import OpKind
from archplace.workload.layers import LayerChain
from archplace.workload.zoo import load_model

TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64,
            "vocab_size": 256}

DIMS = st.integers(1, 300)
ARRAY = st.sampled_from([1, 2, 3, 8, 16, 128])


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, LayerChain]:
    """The tiny model's chain as its eager code runs it (False) and with element-wise operators
    fused into their matmuls (True)."""
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY_GPT))
    spec = load_model(str(path))
    # HF's eager attention and unfused element-wise ops: the matmuls and epilogues under test
    return {fuse: extract_chain(spec, ExtractOptions.of(micro_batch=2, seq_len=64, fuse=fuse,
                                                     attention="eager", kernels="unfused"))
            for fuse in (False, True)}


@pytest.fixture(scope="module")
def chain(chains: dict[bool, LayerChain]) -> LayerChain:
    return chains[False]


def chip(rows: int, cols: int, tensor_cores: int, vector_cores: int, lanes: int,
         dataflow: str) -> Accelerator:
    return Accelerator(f"t{tensor_cores}-{rows}x{cols}-v{vector_cores}x{lanes}", tensor_cores, rows, cols,
                       vector_cores, lanes, 64 * 2**20, 32 * 2**30, 1.2e12, 1e9, dataflow=dataflow)


CHIPS = st.builds(chip, ARRAY, ARRAY, st.integers(1, 16), st.integers(1, 8), st.sampled_from([1, 128, 4096]),
                  st.sampled_from(["ws", "os"]))


@given(m=DIMS, k=DIMS, n=DIMS, batch=st.integers(1, 4), rows=ARRAY, cols=ARRAY, cores=st.integers(1, 64),
       dataflow=st.sampled_from(["ws", "os"]))
def test_matmul_utilisation_is_at_most_one(m: int, k: int, n: int, batch: int, rows: int, cols: int,
                                           cores: int, dataflow: str) -> None:
    est = estimate_matmul(m, k, n, rows, cols, batch=batch, cores=cores, dataflow=dataflow)
    assert 0 < est.utilization <= 1
    # exactly the useful MACs over the MACs the cycles offer
    cycles = gemm.matmul_cycles(batch, m, k, n, rows, cols, cores, dataflow == "os")
    assert est.compute_cycles == cycles
    assert est.utilization == pytest.approx(batch * m * k * n / (cores * rows * cols * cycles), rel=1e-12)


@settings(max_examples=30)
@given(acc=CHIPS, fuse=st.booleans(), roofline=st.booleans())
def test_layer_mfu_is_at_most_one(chains: dict[bool, LayerChain], acc: Accelerator, fuse: bool,
                                  roofline: bool) -> None:
    result = estimate_layers(chains[fuse], acc, RooflineCostModel() if roofline else SystolicCostModel())
    for layer in result.layers:
        for phase in (layer.fwd, layer.bwd):
            assert 0.0 <= phase.mfu <= 1.0
            assert phase.mfu == pytest.approx(phase.array_flop / (phase.all_cores_s * acc.peak_flop_per_s))
    totals = result.to_dict()["total"]
    assert all(0.0 < totals[phase]["mfu"] <= 1.0 for phase in ("fwd", "bwd"))
    embedding = result.layers[0]
    assert embedding.name == "embedding" and embedding.fwd.mfu == 0.0  # no matmul, no MFU


@settings(max_examples=20)
@given(acc=CHIPS, pp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 2, 4]), micro_batches=st.integers(1, 4))
def test_plan_mfu_is_at_most_one(chain: LayerChain, acc: Accelerator, pp: int, dp: int,
                                 micro_batches: int) -> None:
    cluster = Cluster(devices=8, devices_per_node=4, intra_node_bandwidth_bytes_per_s=3e11,
                      inter_node_bandwidth_bytes_per_s=3e11, intra_node_latency_s=1e-6,
                      inter_node_latency_s=2e-6)
    setup = TrainingSetup(cluster, chain.micro_batch * dp * micro_batches, chain.seq_len, acc.hbm_bytes,
                          acc.hbm_bandwidth_bytes_per_s, acc.peak_flop_per_s)
    costs = layer_costs(chain, acc, SystolicCostModel(cluster))
    for cost, layer in zip(costs, chain.layers, strict=True):
        assert cost.fwd_flop == array_flop(layer.fwd.ops) <= layer.fwd_flop
        assert cost.fwd_flop <= cost.fwd_s * acc.peak_flop_per_s * (1 + 1e-12)
        assert cost.bwd_flop <= cost.bwd_s * acc.peak_flop_per_s * (1 + 1e-12)
    n = len(costs)
    stages = ((0, n - 1),) if pp == 1 else ((0, n // 2 - 1), (n // 2, n - 1))
    plan = Plan(tp=1, pp=pp, dp=dp, micro_batch=chain.micro_batch, recompute=Recompute.NONE, stages=stages)
    result = evaluate_plan(costs, setup, plan)
    assert 0.0 < result.mfu <= 1.0


def test_one_by_one_arrays_are_nearly_fully_used(chain: LayerChain) -> None:
    """A 1x1 array does one MAC per cycle: its matmuls keep it busy all the time, so the layers'
    MFU is just below 1 (the fill and drain cycles), never above."""
    acc = chip(1, 1, 8, 2, 1024, "ws")
    result = estimate_layers(chain, acc, SystolicCostModel())
    blocks = [layer for layer in result.layers if layer.name == "block"]
    assert blocks and all(0.99 < layer.fwd.mfu <= 1.0 for layer in blocks)


def test_utilisation_above_one_is_an_internal_error() -> None:
    assert utilisation("MFU", 3.0, 4.0) == 0.75
    assert utilisation("MFU", 1.0, 0.0) == 0.0
    assert utilisation("MFU", 1.0 + 1e-12, 1.0) == 1.0  # rounding
    with pytest.raises(InternalError, match=r"^MFU 1.01 > 1: 1.01 done against a capacity of 1"):
        utilisation("MFU", 1.01, 1.0)


def test_array_flop_counts_the_matmuls_only(chains: dict[bool, LayerChain]) -> None:
    eager, fused = chains[False].layers[1].fwd, chains[True].layers[1].fwd
    matmuls = [op for op in eager.ops if op.kind is OpKind.MATMUL]
    assert array_flop(eager.ops) == sum(2 * op.batch * op.m * op.k * op.n for op in matmuls) > 0
    assert array_flop(eager.ops) < eager.flop  # the element-wise work is left out
    assert array_flop(fused.ops) == array_flop(eager.ops)  # fused epilogues are not MACs
    assert fused.flop == pytest.approx(eager.flop)
