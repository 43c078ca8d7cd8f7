"""The vectorised pruning bounds equal the scalar ones bit for bit, are stored in the run store and
read back on resume, and pruning with them stays lossless."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Fp8CostModel, Precision
from archplace.dse.bounds import design_bound
from archplace.dse.bounds_many import design_bounds
from archplace.dse.comm_floor import PlanLimits
from archplace.dse.evaluate import core_key
from archplace.dse.runner import Tick, model_chains, plan_limits
from archplace.front import api
from archplace.hw.accelerator import Accelerator, ArrayTiming, Dataflow
from archplace.hw.presets import load_accelerator
from archplace.hw.space import load_space
from archplace.placement.costs import CostKey
from archplace.workload.layers import LayerChain


@pytest.fixture(scope="module")
def sample() -> list[Accelerator]:
    """Core configurations of every kind: 36 of PHAZE's rectangular space, some with SCALE-Sim's
    timing, output stationary, FP8 tensor cores; presets, one of which declares its efficiency."""
    rng = random.Random(15)
    phaze = list(dict.fromkeys(core_key(a) for a in load_space("phaze").designs()))
    picked = rng.sample(phaze, 36)
    out = []
    for i, acc in enumerate(picked):
        changes: dict[str, Any] = {}
        if i % 3 == 1:
            changes["fp8_speedup"] = 2.0
        if i % 4 == 2:
            changes["array_timing"] = ArrayTiming.SCALESIM
        if i % 5 == 3:
            changes["dataflow"] = Dataflow.OS
        out.append(dataclasses.replace(acc, **changes))
    h100 = core_key(load_accelerator("h100-80gb"))
    assert h100.efficiency is not None and h100.fp8_speedup is not None
    return [*out, h100, core_key(load_accelerator("tpuv4"))]


def _chains(model: str, **options: Any) -> tuple[dict[CostKey, LayerChain], Any]:
    request = api.search_request(model, space="tiny", devices=64, global_batch=128, seq_len=256,
                                 micro_batch_sizes=(1, 4), baseline=None, **options)
    return next(iter(model_chains(request).values())), request.cluster


CASES = {
    "gpt": ("gpt", {}),
    "gpt-fused-eager": ("gpt", {"fuse": True, "attention": "eager"}),
    "moe": ("moe", {}),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "gpt-fused-eager" else c
                                  for c in sorted(CASES)])  # 5 s: make test-slow (CI) runs it
# make test: bf16 alone; make test-slow (CI): with fp8 and fp8 alone too
@pytest.mark.parametrize("precisions", [("bf16",), *(pytest.param(p, marks=pytest.mark.slow)
                                                     for p in (("bf16", "fp8"), ("fp8",)))])
@pytest.mark.parametrize("links", [None, 4 * 2.0**30])
def test_vectorised_bounds_equal_the_scalar_ones(case: str, precisions: tuple[str, ...], links: float | None,
                                                 models: dict[str, str], sample: list[Accelerator]) -> None:
    """Compute only (``links`` None), and with the communication floor on PHAZE's 4 GiB/s links."""
    name, options = CASES[case]
    chains, cluster = _chains(models[name], **options)
    cost = SystolicCostModel(cluster)
    fp8, bf16 = "fp8" in precisions, "bf16" in precisions
    limits = None if links is None else PlanLimits(cluster.devices, 128, links, (2, 4), grad_bytes=2)
    many = design_bounds(sample, chains, cluster.devices, cost, grad_bytes=2, fp8=fp8, bf16=bf16,
                         limits=limits)
    fp8_cost = Fp8CostModel(cost) if fp8 else None
    scalar = [design_bound(acc, chains, cluster.devices, cost, grad_bytes=2, fp8_cost=fp8_cost, bf16=bf16,
                           limits=limits)
              for acc in sample]
    assert many == scalar  # every float equal, bit for bit
    values = {b.samples_per_s_per_device for b in many}
    assert len(values) > len(sample) // 2 and all(0 < v < float("inf") for v in values) or not bf16
    if fp8:  # the FP8 designs are bounded with their faster GEMMs
        assert any(a.fp8_speedup is not None for a in sample)


def test_a_chunk_gives_what_the_whole_gives(models: dict[str, str], sample: list[Accelerator]) -> None:
    """A design's bound does not depend on the designs bounded with it (the runner bounds chunks)."""
    chains, cluster = _chains(models["gpt"])
    limits = PlanLimits(cluster.devices, 128, 4 * 2.0**30, (2, 4))
    whole = design_bounds(sample, chains, cluster.devices, SystolicCostModel(cluster), fp8=True,
                          limits=limits)
    parts = [b for start in range(0, len(sample), 7)
             for b in design_bounds(sample[start:start + 7], chains, cluster.devices,
                                    SystolicCostModel(cluster), fp8=True, limits=limits)]
    assert parts == whole


OPTIONS = dict(space="tiny", devices=256, global_batch=512, seq_len=512, micro_batch_sizes=(1, 2, 4),
               baseline=None)


