"""The Optuna strategy: TPE / NSGA-II sampling over a grid of designs, evaluated in batches."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from archplace.base.errors import ConfigError
from archplace.cost.model import SystolicCostModel
from archplace.dse.evaluate import DesignResult, evaluate_designs
from archplace.dse.objective import Objective, dominates, pareto_front, pareto_key, score
from archplace.dse.request import SearchRequest
from archplace.dse.strategies.optuna_search import DesignGrid, OptunaStrategy
from archplace.dse.strategy import StrategyContext
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.hw.space import design_name, load_space
from archplace.placement.plan import Plan, Recompute
from archplace.placement.result import PlanResult
from archplace.workload.zoo import load_model

MIB, GIB = 2**20, 2**30
MAX_MACS = 4 * 128 * 128  # the hand-made "area rule": at most this many MACs per chip


def _grid() -> tuple[Accelerator, ...]:
    """4 x 3 x 2 x 2 x 2 = 96 combinations, 64 of them within MAX_MACS."""
    base = load_accelerator("tpuv4")
    out = []
    for tc, dim, vc, buf, hbm in itertools.product((1, 2, 4, 8), (64, 128, 256), (1, 2),
                                                    (32 * MIB, 64 * MIB), (16 * GIB, 32 * GIB)):
        if tc * dim * dim <= MAX_MACS:
            out.append(dataclasses.replace(base, name=design_name(tc, dim, vc, buf, hbm), tensor_cores=tc,
                                           array_rows=dim, array_cols=dim, vector_cores=vc,
                                           vector_lanes=8 * dim, buffer_bytes=buf, hbm_bytes=hbm))
    return tuple(out)


DESIGNS = _grid()


def fake_result(acc: Accelerator) -> DesignResult:
    """A hand-written figure: more MACs, vector cores, buffer and HBM are faster; the smallest
    designs (few MACs, one vector core, 32 MiB of buffer) have no plan that fits, and as the
    smallest they would stay on a front that ignored feasibility."""
    macs = acc.tensor_cores * acc.array_rows * acc.array_cols
    if macs <= 16384 and acc.vector_cores == 1 and acc.buffer_bytes < 64 * MIB:
        return DesignResult(acc, area_mm2(acc), None, "nothing fits")
    throughput = (macs**0.9 * (1.0 + acc.array_rows / 10_000) * (1.15 if acc.vector_cores == 2 else 1.0)
                  * (1.05 if acc.buffer_bytes > 32 * MIB else 1.0)
                  * (1.02 if acc.hbm_bytes > 16 * GIB else 1.0))
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.NONE, stages=((0, 0),))
    figures = PlanResult(plan, 1.0 / throughput, throughput, 1024 * throughput, 0.5)
    return DesignResult(acc, area_mm2(acc), figures)


class FakeEvaluate:
    """ctx.evaluate over fake_result that records every call (and Optuna's verbosity then)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.verbosity: list[int] = []

    def __call__(self, accs: Sequence[Accelerator]) -> list[DesignResult]:
        self.calls.append([a.name for a in accs])
        self.verbosity.append(optuna.logging.get_verbosity())
        return [fake_result(a) for a in accs]

    @property
    def names(self) -> list[str]:
        return [name for call in self.calls for name in call]


def context(evaluate: FakeEvaluate, objective: Objective = Objective.THROUGHPUT,
            **kw: Any) -> StrategyContext:
    return StrategyContext(designs=DESIGNS, objective=objective, evaluate=evaluate,
                           score=lambda r: score(r, objective), **kw)


@pytest.fixture
def studies(monkeypatch: pytest.MonkeyPatch) -> list[optuna.Study]:
    """The studies the strategy creates, to look at what it told Optuna."""
    made: list[optuna.Study] = []
    create = optuna.create_study

    def capture(*args: Any, **kwargs: Any) -> optuna.Study:
        made.append(create(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(optuna, "create_study", capture)
    return made


def test_grid_encodes_only_the_varying_dimensions() -> None:
    grid = DesignGrid.of(DESIGNS)
    assert grid.names == ("tensor_cores", "array", "vector_cores", "buffer", "hbm")
    assert grid.values[1] == ((64, 64, 512), (128, 128, 1024), (256, 256, 2048))
    assert grid.size == 96 and len(grid.designs) == len(DESIGNS) == 64
    for point, acc in grid.designs.items():
        assert grid.point(grid.params(point)) == point
        assert grid.values[0][point[0]] == acc.tensor_cores
    one = DesignGrid.of(DESIGNS[:1])
    assert one.names == () and list(one.designs.values()) == [DESIGNS[0]]


def test_budget_batches_and_only_designs_of_the_space(studies: list[optuna.Study]) -> None:
    evaluate = FakeEvaluate()
    outcome = OptunaStrategy(batch_size=4).run(context(evaluate, budget=10, seed=3))
    names = {a.name for a in DESIGNS}
    assert [len(call) for call in evaluate.calls] == [4, 4, 2]  # several designs per ctx.evaluate
    assert len(evaluate.names) == len(set(evaluate.names)) == 10  # the budget, each design once
    assert set(evaluate.names) <= names
    assert [r.accelerator.name for r in outcome.evaluated] == evaluate.names
    assert outcome.note.startswith("TPE: 10 designs in 3 batches, budget reached")
    (study,) = studies
    grid = DesignGrid.of(DESIGNS)
    by_point = {grid.point(grid.params(p)): acc for p, acc in grid.designs.items()}
    outside = 0
    for trial in study.trials:  # combinations outside the space are pruned, the rest told their score
        acc = by_point.get(grid.point(trial.params))
        if acc is None:
            assert trial.state is TrialState.PRUNED
            outside += 1
        else:
            assert trial.state is TrialState.COMPLETE and acc.name in evaluate.names
            assert trial.value == pytest.approx(fake_result(acc).throughput_samples_per_s)
    assert outside > 0 and f"{outside} outside the space" in outcome.note


def test_same_seed_same_sequence() -> None:
    runs = []
    for seed in (7, 7, 8):
        evaluate = FakeEvaluate()
        OptunaStrategy().run(context(evaluate, budget=12, seed=seed))
        runs.append(evaluate.calls)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("parallelism", [1, 2, 3, 8])
def test_the_designs_visited_do_not_depend_on_the_workers(parallelism: int) -> None:
    reference, evaluate = FakeEvaluate(), FakeEvaluate()
    OptunaStrategy().run(context(reference, budget=14, parallelism=1))
    OptunaStrategy().run(context(evaluate, budget=14, parallelism=parallelism))
    assert [len(call) for call in evaluate.calls] == [4, 4, 4, 2]  # DEFAULT_BATCH, whatever the workers
    assert evaluate.calls == reference.calls


def test_full_budget_finds_the_optimum_and_quiets_optuna(studies: list[optuna.Study]) -> None:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        evaluate = FakeEvaluate()
        outcome = OptunaStrategy().run(context(evaluate, budget=len(DESIGNS), seed=1))
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG  # restored
    finally:
        optuna.logging.set_verbosity(before)
    assert set(evaluate.verbosity) == {optuna.logging.WARNING}  # quiet while it ran
    assert sorted(evaluate.names) == sorted(a.name for a in DESIGNS)  # every design, once
    best = max(outcome.evaluated, key=lambda r: r.throughput_samples_per_s)
    assert best.accelerator.name == max(DESIGNS, key=lambda a: fake_result(a).throughput_samples_per_s).name
    assert "every design visited" in outcome.note
    assert studies[0].best_value == pytest.approx(best.throughput_samples_per_s)


def test_bounds_prune_designs_that_cannot_win() -> None:
    evaluate = FakeEvaluate()
    asked: list[str] = []

    def bounds(accs: Sequence[Accelerator]) -> list[float]:  # a valid bound: the score itself
        asked.extend(a.name for a in accs)
        return [fake_result(a).throughput_samples_per_s for a in accs]

    outcome = OptunaStrategy().run(context(evaluate, budget=len(DESIGNS), bounds=bounds))
    optimum = max(fake_result(a).throughput_samples_per_s for a in DESIGNS)
    assert max(r.throughput_samples_per_s for r in outcome.evaluated) == optimum
    assert outcome.pruned > 0 and len(outcome.evaluated) + outcome.pruned == len(DESIGNS)
    assert len(set(evaluate.names)) == len(evaluate.names) == len(outcome.evaluated)
    skipped = set(asked) - set(evaluate.names)  # bounded, never evaluated
    assert len(skipped) == outcome.pruned and skipped <= {a.name for a in DESIGNS}
    assert all(fake_result(a).throughput_samples_per_s < optimum for a in DESIGNS if a.name in skipped)
    assert f"{outcome.pruned} pruned by bound" in outcome.note


def test_pareto_uses_nsga2_and_keeps_infeasible_designs_off_the_front(studies: list[optuna.Study]) -> None:
    evaluate = FakeEvaluate()
    outcome = OptunaStrategy().run(context(evaluate, Objective.PARETO, budget=30, seed=2))
    assert outcome.note.startswith("NSGA-II: 30 designs")
    assert len(set(evaluate.names)) == 30
    assert isinstance(studies[0].sampler, optuna.samplers.NSGAIISampler)
    assert any(r.best is None for r in outcome.evaluated)
    front = pareto_front(outcome.evaluated)
    assert front and all(r.best is not None for r in front)
    # Optuna's own front (constrained domination) is the front of the evaluated designs
    assert {tuple(t.values) for t in studies[0].best_trials} == {pareto_key(r) for r in front}


def test_pareto_with_the_whole_space_finds_the_whole_front(studies: list[optuna.Study]) -> None:
    evaluate = FakeEvaluate()

    def never(accs: Sequence[Accelerator]) -> list[float]:  # a bound that would prune every design
        return [0.0] * len(accs)

    outcome = OptunaStrategy().run(context(evaluate, Objective.PARETO, budget=len(DESIGNS), bounds=never))
    assert outcome.pruned == 0  # a slow design can still be on the front: nothing is pruned
    every = [fake_result(a) for a in DESIGNS]
    front = pareto_front(outcome.evaluated)
    assert {r.accelerator.name for r in front} == {r.accelerator.name for r in pareto_front(every)}
    keys = [pareto_key(r) for r in every]
    ignoring_feasibility = [r for r, k in zip(every, keys, strict=True)
                            if not any(dominates(o, k) for o in keys)]
    assert any(r.best is None for r in ignoring_feasibility)  # the smallest design, infeasible ...
    assert {tuple(t.values) for t in studies[0].best_trials} == {pareto_key(r) for r in front}  # ... kept off


def test_ask_limit_ends_the_loop(studies: list[optuna.Study]) -> None:
    evaluate = FakeEvaluate()
    outcome = OptunaStrategy(max_asks_per_design=1, stall_limit=1000).run(context(evaluate, budget=20))
    assert len(studies[0].trials) <= 20
    assert len(outcome.evaluated) < 20 and "ask limit of 20 reached" in outcome.note


def test_bad_settings() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        OptunaStrategy(batch_size=0)
    with pytest.raises(ConfigError, match="population_size"):
        OptunaStrategy(population_size=1)
    with pytest.raises(ConfigError, match="budget"):
        OptunaStrategy().run(context(FakeEvaluate(), budget=0))
    evaluate = FakeEvaluate()
    single = StrategyContext(designs=DESIGNS[:1], objective=Objective.THROUGHPUT, evaluate=evaluate,
                             score=lambda r: r.throughput_samples_per_s)
    assert len(OptunaStrategy().run(single).evaluated) == 1 and evaluate.calls == [[DESIGNS[0].name]]


@pytest.fixture(scope="module")
def tiny_search() -> tuple[SearchRequest, dict[Any, Any]]:
    model = load_model("gpt2-xl")
    request = SearchRequest((model,), load_space("tiny").designs(), load_cluster("tpuv4", 1024), 4096)
    return request, request.chains(model)


def test_real_run_on_the_tiny_space(tiny_search: tuple[SearchRequest, dict[Any, Any]]) -> None:
    request, chains = tiny_search
    done: dict[str, DesignResult] = {}

    def evaluate(accs: Sequence[Accelerator]) -> list[DesignResult]:
        todo = [a for a in accs if a.name not in done]
        results = evaluate_designs(todo, chains, request.cluster, request.global_batch, request.plan_space,
                                   SystolicCostModel(request.cluster))
        done.update((r.accelerator.name, r) for r in results)
        return [done[a.name] for a in accs]

    ctx = StrategyContext(designs=request.designs, objective=Objective.THROUGHPUT, evaluate=evaluate,
                          score=lambda r: r.throughput_samples_per_s, seed=0, budget=15)
    outcome = OptunaStrategy().run(ctx)
    assert len(outcome.evaluated) == 15 == len(done)
    best = max(outcome.evaluated, key=lambda r: r.throughput_samples_per_s)
    assert best.best is not None
    optimum = max(r.throughput_samples_per_s for r in evaluate(request.designs))  # exhaustive
    assert 0 < best.throughput_samples_per_s <= optimum
