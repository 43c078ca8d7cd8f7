"""search over the precisions: each design's best plan is the better of its bf16 and fp8 ones,
the bounds hold at fp8 (pruning never changes the answer), and designs without FP8 are refused
or kept to bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Fp8CostModel
from archplace.dse.bounds import design_bound
from archplace.dse.request import SearchResult
from archplace.dse.runner import model_chains
from archplace.front import api
from archplace.front.specs.search import EXAMPLE, SearchSpec

GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 1024, "n_head": 16, "n_positions": 512,
       "vocab_size": 4096}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("m") / "config.json"
    path.write_text(json.dumps(GPT))
    return str(path)


@pytest.fixture(scope="module")
def fp8_space(small_space_file: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("fp8space") / "space.yaml"
    path.write_text(small_space_file.read_text() + "fp8_speedup: {value: 2, source: \"assumption\"}\n")
    return str(path)


def _search(model: str, space: str, precisions: tuple[str, ...], strategy: str = "exhaustive-all"
            ) -> SearchResult:
    return api.search(model, space=space, devices=16, global_batch=64, micro_batch_sizes=(1, 2),
                      baseline=None, strategy=strategy, precisions=precisions)


@pytest.fixture(scope="module")
def runs(model: str, fp8_space: str) -> dict[tuple[str, ...], SearchResult]:
    return {p: _search(model, fp8_space, p) for p in (("bf16",), ("fp8",), ("bf16", "fp8"))}


@pytest.mark.slow
def test_each_design_takes_the_better_precision(runs: dict[tuple[str, ...], SearchResult]) -> None:
    def by_name(result: SearchResult) -> dict[str, float]:
        return {r.accelerator.name: r.throughput_samples_per_s for r in result.evaluated}

    bf16, fp8, both = (by_name(runs[p]) for p in (("bf16",), ("fp8",), ("bf16", "fp8")))
    assert set(both) == set(bf16) == set(fp8) and len(both) == 12
    assert both == {name: max(bf16[name], fp8[name]) for name in both}
    chosen = {r.best.plan.precision.value for r in runs[("bf16", "fp8")].evaluated if r.best is not None}
    assert {r.best.plan.precision.value for r in runs[("fp8",)].evaluated if r.best is not None} == {"fp8"}
    assert chosen == {"bf16", "fp8"}  # fp8 wins on some designs, bf16 on others


Runs = dict[tuple[str, ...], SearchResult]


@pytest.mark.slow
def test_the_bounds_hold_at_fp8(model: str, fp8_space: str, runs: Runs) -> None:
    request = api.search_request(model, space=fp8_space, devices=16, global_batch=64,
                                 micro_batch_sizes=(1, 2), baseline=None, precisions=("bf16", "fp8"))
    chains = next(iter(model_chains(request).values()))
    cost = SystolicCostModel(request.cluster)
    for precisions, bf16 in ((("fp8",), False), (("bf16", "fp8"), True)):
        for result in runs[precisions].evaluated:
            bound = design_bound(result.accelerator, chains, request.cluster.devices, cost,
                                 fp8_cost=Fp8CostModel(cost), bf16=bf16)
            assert bound.throughput(result.accelerator) >= result.throughput_samples_per_s


@pytest.mark.slow
@pytest.mark.parametrize("precisions", [("fp8",), ("bf16", "fp8")])
def test_pruning_keeps_the_answer_at_fp8(precisions: tuple[str, ...], model: str, fp8_space: str,
                                          runs: Runs) -> None:
    plain = runs[precisions]
    pruned = _search(model, fp8_space, precisions, strategy="exhaustive")
    assert plain.best is not None and pruned.best is not None
    assert pruned.best.to_dict() == plain.best.to_dict()


def test_fp8_alone_on_a_space_without_fp8_is_refused(model: str, small_space_file: Path) -> None:
    with pytest.raises(ConfigError, match="has FP8 tensor cores: add bf16 to the precisions"):
        _search(model, str(small_space_file), ("fp8",))


def test_the_spec_reads_precisions() -> None:
    spec = SearchSpec.from_dict({"models": "gpt2-xl", "devices": 8, "global_batch": 8, "precisions": "fp8"})
    assert spec.precisions == ("fp8",)
    assert SearchSpec(models=("gpt2-xl",), devices=8, global_batch=8).precisions == ("bf16",)
    with pytest.raises(ConfigError, match="unknown precision 'fp16'; choose from: bf16, fp8"):
        SearchSpec.from_dict({"models": "gpt2-xl", "devices": 8, "global_batch": 8, "precisions": ["fp16"]})
    assert "precisions: [bf16]" in EXAMPLE
