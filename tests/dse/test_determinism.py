"""The pruned exhaustive search is deterministic and exact for the rows shown: the designs it
evaluates do not depend on the workers, and its best K designs are the best K of the space."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective, pareto_front, rank, score
from archplace.dse.request import SearchResult
from archplace.dse.runner import run_search
from archplace.dse.store import ResultStore
from archplace.dse.strategies.exhaustive import ExhaustiveStrategy
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.front import api
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.presets import load_accelerator
from archplace.placement.plan import Plan, Recompute
from archplace.placement.result import PlanResult

BASE = load_accelerator("tpuv4")
TINY = dict(space="tiny", devices=256, global_batch=512, seq_len=512, micro_batch_sizes=(1, 2), baseline=None)


def chip(i: int) -> Accelerator:
    """Design ``i`` of a synthetic space (areas and TDPs differ, some tie)."""
    return dataclasses.replace(BASE, name=f"d{i:02d}", tensor_cores=1 + i % 4, vector_cores=1 + i % 3)


def fake(acc: Accelerator, throughput: float | None) -> DesignResult:
    if throughput is None:
        return DesignResult(acc, area_mm2(acc), None, "does not fit")
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.NONE, stages=((0, 0),))
    return DesignResult(acc, area_mm2(acc), PlanResult(plan, 1.0 / throughput, throughput, throughput, 0.5))


@st.composite
def spaces(draw: st.DrawFn) -> tuple[dict[str, DesignResult], dict[str, float]]:
    """Designs with their results (ties and infeasible ones included) and valid upper bounds."""
    n = draw(st.integers(1, 24))
    results: dict[str, DesignResult] = {}
    slack: dict[str, float] = {}
    for i in range(n):
        acc = chip(i)
        throughput = draw(st.one_of(st.none(), st.sampled_from([1.0, 2.0, 3.0, 5.0]),
                                    st.floats(0.5, 10.0)))
        results[acc.name] = fake(acc, throughput)
        # infeasible designs: bound 0 (memory floor) or any positive number
        slack[acc.name] = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]) if throughput is None
                               else st.floats(0.0, 2.0))
    return results, slack


def explore(results: dict[str, DesignResult], slack: dict[str, float], objective: Objective, keep: int,
            batch: int, parallelism: int) -> tuple[StrategyOutcome, list[list[str]]]:
    """A pruned run on synthetic results; also returns the batches asked for."""
    calls: list[list[str]] = []

    def evaluate(accs: object) -> list[DesignResult]:
        names = [acc.name for acc in accs]  # type: ignore[attr-defined]
        calls.append(names)
        return [results[name] for name in names]

    def measure(r: DesignResult) -> float:
        return score(r, objective)

    def bounds(accs: object) -> list[float]:
        out = []
        for acc in accs:  # type: ignore[attr-defined]
            r = results[acc.name]
            out.append(slack[acc.name] if r.best is None else measure(r) * (1 + slack[acc.name]))
        return out

    designs = tuple(r.accelerator for r in results.values())
    ctx = StrategyContext(designs=designs, objective=objective, evaluate=evaluate, score=measure,
                          bounds=bounds, parallelism=parallelism, keep=keep)
    return ExhaustiveStrategy(batch=batch).run(ctx), calls


def names(results: tuple[DesignResult, ...] | list[DesignResult]) -> list[str]:
    return [r.accelerator.name for r in results]


@given(spaces(), st.sampled_from(list(Objective)), st.integers(1, 6), st.integers(1, 10))
def test_pruning_keeps_the_true_top_k_and_ignores_the_workers(
        space: tuple[dict[str, DesignResult], dict[str, float]], objective: Objective, keep: int,
        batch: int) -> None:
    results, slack = space
    outcome, calls = explore(results, slack, objective, keep, batch, parallelism=1)
    for parallelism in (2, 7):
        again, again_calls = explore(results, slack, objective, keep, batch, parallelism)
        assert again_calls == calls and again.pruned == outcome.pruned
    assert len(outcome.evaluated) + outcome.pruned == len(results)
    assert all(len(call) <= batch for call in calls)
    everything = list(results.values())
    if objective is Objective.PARETO:
        assert names(pareto_front(outcome.evaluated)) == names(pareto_front(everything))
        return
    feasible_top = [r for r in rank(everything, objective)[:keep] if r.best is not None]
    assert names(rank(outcome.evaluated, objective)[:len(feasible_top)]) == names(feasible_top)
    kept = sorted((score(r, objective) for r in outcome.evaluated if r.best is not None), reverse=True)
    skipped = set(results) - set(names(outcome.evaluated))
    for name in skipped:  # strictly worse than the keep best evaluated designs
        r = results[name]
        assert r.best is None or (len(kept) >= keep and score(r, objective) < kept[keep - 1])


def test_keep_widens_what_is_evaluated() -> None:
    """Scores 10, 9, ..., bounds 10% above: keep 1 stops after the first batch, keep 3 too, but keep
    4 of a batch of 3 needs the second batch."""
    results = {chip(i).name: fake(chip(i), 10.0 - i) for i in range(9)}
    slack = dict.fromkeys(results, 0.1)
    runs = {keep: explore(results, slack, Objective.THROUGHPUT, keep, 3, 1)[1] for keep in (1, 3, 4)}
    assert runs[1] == runs[3] == [["d00", "d01", "d02"]]
    assert runs[4] == [["d00", "d01", "d02"], ["d03", "d04", "d05"]]


def same(a: SearchResult, b: SearchResult, top: int) -> None:
    assert sorted(names(a.evaluated)) == sorted(names(b.evaluated)) and a.pruned == b.pruned
    assert [r.to_dict() for r in a.evaluated[:top]] == [r.to_dict() for r in b.evaluated[:top]]
    assert [r.to_dict() for r in a.exact] == [r.to_dict() for r in b.exact]


@pytest.mark.slow
def test_one_or_two_workers_evaluate_the_same_designs_and_report_the_same_figures() -> None:
    """The bug: with 2 jobs the pruned search evaluated 8 tiny designs, with 1 job 4; and rows 2..K
    were not the true top K.  Now the designs, the top 5 and their CP-SAT figures are identical."""
    serial = api.search("gpt2-xl", strategy="exhaustive", jobs=1, exact_top=5, **TINY)
    parallel = api.search("gpt2-xl", strategy="exhaustive", jobs=2, exact_top=5, **TINY)
    same(serial, parallel, 5)
    assert len(serial.exact) == 5 and serial.pruned > 0
    plain = api.search("gpt2-xl", strategy="exhaustive-all", jobs=1, **TINY)
    assert [r.to_dict() for r in serial.evaluated[:5]] == [r.to_dict() for r in plain.evaluated[:5]]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, small_space_file: Path) -> Callable[[str], Path]:
    """The store of a model, every design of the small space evaluated once in it (later searches
    read them back), made on first use."""
    out: dict[str, Path] = {}

    def store_of(model: str) -> Path:
        if model not in out:
            db = tmp_path_factory.mktemp("stores") / f"{model}.db"
            api.search(model, strategy="exhaustive-all", store=str(db),
                       **dict(TINY, space=str(small_space_file)))
            out[model] = db
        return out[model]

    return store_of


@pytest.mark.parametrize("model", ["gpt2-xl", pytest.param("opt-350m", marks=pytest.mark.slow)])
@pytest.mark.parametrize("objective", ["throughput", "throughput-per-watt"])
@pytest.mark.parametrize("keep", [1, 3, 5])
def test_top_k_is_the_plain_top_k(stored: Callable[[str], Path], small_space_file: Path, model: str,
                                  objective: str, keep: int) -> None:
    request = api.search_request(model, objective=objective, **dict(TINY, space=str(small_space_file)))
    store = ResultStore(stored(model))
    plain = run_search(request, ExhaustiveStrategy(prune=False), store=store)
    pruned = run_search(request, ExhaustiveStrategy(), store=store, keep=keep)
    assert [r.to_dict() for r in pruned.evaluated[:keep]] == [r.to_dict() for r in plain.evaluated[:keep]]
    again = run_search(request, ExhaustiveStrategy(), store=store, keep=keep)
    same(pruned, again, keep)
    if keep == 1:
        assert pruned.pruned > 0  # pruning does happen on this space
