"""Exhaustive search with pruning: the bounds hold, and pruning never changes the answer."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from pathlib import Path

import pytest

from archplace.cost.model import SystolicCostModel
from archplace.dse.bounds import DesignBound, design_bound
from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective, score
from archplace.dse.request import SearchResult
from archplace.dse.runner import model_chains
from archplace.front import api
from archplace.hw.power import tdp_w
from archplace.hw.presets import load_accelerator

OPTIONS = dict(space="tiny", devices=256, global_batch=512, seq_len=512, micro_batch_sizes=(1, 2, 4),
               baseline=None)
GIB = 2.0**30


@pytest.fixture(scope="module")
def every() -> SearchResult:
    """Plain evaluation of every tiny design (the reference)."""
    return api.search("gpt2-xl", strategy="exhaustive-all", **OPTIONS)


def test_bound_is_above_every_design(every: SearchResult) -> None:
    request = api.search_request("gpt2-xl", **OPTIONS)
    chains = model_chains(request)["gpt2-xl"]
    cost = SystolicCostModel(request.cluster)
    assert len(every.evaluated) == len(request.designs) == 43
    for result in every.evaluated:
        bound = design_bound(result.accelerator, chains, request.cluster.devices, cost)
        assert bound.throughput(result.accelerator) >= result.throughput_samples_per_s
        assert bound.per_watt(result.accelerator) >= result.throughput_per_watt
        if result.best is not None:  # the floor is within a small factor, not vacuous
            assert bound.throughput(result.accelerator) < 20 * result.throughput_samples_per_s


@pytest.mark.parametrize("objective", ["throughput", "throughput-per-watt"])
def test_pruned_search_returns_the_plain_answer(objective: str) -> None:
    plain = api.search("gpt2-xl", strategy="exhaustive-all", objective=objective, **OPTIONS)
    pruned = api.search("gpt2-xl", strategy="exhaustive", objective=objective, **OPTIONS)
    assert plain.best is not None and pruned.best is not None
    assert pruned.best.to_dict() == plain.best.to_dict()  # same design, same plan, same figures
    assert pruned.pruned > 0 and len(pruned.evaluated) + pruned.pruned == len(plain.evaluated)
    best = score(plain.best, Objective(objective))
    names = {r.accelerator.name for r in pruned.evaluated}
    for result in plain.evaluated:  # everything pruned was strictly worse
        if result.accelerator.name not in names:
            assert score(result, Objective(objective)) < best


def test_pruned_pareto_front_is_the_plain_front() -> None:
    plain = api.search("gpt2-xl", strategy="exhaustive-all", objective="pareto", **OPTIONS)
    pruned = api.search("gpt2-xl", strategy="exhaustive", objective="pareto", **OPTIONS)
    assert [r.to_dict() for r in pruned.front] == [r.to_dict() for r in plain.front]
    assert len(plain.front) >= 2 and pruned.pruned > 0
    assert pruned.to_dict()["front"][0] == plain.front[0].to_dict()


def test_memory_floor_proves_infeasibility() -> None:
    """18 B/param of llama2-7b over 8 devices is 15.1 GB: an 8 GiB chip cannot train it."""
    request = api.search_request("llama2-7b", space="tiny", devices=8, global_batch=8, seq_len=128,
                                 micro_batch_sizes=(1,), tps=[1], baseline=None)
    chains = model_chains(request)["llama2-7b"]
    acc = load_accelerator("tpuv4")
    bound = design_bound(acc, chains, 8, SystolicCostModel(request.cluster))
    params = next(iter(chains.values())).model_params
    assert bound.model_state_floor_bytes == pytest.approx(18 * params / 8)
    assert bound.throughput(dataclasses.replace(acc, hbm_bytes=8 * GIB)) == 0.0
    assert bound.throughput(dataclasses.replace(acc, hbm_bytes=32 * GIB)) > 0.0


def test_bound_combinations() -> None:
    acc = load_accelerator("tpuv4")
    bound = DesignBound(samples_per_s=32.0, samples_per_s_per_device=2.0, model_state_floor_bytes=1.0)
    assert bound.throughput(acc) == 32.0
    assert math.isclose(bound.per_watt(acc) * tdp_w(acc), 2.0)


@pytest.mark.slow
def test_two_models_rank_by_geometric_mean() -> None:
    # TP 1 for both: together they share the TP widths valid for both (gpt2-xl's 25 heads: 1
    # only), alone opt-350m would try 2, 4, 8 as well and may pick one of them
    both = api.search(["gpt2-xl", "opt-350m"], strategy="exhaustive-all", tps=(1,), **OPTIONS)
    alone = {name: {r.accelerator.name: r for r in api.search(name, strategy="exhaustive-all", tps=(1,),
                                                               **OPTIONS).evaluated}
             for name in ("gpt2-xl", "opt-350m")}
    assert both.model == "gpt2-xl, opt-350m"
    for result in both.evaluated[:5]:
        parts = [alone[name][result.accelerator.name].throughput_samples_per_s for name in alone]
        assert result.throughput_samples_per_s == pytest.approx(math.sqrt(parts[0] * parts[1]), rel=1e-12)
        assert [c.model for c in result.components] == ["gpt2-xl", "opt-350m"]
    data = both.best.to_dict() if both.best else {}
    assert [m["model"] for m in data["models"]] == ["gpt2-xl", "opt-350m"]
    assert DesignResult.from_dict(data).to_dict() == data
    pruned = api.search(["gpt2-xl", "opt-350m"], strategy="exhaustive", tps=(1,), **OPTIONS)
    assert pruned.best is not None and pruned.best.to_dict() == data


def test_pruned_search_resumes_from_its_store(tmp_path: Path) -> None:
    """A re-run reads every evaluated design back (none evaluated again) and prunes the same."""
    db = tmp_path / "run.db"
    first = api.search("gpt2-xl", strategy="exhaustive", store=str(db), **OPTIONS)

    def finished() -> dict[str, float]:
        with sqlite3.connect(db) as connection:
            return dict(connection.execute("SELECT design, finished FROM results").fetchall())

    stamps = finished()
    again = api.search("gpt2-xl", strategy="exhaustive", store=str(db), **OPTIONS)
    assert finished() == stamps and len(stamps) == len(first.evaluated)
    assert again.best is not None and first.best is not None
    assert again.best.to_dict() == first.best.to_dict() and again.pruned == first.pruned


def test_designs_below_the_memory_floor_are_never_evaluated(tmp_path: Path) -> None:
    """llama2-7b on 8 devices needs 18 B/param / 8 = 14.1 GiB per device of model state: the 8 GiB
    designs are pruned even before anything fits; the 32 GiB ones are evaluated and win."""
    space = tmp_path / "space.yaml"
    space.write_text("base: tpuv4\ntensor_cores: [2, 4]\narray_dim: [64, 128]\nvector_cores: [1]\n"
                     "buffer: [32 MiB]\nhbm: [8 GiB, 32 GiB]\narea_min_fraction: 0.0\n")
    options = dict(space=str(space), devices=8, global_batch=8, seq_len=128, micro_batch_sizes=(1,), tps=[1],
                   recomputes=["full"], baseline=None)
    result = api.search("llama2-7b", **options)
    assert result.best is not None and result.best.accelerator.hbm_bytes == 32 * GIB
    assert result.considered == 8 and result.pruned >= 4
    assert all(r.accelerator.hbm_bytes == 32 * GIB for r in result.evaluated)

    space.write_text(space.read_text().replace("hbm: [8 GiB, 32 GiB]", "hbm: [4 GiB, 8 GiB]"))
    nothing = api.search("llama2-7b", **options)
    assert nothing.best is None and nothing.pruned == 7
    (only,) = nothing.evaluated  # the design with the most HBM, to say why in numbers
    assert only.accelerator.hbm_bytes == 8 * GIB
    assert only.infeasible_reason is not None and "8.0 GiB" in only.infeasible_reason


def test_fused_search_bounds_hold_and_pruning_is_lossless(small_space_file: Path) -> None:
    """With --fuse the layer graphs hold fused (matmul + epilogue) operators: the bounds must
    still be above every design, and the pruned search must return the plain answer."""
    options = dict(OPTIONS, space=str(small_space_file), fuse=True)
    plain = api.search("gpt2-xl", strategy="exhaustive-all", **options)
    request = api.search_request("gpt2-xl", **options)
    chains = model_chains(request)["gpt2-xl"]
    assert any(op.fused for chain in chains.values() for layer in chain.layers
               for graph in (layer.fwd, layer.bwd) for op in graph.ops)
    cost = SystolicCostModel(request.cluster)
    for result in plain.evaluated:
        bound = design_bound(result.accelerator, chains, request.cluster.devices, cost)
        assert bound.throughput(result.accelerator) >= result.throughput_samples_per_s
    pruned = api.search("gpt2-xl", strategy="exhaustive", **options)
    assert plain.best is not None and pruned.best is not None and pruned.fuse and plain.to_dict()["fuse"]
    assert pruned.best.to_dict() == plain.best.to_dict()
    eager = api.search("gpt2-xl", strategy="exhaustive-all", **dict(options, fuse=False))
    assert eager.best is not None
    assert plain.best.throughput_samples_per_s > eager.best.throughput_samples_per_s


def test_store_key_tells_fused_from_eager() -> None:
    from archplace.dse.request import request_identity

    eager = request_identity(api.search_request("gpt2-xl", **OPTIONS))
    fused = request_identity(api.search_request("gpt2-xl", fuse=True, **OPTIONS))
    assert eager != fused and {k for k in eager if eager[k] != fused[k]} == {"fuse"}


def test_rectangular_space_bounds_hold_and_pruning_is_lossless(tmp_path: Path) -> None:
    """Arrays with rows != cols (PHAZE's space): the bounds are above every design, both
    orientations of an array are kept apart, and the pruned search returns the plain answer."""
    space = tmp_path / "rect.yaml"
    space.write_text("base: tpuv4\ntensor_cores: [2, 8]\narray_rows: [32, 128]\narray_cols: [32, 128]\n"
                     "vector_cores: [2]\nbuffer: [32 MiB]\nhbm: [32 GiB]\narea_min_fraction: 0.0\n")
    options = dict(OPTIONS, space=str(space))
    plain = api.search("gpt2-xl", strategy="exhaustive-all", **options)
    request = api.search_request("gpt2-xl", **options)
    assert len(plain.evaluated) == len(request.designs) == 8
    chains = model_chains(request)["gpt2-xl"]
    cost = SystolicCostModel(request.cluster)
    by_name = {}
    for result in plain.evaluated:
        bound = design_bound(result.accelerator, chains, request.cluster.devices, cost)
        assert bound.throughput(result.accelerator) >= result.throughput_samples_per_s
        by_name[result.accelerator.name] = result.throughput_samples_per_s
    assert by_name["tc8-32x128-vc2-buf32MiB-hbm32GiB"] != by_name["tc8-128x32-vc2-buf32MiB-hbm32GiB"]
    pruned = api.search("gpt2-xl", strategy="exhaustive", **options)
    assert plain.best is not None and pruned.best is not None
    assert pruned.best.to_dict() == plain.best.to_dict()