def test_bounds_are_stored_and_read_back_on_resume(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    ticks: list[Tick] = []
    first = api.search("gpt2-xl", strategy="exhaustive", store=str(db), progress=ticks.append, **OPTIONS)
    request = api.search_request("gpt2-xl", **OPTIONS)
    cores = {core_key(a) for a in request.designs}
    assert ticks[-1].bounds_computed == len(cores) == ticks[-1].bounded
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT design, model, samples_per_s, samples_per_s_per_device "
                                  "FROM plan_bounds").fetchall()
    assert len(rows) == len(request.designs) and {r[1] for r in rows} == {0}
    chains = model_chains(request)["gpt2-xl"]
    cost = SystolicCostModel(request.cluster)
    by_name = {a.name: a for a in request.designs}
    for design, _, rate, per_device in rows[::5]:  # stored exactly (SQLite REAL: the same double)
        precisions = request.plan_space.precisions
        bound = design_bound(by_name[design], chains, request.cluster.devices, cost,
                             grad_bytes=request.plan_space.grad_reduce_dtype.bytes,
                             fp8_cost=Fp8CostModel(cost) if Precision.FP8 in precisions else None,
                             limits=plan_limits(request))
        assert (rate, per_device) == (bound.samples_per_s, bound.samples_per_s_per_device)
    again_ticks: list[Tick] = []
    again = api.search("gpt2-xl", strategy="exhaustive", store=str(db), progress=again_ticks.append,
                       **OPTIONS)
    assert again_ticks[-1].bounds_computed == 0 and again_ticks[-1].bounded == len(cores)
    assert again.best is not None and first.best is not None
    assert again.best.to_dict() == first.best.to_dict() and again.pruned == first.pruned


def test_a_store_without_bounds_is_still_read(tmp_path: Path) -> None:
    """A store whose search lost its bounds (killed before they were written) resumes: the bounds
    are computed again and stored; a store without the bounds table at all is not one this schema
    writes, and is refused in one line."""
    db = tmp_path / "run.db"
    first = api.search("gpt2-xl", strategy="exhaustive", store=str(db), **OPTIONS)
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM plan_bounds")
    connection.close()
    ticks: list[Tick] = []
    again = api.search("gpt2-xl", strategy="exhaustive", store=str(db), progress=ticks.append, **OPTIONS)
    assert ticks[-1].bounds_computed > 0 and again.pruned == first.pruned
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM plan_bounds").fetchone()[0] > 0
        connection.execute("DROP TABLE plan_bounds")
    connection.close()
    with pytest.raises(ConfigError, match="table 'plan_bounds' has columns"):
        api.search("gpt2-xl", strategy="exhaustive", store=str(db), **OPTIONS)


@pytest.mark.slow  # 6 s; tests/dse/test_pruning.py keeps lossless pruning in make test
def test_pruning_is_lossless_on_a_phaze_subspace(models: dict[str, str], tmp_path: Path) -> None:
    """A sampled sub-space of PHAZE's rectangular space: the pruned search returns what evaluating
    every design returns, and everything it pruned was strictly worse."""
    space = tmp_path / "sub.yaml"
    space.write_text("base: tpuv4\ntensor_cores: [2, 16]\narray_rows: [8, 64, 256]\narray_cols: [16, 128]\n"
                     "vector_cores: [1, 4]\nbuffer: [8 MiB, 32 MiB]\nhbm: [32 GiB]\narea_min_fraction: 0.0\n")
    options = dict(space=str(space), devices=64, global_batch=128, seq_len=256, micro_batch_sizes=(1, 4),
                   baseline=None, precisions=("bf16", "fp8"))
    space.write_text(space.read_text() + "fp8_speedup: 2\n")
    plain = api.search(models["gpt"], strategy="exhaustive-all", **options)
    pruned = api.search(models["gpt"], strategy="exhaustive", **options)
    assert plain.best is not None and pruned.best is not None
    assert pruned.best.to_dict() == plain.best.to_dict()
    assert pruned.pruned > 0 and len(pruned.evaluated) + pruned.pruned == len(plain.evaluated)
    kept = {r.accelerator.name for r in pruned.evaluated}
    best = plain.best.throughput_samples_per_s
    assert all(r.throughput_samples_per_s < best for r in plain.evaluated if r.accelerator.name not in kept)


def test_the_search_evaluates_what_scalar_bounds_let_it(monkeypatch: pytest.MonkeyPatch,
                                                       small_space_file: Path) -> None:
    """With the scalar bounds in place of the vectorised ones, the pruned search evaluates the same
    designs in the same order and prunes as many: nothing about the search changed but its speed."""
    from archplace.dse import runner

    options = dict(OPTIONS, space=str(small_space_file), precisions=("bf16",))
    fast = api.search("gpt2-xl", strategy="exhaustive", **options)

    def scalar(cores: list[Accelerator], chains: runner.Chains, cluster: Any, grad_bytes: int,
               precisions: tuple[Precision, ...], limits: PlanLimits | None) -> list[list[Any]]:
        cost = SystolicCostModel(cluster)
        return [[design_bound(acc, by_key, cluster.devices, cost, grad_bytes=grad_bytes, limits=limits)
                 for by_key in chains.values()] for acc in cores]

    monkeypatch.setattr(runner, "_bound_many_task", scalar)
    slow = api.search("gpt2-xl", strategy="exhaustive", **options)
    assert [r.to_dict() for r in fast.evaluated] == [r.to_dict() for r in slow.evaluated]
    assert fast.pruned == slow.pruned > 0
