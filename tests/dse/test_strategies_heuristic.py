"""PHAZE's and WHAM's search strategies: hand-computed runs on synthetic grids, and a real tiny run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest

from archplace.cost.model import SystolicCostModel
from archplace.dse.evaluate import DesignResult, evaluate_designs
from archplace.dse.objective import Objective, score
from archplace.dse.request import SearchRequest
from archplace.dse.runner import run_search
from archplace.dse.strategies.phaze import PhazeStrategy, area_buckets, converged
from archplace.dse.strategies.wham import WhamStrategy
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.front import api
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.presets import load_accelerator, load_cluster
from archplace.hw.space import load_space
from archplace.placement.plan import Plan, Recompute
from archplace.placement.result import PlanResult
from archplace.workload.zoo import load_model

GIB = 2.0**30
MIB = 2.0**20
BASE = load_accelerator("tpuv4")


def design(tc: int = 1, dim: int = 8, vc: int = 1, buf_mib: int = 1, hbm_gib: int = 2) -> Accelerator:
    """A grid point; vector lanes are fixed so that area grows with every resource."""
    return dataclasses.replace(BASE, name=f"tc{tc}-d{dim}-vc{vc}-b{buf_mib}-h{hbm_gib}", tensor_cores=tc,
                               array_rows=dim, array_cols=dim, vector_cores=vc, vector_lanes=8,
                               buffer_bytes=buf_mib * MIB, hbm_bytes=hbm_gib * GIB)


def fake_result(acc: Accelerator, throughput: float | None) -> DesignResult:
    """A result with the given throughput (None: infeasible)."""
    if throughput is None:
        return DesignResult(acc, area_mm2(acc), None, "does not fit")
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.NONE, stages=((0, 0),))
    best = PlanResult(plan, 1.0 / throughput, throughput, throughput, 0.5)
    return DesignResult(acc, area_mm2(acc), best)


class Recorder:
    """A synthetic ``evaluate``: throughput from a hand-written function, every call recorded."""

    def __init__(self, designs: Sequence[Accelerator], throughput: Callable[[Accelerator], float | None]):
        self.designs = set(designs)
        self.throughput = throughput
        self.calls: list[list[Accelerator]] = []

    def __call__(self, accs: Sequence[Accelerator]) -> list[DesignResult]:
        assert all(acc in self.designs for acc in accs), "evaluated a design outside ctx.designs"
        self.calls.append(list(accs))
        return [fake_result(acc, self.throughput(acc)) for acc in accs]

    @property
    def evaluated(self) -> list[Accelerator]:
        return [acc for call in self.calls for acc in call]


def context(designs: Sequence[Accelerator], recorder: Recorder, budget: int | None = None,
            objective: Objective = Objective.THROUGHPUT, parallelism: int = 1) -> StrategyContext:
    return StrategyContext(designs=tuple(designs), objective=objective, evaluate=recorder,
                           score=lambda r: score(r, objective), budget=budget, parallelism=parallelism)


def best_of(results: Sequence[DesignResult]) -> DesignResult:
    return max(results, key=lambda r: r.throughput_samples_per_s)


# --- PHAZE -------------------------------------------------------------------------------------

# Twelve designs that differ only in tensor cores: area order = tensor-core order.
LINE = [design(tc=tc) for tc in range(1, 13)]
# Throughput by tensor cores, in PHAZE's visiting order (largest first): the per-bucket best reads
# 5, 6, 4, 7, 7, 3, then 2, 9, ...; with a window of 3 the last three are first non-increasing
# after tc7 (7 >= 7 >= 3), so PHAZE stops after 6 designs and never sees tc5 = 9.
LINE_THROUGHPUT = {12: 5.0, 11: 6.0, 10: 4.0, 9: 7.0, 8: 7.0, 7: 3.0, 6: 2.0, 5: 9.0, 4: 1.0, 3: 1.0,
                   2: 1.0, 1: 1.0}


def test_convergence_rule() -> None:
    assert converged([5, 6, 4], 3) is False
    assert converged([9, 7, 7, 3], 3) is True  # equal counts as non-increasing
    assert converged([7, 3], 3) is False  # too few buckets
    assert converged([1, 2, 1, 0], 2) is True


def test_phaze_visits_by_descending_area_and_stops_by_its_rule() -> None:
    recorder = Recorder(LINE, lambda acc: LINE_THROUGHPUT[acc.tensor_cores])
    outcome = PhazeStrategy(hysteresis=3, batch=1).run(context(LINE, recorder))
    assert [acc.tensor_cores for acc in recorder.evaluated] == [12, 11, 10, 9, 8, 7]
    assert all(len(call) == 1 for call in recorder.calls)  # batch 1: exactly PHAZE's sequence
    assert [r.accelerator.tensor_cores for r in outcome.evaluated] == [12, 11, 10, 9, 8, 7]
    assert best_of(outcome.evaluated).throughput_samples_per_s == 7.0
    assert "converged after 6 area buckets (6 of 12 designs)" in outcome.note


def test_phaze_batches_ahead_without_moving_the_stopping_point() -> None:
    recorder = Recorder(LINE, lambda acc: LINE_THROUGHPUT[acc.tensor_cores])
    outcome = PhazeStrategy(hysteresis=3).run(context(LINE, recorder, parallelism=4))
    assert [[acc.tensor_cores for acc in call] for call in recorder.calls] == [[12, 11, 10, 9], [8, 7, 6, 5]]
    # The designs evaluated ahead are set aside: the result is PHAZE's sequential one, the same
    # for any batch (so the better tc5, found only ahead of the stop, is not reported), and so is
    # the note (the two designs evaluated ahead are only logged).
    serial = PhazeStrategy(hysteresis=3, batch=1).run(context(LINE, Recorder(LINE, recorder.throughput)))
    assert "(6 of 12 designs)" in outcome.note and "ahead" not in outcome.note
    assert outcome.note == serial.note
    assert [r.accelerator for r in outcome.evaluated] == [r.accelerator for r in serial.evaluated]
    assert [r.accelerator.tensor_cores for r in outcome.evaluated] == [12, 11, 10, 9, 8, 7]


@pytest.mark.parametrize("batch", [2, 3, 5, 8, 12])
def test_phaze_returns_the_same_designs_for_any_batch(batch: int) -> None:
    runs = [PhazeStrategy(hysteresis=3, batch=b).run(
        context(LINE, Recorder(LINE, lambda acc: LINE_THROUGHPUT[acc.tensor_cores]))) for b in (1, batch)]
    assert [r.accelerator for r in runs[0].evaluated] == [r.accelerator for r in runs[1].evaluated]


def test_phaze_bucket_holds_hbm_variants_and_uses_its_best() -> None:
    # Same die, two HBM sizes: same area, so one bucket; the small HBM never fits.
    designs = [design(tc=tc, hbm_gib=h) for tc in range(1, 7) for h in (1, 2)]
    values = {6: 3.0, 5: 4.0, 4: 2.0, 3: 8.0, 2: 1.0, 1: 1.0}
    recorder = Recorder(designs, lambda acc: values[acc.tensor_cores] if acc.hbm_bytes == 2 * GIB else None)
    outcome = PhazeStrategy(hysteresis=2, batch=1).run(context(designs, recorder))
    assert [len(call) for call in recorder.calls] == [2, 2, 2]  # whole buckets, even with batch 1
    assert [{acc.tensor_cores for acc in call} for call in recorder.calls] == [{6}, {5}, {4}]
    assert best_of(outcome.evaluated).throughput_samples_per_s == 4.0  # 3, 4, 2: stop after tc4


def test_phaze_does_not_stop_before_anything_is_feasible() -> None:
    # PHAZE's solver would converge after the two largest (infeasible, -1 >= -1) buckets.
    designs = [design(tc=tc) for tc in range(1, 9)]
    values: dict[int, float | None] = {8: None, 7: None, 6: None, 5: None, 4: None, 3: 5.0, 2: 4.0, 1: 9.0}
    recorder = Recorder(designs, lambda acc: values[acc.tensor_cores])
    outcome = PhazeStrategy(hysteresis=2, batch=1).run(context(designs, recorder))
    assert [acc.tensor_cores for acc in recorder.evaluated] == [8, 7, 6, 5, 4, 3, 2]
    assert best_of(outcome.evaluated).throughput_samples_per_s == 5.0


def test_phaze_respects_the_budget() -> None:
    recorder = Recorder(LINE, lambda acc: LINE_THROUGHPUT[acc.tensor_cores])
    outcome = PhazeStrategy(hysteresis=3, batch=2).run(context(LINE, recorder, budget=3))
    assert [[acc.tensor_cores for acc in call] for call in recorder.calls] == [[12, 11], [10]]
    assert len(outcome.evaluated) == 3 and "budget of 3 designs exhausted" in outcome.note
    # A budget that cuts a bucket of HBM variants short.
    designs = [design(tc=tc, hbm_gib=h) for tc in range(1, 5) for h in (1, 2)]
    recorder = Recorder(designs, lambda acc: float(acc.tensor_cores))
    outcome = PhazeStrategy(batch=1).run(context(designs, recorder, budget=3))
    assert [len(call) for call in recorder.calls] == [2, 1] and len(outcome.evaluated) == 3


def test_phaze_explores_everything_without_convergence_and_notes_pareto() -> None:
    recorder = Recorder(LINE, lambda acc: float(13 - acc.tensor_cores))  # smaller is always better
    outcome = PhazeStrategy(hysteresis=3).run(context(LINE, recorder, objective=Objective.PARETO,
                                                      parallelism=5))
    assert len(outcome.evaluated) == 12 and "every design explored" in outcome.note
    assert "pareto" in outcome.note
    assert [len(b) for b in area_buckets(LINE + LINE[:2], 0.01)] == [1] * 12  # repeats kept once


# --- WHAM --------------------------------------------------------------------------------------

WEIGHTS = {"tc": {1: 0.0, 2: 5.0, 4: 9.0}, "dim": {8: 0.0, 16: 7.0}, "vc": {1: 0.0, 2: 2.0},
           "buf": {1: 0.0, 2: -1.0}}


def additive(acc: Accelerator) -> float | None:
    """10 + a weight per resource value; the 1 GiB HBM never fits."""
    if acc.hbm_bytes < 2 * GIB:
        return None
    return (10.0 + WEIGHTS["tc"][acc.tensor_cores] + WEIGHTS["dim"][acc.array_rows]
            + WEIGHTS["vc"][acc.vector_cores] + WEIGHTS["buf"][int(acc.buffer_bytes / MIB)])


def test_wham_greedy_growth_by_hand() -> None:
    # Budget (a stand-in for area): tensor cores x array dim <= 32.
    designs = [design(tc, dim, vc, buf, hbm) for tc in (1, 2, 4) for dim in (8, 16) for vc in (1, 2)
               for buf in (1, 2) for hbm in (1, 2) if tc * dim <= 32]
    recorder = Recorder(designs, additive)
    outcome = WhamStrategy(beam=1).run(context(designs, recorder))
    names = [[acc.name for acc in call] for call in recorder.calls]
    assert names == [
        ["tc1-d8-vc1-b1-h2"],  # the smallest design, largest HBM: 10
        ["tc2-d8-vc1-b1-h2", "tc1-d16-vc1-b1-h2", "tc1-d8-vc2-b1-h2", "tc1-d8-vc1-b2-h2"],  # 15 17 12 9
        ["tc2-d16-vc1-b1-h2", "tc1-d16-vc2-b1-h2", "tc1-d16-vc1-b2-h2"],  # 22 19 16 (no larger dim)
        ["tc2-d16-vc2-b1-h2", "tc2-d16-vc1-b2-h2"],  # 24 21 (tc4 x 16 is over budget)
        ["tc2-d16-vc2-b2-h2"],  # 23 < 24: stop
    ]
    best = best_of(outcome.evaluated)
    assert best.accelerator.name == "tc2-d16-vc2-b1-h2" and best.throughput_samples_per_s == 24.0
    assert best.throughput_samples_per_s == max(additive(acc) or 0.0 for acc in designs)
    assert "4 growth steps" in outcome.note and "no move improves" in outcome.note


def test_wham_keeps_the_moves_that_shorten_the_bottleneck_stage() -> None:
    """With ``ctx.pace`` only the moves that shorten the beam design's bottleneck stage are
    evaluated, the best ``moves_per_design`` of them by the gain (here: pace by hand, in seconds)."""
    designs = [design(tc, dim, vc, buf, hbm) for tc in (1, 2, 4) for dim in (8, 16) for vc in (1, 2)
               for buf in (1, 2) for hbm in (1, 2) if tc * dim <= 32]
    recorder = Recorder(designs, additive)

    def pace_s(acc: Accelerator) -> float:  # tensor cores and array size help, vector cores do not
        return 8.0 / (acc.tensor_cores * acc.array_rows) + (0.5 if acc.buffer_bytes > MIB else 0.0)

    asked: list[list[tuple[str, str]]] = []

    def pace(pairs: Sequence[tuple[Accelerator, DesignResult]]) -> list[float | None]:
        asked.append([(acc.name, result.accelerator.name) for acc, result in pairs])
        return [pace_s(acc) if result.best is not None else None for acc, result in pairs]

    ctx = dataclasses.replace(context(designs, recorder), pace=pace)
    outcome = WhamStrategy(beam=1, moves_per_design=1).run(ctx)
    names = [[acc.name for acc in call] for call in recorder.calls]
    # start 1 s; moves: tc2 0.5 s, d16 0.5 s (tie: smaller area first), vc2 1 s (no gain), b2 1.5 s
    assert asked[0] == [("tc1-d8-vc1-b1-h2", "tc1-d8-vc1-b1-h2"), ("tc2-d8-vc1-b1-h2", "tc1-d8-vc1-b1-h2"),
                        ("tc1-d16-vc1-b1-h2", "tc1-d8-vc1-b1-h2"), ("tc1-d8-vc2-b1-h2", "tc1-d8-vc1-b1-h2"),
                        ("tc1-d8-vc1-b2-h2", "tc1-d8-vc1-b1-h2")]
    first = min(("tc2-d8-vc1-b1-h2", "tc1-d16-vc1-b1-h2"),
                key=lambda name: (area_mm2(next(d for d in designs if d.name == name)), name))
    assert names[:2] == [["tc1-d8-vc1-b1-h2"], [first]]
    assert all(len(call) == 1 for call in recorder.calls)  # one move per step
    assert "moves timed" in outcome.note
    assert len(recorder.evaluated) < len({d.name for d in designs if d.hbm_bytes == 2 * GIB})


TABLE = {(1, 8): 10.0, (2, 8): 14.0, (4, 8): 20.0, (1, 16): 15.0, (2, 16): 13.0, (4, 16): 25.0,
         (1, 32): 12.0, (2, 32): 11.0}
TABLE_DESIGNS = [design(tc, dim) for tc, dim in TABLE]  # tensor cores x dim <= 64


def from_table(acc: Accelerator) -> float:
    return TABLE[(acc.tensor_cores, acc.array_rows)]


def test_wham_greedy_is_trapped_where_the_beam_is_not() -> None:
    greedy = Recorder(TABLE_DESIGNS, from_table)
    outcome = WhamStrategy(beam=1).run(context(TABLE_DESIGNS, greedy))
    assert [len(call) for call in greedy.calls] == [1, 2, 2]
    assert best_of(outcome.evaluated).throughput_samples_per_s == 15.0  # (1, 16): a local optimum

    beam = Recorder(TABLE_DESIGNS, from_table)
    outcome = WhamStrategy(beam=2).run(context(TABLE_DESIGNS, beam))
    keys = [[(acc.tensor_cores, acc.array_rows) for acc in call] for call in beam.calls]
    assert keys == [[(1, 8)], [(2, 8), (1, 16)], [(2, 16), (1, 32), (4, 8)], [(4, 16), (2, 32)]]
    assert best_of(outcome.evaluated).throughput_samples_per_s == 25.0  # the optimum
    assert "no move left" in outcome.note


def test_wham_respects_the_budget() -> None:
    recorder = Recorder(TABLE_DESIGNS, from_table)
    outcome = WhamStrategy(beam=2).run(context(TABLE_DESIGNS, recorder, budget=4))
    keys = [[(acc.tensor_cores, acc.array_rows) for acc in call] for call in recorder.calls]
    assert keys == [[(1, 8)], [(2, 8), (1, 16)], [(2, 16)]]
    assert len(outcome.evaluated) == 4 and "budget of 4 designs exhausted" in outcome.note


def test_wham_starts_from_every_minimal_design_and_skips_holes() -> None:
    # A lower area bound removes the smallest points: (1, 8) is gone, (2, 8) and (1, 16) are minimal.
    floor = [design(tc, dim) for tc, dim in TABLE if tc * dim >= 16]
    recorder = Recorder(floor, from_table)
    outcome = WhamStrategy(beam=2).run(context(floor, recorder))
    assert {(acc.tensor_cores, acc.array_rows) for acc in recorder.calls[0]} == {(2, 8), (1, 16)}
    assert best_of(outcome.evaluated).throughput_samples_per_s == 25.0
    # PHAZE's floor waived for one tensor core: (2, 8) is missing, so growing the tensor cores
    # of (1, 8) goes straight to (4, 8).
    holes = [design(tc, dim) for tc, dim in TABLE if tc == 1 or tc * dim >= 32]
    recorder = Recorder(holes, from_table)
    WhamStrategy(beam=1).run(context(holes, recorder))
    assert [(acc.tensor_cores, acc.array_rows) for acc in recorder.calls[1]] == [(4, 8), (1, 16)]


def test_wham_keeps_growing_while_nothing_fits() -> None:
    # Only designs with 4 tensor cores fit: the first steps see nothing feasible but go on.
    recorder = Recorder(TABLE_DESIGNS, lambda acc: from_table(acc) if acc.tensor_cores == 4 else None)
    outcome = WhamStrategy(beam=2).run(context(TABLE_DESIGNS, recorder, objective=Objective.PARETO))
    assert best_of(outcome.evaluated).throughput_samples_per_s == 25.0
    assert "pareto" in outcome.note


def test_strategies_on_an_empty_space() -> None:
    recorder = Recorder([], lambda acc: 1.0)
    assert PhazeStrategy().run(context([], recorder)).evaluated == ()
    assert WhamStrategy().run(context([], recorder)).evaluated == ()
    assert recorder.calls == []


# --- a real run on the tiny space --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_evaluate() -> Callable[[Sequence[Accelerator]], list[DesignResult]]:
    """Real evaluation: gpt2-xl on 1024 TPUv4-linked devices, global batch 4096, default plan space."""
    model = load_model("gpt2-xl")
    cluster = load_cluster("tpuv4", 1024)
    request = SearchRequest(models=(model,), designs=load_space("tiny").designs(), cluster=cluster,
                            global_batch=4096)
    chains = request.chains(model)

    def evaluate(accs: Sequence[Accelerator]) -> list[DesignResult]:
        return evaluate_designs(accs, chains, cluster, request.global_batch, request.plan_space,
                                SystolicCostModel(cluster))

    return evaluate


@pytest.fixture(scope="module")
def tiny_optimum(tiny_evaluate: Callable[[Sequence[Accelerator]], list[DesignResult]]) -> float:
    return max(r.throughput_samples_per_s for r in tiny_evaluate(load_space("tiny").designs()))


@pytest.mark.parametrize("strategy", [PhazeStrategy(), WhamStrategy()], ids=lambda s: s.name)
def test_real_run_on_the_tiny_space(strategy: PhazeStrategy | WhamStrategy, tiny_optimum: float,
                                    tiny_evaluate: Callable[[Sequence[Accelerator]], list[DesignResult]]
                                    ) -> None:
    designs = load_space("tiny").designs()
    calls: list[int] = []

    def evaluate(accs: Sequence[Accelerator]) -> list[DesignResult]:
        assert set(accs) <= set(designs)
        calls.append(len(accs))
        return tiny_evaluate(accs)

    ctx = StrategyContext(designs=designs, objective=Objective.THROUGHPUT, evaluate=evaluate,
                          score=lambda r: score(r, Objective.THROUGHPUT), parallelism=4)
    outcome = strategy.run(ctx)
    best = best_of(outcome.evaluated)
    assert best.best is not None
    assert 0.0 < best.throughput_samples_per_s / tiny_optimum <= 1.0
    assert sum(calls) >= len(outcome.evaluated) == len({r.accelerator for r in outcome.evaluated})
    assert max(calls) > 1  # evaluations were batched


class PaceProbe:
    """A strategy that evaluates the given designs and asks the runner for every pairwise pace."""

    name = "pace-probe"

    def __init__(self, designs: Sequence[Accelerator]) -> None:
        self.designs = list(designs)
        self.paces: dict[tuple[str, str], float | None] = {}
        self.results: list[DesignResult] = []

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        self.results = ctx.evaluate(self.designs)
        assert ctx.pace is not None
        pairs = [(acc, r) for r in self.results for acc in self.designs]
        self.paces = {(r.accelerator.name, acc.name): pace
                      for (acc, r), pace in zip(pairs, ctx.pace(pairs), strict=True)}
        return StrategyOutcome(tuple(self.results))


def test_runner_pace_is_the_slowest_stage_of_the_plan_on_that_design() -> None:
    request = api.search_request("gpt2-xl", space="tiny", devices=256, global_batch=512, seq_len=512,
                                 micro_batch_sizes=(1, 2), baseline=None)
    # two chips that differ only in their tensor cores
    small = next(acc for acc in request.designs if acc.tensor_cores == 2)
    large = next(acc for acc in request.designs if acc.tensor_cores == 8 and
                 (acc.array_rows, acc.vector_cores, acc.buffer_bytes) ==
                 (small.array_rows, small.vector_cores, small.buffer_bytes))
    probe = PaceProbe([small, large])
    run_search(request, probe)
    for result in probe.results:  # its own plan on its own chip: the evaluation's own figure
        assert result.best is not None
        own = probe.paces[(result.accelerator.name, result.accelerator.name)]
        assert own == max(t.total_s for t in result.best.stage_times)
    # the small chip's plan runs faster on four times the tensor cores, and the large chip's
    # plan slower on a quarter of them
    assert probe.paces[(small.name, large.name)] < probe.paces[(small.name, small.name)]
    assert probe.paces[(large.name, small.name)] > probe.paces[(large.name, large.name)]
