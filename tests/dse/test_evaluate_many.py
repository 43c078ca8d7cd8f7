"""Evaluations of several core configurations at once: operators costed through the vectorised
path (:class:`archplace.cost.tabulated.TabulatedCostModel`) give exactly the scalar latencies, so
one call over many designs returns what one call per design returns, in the same order."""

from __future__ import annotations

import dataclasses

import pytest

from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Precision
from archplace.cost.tabulated import TabulatedCostModel
from archplace.dse import evaluate as evaluate_module
from archplace.dse.evaluate import core_key, evaluate_designs
from archplace.hw.accelerator import ArrayTiming, Dataflow
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.placement.plan import Recompute
from archplace.placement.workflow import PlanGrid
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model

GIB = 2.0**30
TPU = load_accelerator("tpuv4")
CHIPS = [
    TPU,
    dataclasses.replace(TPU, name="many-small", tensor_cores=64, array_rows=32, array_cols=16,
                        vector_cores=512, vector_lanes=32, buffer_bytes=2.0 * 2**20),
    dataclasses.replace(TPU, name="os", dataflow=Dataflow.OS, tensor_cores=2, vector_cores=2),
    dataclasses.replace(TPU, name="scalesim", array_timing=ArrayTiming.SCALESIM, clock_hz=1.5e9),
    dataclasses.replace(TPU, name="fp8", fp8_speedup=2.0, hbm_bandwidth_bytes_per_s=3e12),
    load_accelerator("a100-80gb"),  # declares its kernel efficiency
    load_accelerator("h100-80gb"),
    dataclasses.replace(TPU, name="vector-heavy", tensor_cores=1, vector_cores=4096, vector_lanes=8),
]


@pytest.fixture(scope="module")
def chains():  # type: ignore[no-untyped-def]
    out = {}
    for model, tp in (("gpt2-xl", 1), ("llama2-7b", 2)):
        spec = load_model(model).with_seq_len(256)
        out[model] = {(tp, b, False): extract_chain(spec, ExtractOptions.of(b, 256, tp=tp)) for b in (1, 2)}
    return out


def test_the_table_gives_the_scalar_latencies(chains) -> None:  # type: ignore[no-untyped-def]
    cluster = load_cluster("tpuv4", 64)
    scalar = SystolicCostModel(cluster)
    table = TabulatedCostModel(CHIPS, SystolicCostModel(cluster))
    assert len(table) == len(CHIPS)
    outside = dataclasses.replace(TPU, name="outside", tensor_cores=3)
    checked = 0
    for by_key in chains.values():
        for chain in by_key.values():
            ops = {id(op): op for layer in chain.layers for g in (layer.fwd, layer.bwd) for op in g.ops}
            for op in ops.values():
                for chip in [*CHIPS, dataclasses.replace(CHIPS[1], name="renamed", hbm_bytes=GIB), outside]:
                    assert table.latency(op, chip) == scalar.latency(op, chip)
                    assert table.estimate(op, chip) == scalar.estimate(op, chip)
                    checked += 1
    assert checked > 1000


@pytest.mark.parametrize("precisions", [(Precision.BF16,), (Precision.BF16, Precision.FP8)])
def test_one_call_over_many_designs_equals_one_call_each(chains, precisions,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load_cluster("tpuv4", 64)
    space = PlanGrid(tps=(1, 2), recomputes=(Recompute.NONE, Recompute.FULL), precisions=precisions)
    designs = [*CHIPS, dataclasses.replace(CHIPS[1], name="many-small-hbm16", hbm_bytes=16 * GIB)]
    built = []
    real = evaluate_module.TabulatedCostModel

    def recording(accs, cost):  # type: ignore[no-untyped-def]
        built.append(len({core_key(a) for a in accs}))
        return real(accs, cost)

    monkeypatch.setattr(evaluate_module, "TabulatedCostModel", recording)
    for by_key in chains.values():
        separate = [evaluate_designs([acc], by_key, cluster, 256, space, SystolicCostModel(cluster))[0]
                    for acc in designs]
        assert built == []  # one core configuration: the scalar path
        together = evaluate_designs(designs, by_key, cluster, 256, space, SystolicCostModel(cluster))
        assert built == [len(CHIPS)] and len(CHIPS) >= evaluate_module.TABLE_MIN_CORES
        built.clear()
        assert [r.to_dict() for r in together] == [r.to_dict() for r in separate]
        assert any(r.best is not None for r in together)
