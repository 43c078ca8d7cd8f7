"""Design evaluation: layer schedules shared by designs that differ only in HBM capacity."""

from __future__ import annotations

import dataclasses

import pytest

from archplace.cost.model import SystolicCostModel
from archplace.dse import evaluate as evaluate_module
from archplace.dse.evaluate import core_key, evaluate_designs
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.placement.plan import Recompute
from archplace.placement.workflow import PlanGrid
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model

GIB = 2.0**30


def test_hbm_variants_share_layer_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_model("gpt2-xl").with_seq_len(256)
    chains = {(1, b, False): extract_chain(spec, ExtractOptions.of(b, 256)) for b in (1, 2)}
    base = load_accelerator("tpuv4")
    small, large = (dataclasses.replace(base, name=f"hbm{g}", hbm_bytes=g * GIB) for g in (16, 80))
    assert core_key(small) == core_key(large) != core_key(dataclasses.replace(base, tensor_cores=4))
    cluster = load_cluster("tpuv4", 64)
    space = PlanGrid(tps=(1,), recomputes=(Recompute.NONE, Recompute.FULL))
    separate = [evaluate_designs([acc], chains, cluster, 256, space, SystolicCostModel(cluster))[0]
                for acc in (small, large)]

    calls = []
    real = evaluate_module.costs_by_key

    def counting(by_key, acc, cost, makespan):  # type: ignore[no-untyped-def]
        calls.extend(key[1] for key in by_key)
        return real(by_key, acc, cost, makespan)

    monkeypatch.setattr(evaluate_module, "costs_by_key", counting)
    together = evaluate_designs([small, large], chains, cluster, 256, space, SystolicCostModel(cluster))
    assert sorted(calls) == [1, 2]  # once per micro-batch, not once per design
    assert [r.to_dict() for r in together] == [r.to_dict() for r in separate]
    assert together[1].throughput_samples_per_s >= together[0].throughput_samples_per_s
