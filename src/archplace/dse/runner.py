"""Run a search: a strategy explores the space; evaluations go through an executor and a store.

The runner owns everything strategies share: the layer chains (extracted once per model and
(tp, micro-batch, SP) key), one task per core configuration (so a design's HBM variants share
their layer schedules), the SQLite store (each finished design is written at once, and a
re-run reads finished designs back instead of evaluating them), the bounds used for pruning,
the re-timing of a plan on another design (``pace``, for WHAM's moves), the progress reports,
the baseline design and the CP-SAT re-evaluation of the reported designs.

Nothing a search returns depends on the executor, its number of workers or the machine's load:
strategies decide from whole batches of results (in input order), and the CP-SAT re-evaluation
stops at a work limit (:data:`EXACT_WORK_LIMIT`), not at a wall-clock time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.executor import shared
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import PRECISIONS, Fp8CostModel, Precision
from archplace.dse.bounds import DesignBound, memory_floor_bytes
from archplace.dse.bounds_many import design_bounds
from archplace.dse.comm_floor import PlanLimits
from archplace.dse.evaluate import DesignResult, core_key, evaluate_designs, geomean
from archplace.dse.objective import Objective, rank, score
from archplace.dse.request import SearchRequest, SearchResult
from archplace.dse.store import ResultStore, SearchLabel
from archplace.dse.strategy import Strategy, StrategyContext
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.placement.costs import CostKey, costs_by_key, list_makespan_s
from archplace.placement.pipeline import device_paces, stage_times
from archplace.placement.workflow import PlanGrid
from archplace.scheduling.base import SolveOptions
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.solve import solve_problem
from archplace.workload.layers import LayerChain

log = logging.getLogger(__name__)

Chains = Mapping[str, Mapping[CostKey, LayerChain]]
"""Layer chains by model name, then by :class:`~archplace.placement.plan.CostKey` (TP, micro-batch,
SP, CP, EP, expert-TP)."""

EXACT_WORK_LIMIT = 0.25
"""CP-SAT's deterministic time limit per layer graph when re-evaluating the reported designs
exactly (:class:`~archplace.scheduling.base.SolveOptions` ``deterministic_time``).  A work limit,
not a time limit, so the figures do not depend on the machine's load; one CP-SAT worker per solve.
Its wall-clock cost varies by problem: on the hardest layer graphs of gpt2-xl and llama2-7b
searches (2 to 16 tensor cores, a loaded 2-core machine) 0.4 to 2.5 s, where 0.5 took up to 18 s
(and gained at most 4 % of the makespan, on llama2-7b's backward block)."""

BOUND_CHUNK = 8192
"""Core configurations bounded at once (:meth:`_Session.bounds`): bounds the arrays' memory (a few
hundred MB for the largest models) and gives a progress report per chunk."""

EXACT_OPTIONS = SolveOptions(workers=1, deterministic_time=EXACT_WORK_LIMIT)
"""How the re-evaluation runs CP-SAT (seed 0)."""


@dataclass(frozen=True)
class Tick:
    """Progress of a search, reported after every finished (or pruned) batch of designs.

    Attributes:
        evaluated: designs evaluated so far (including those read back from the store).
        pruned: designs ruled out by a bound so far.
        total: designs in the space.
        best: the best design so far, or None.
        objective: what "best" means.
        bounded: core configurations bounded so far (:mod:`archplace.dse.bounds`).
        search: index of the search in a run of several (one per model,
            :func:`archplace.front.api.search_each`), from 0.
        bounds_computed: core configurations whose bounds were computed so far (the others were
            read back from the store).
    """

    evaluated: int
    pruned: int
    total: int
    best: DesignResult | None
    objective: Objective
    bounded: int = 0
    search: int = 0
    bounds_computed: int = 0


Progress = Callable[[Tick], None]


def exact_makespan_s(problem: ScheduleProblem) -> float:
    """Makespan of CP-SAT's schedule (proven optimal unless the work limit stops it), never worse
    than the list schedule's; the same on any load (:data:`EXACT_OPTIONS`)."""
    exact = solve_problem(problem, "cpsat", EXACT_OPTIONS)
    return min(exact.makespan_s, list_makespan_s(problem))


def _evaluate_task(accs: list[Accelerator], chains: Chains, cluster: Cluster, global_batch: int,
                   space: PlanGrid, exact: bool) -> list[DesignResult]:
    """Designs sharing a core configuration, in a worker (a fresh cost model per task)."""
    cost = SystolicCostModel(cluster)
    makespan = exact_makespan_s if exact else list_makespan_s
    per_model = [evaluate_designs(accs, by_key, cluster, global_batch, space, cost, makespan)
                 for by_key in chains.values()]
    if len(per_model) == 1:
        return per_model[0]
    named = [[dataclasses.replace(r, model=name) for r in results]
             for name, results in zip(chains, per_model, strict=True)]
    return [DesignResult.combine(parts) for parts in zip(*named, strict=True)]


def _exact_task(items: list[tuple[Accelerator, Chains]], cluster: Cluster, global_batch: int,
                space: PlanGrid) -> list[DesignResult]:
    """Designs re-evaluated with CP-SAT layer schedules, each with the chains of its best plans."""
    return [_evaluate_task([acc], chains, cluster, global_batch, space, True)[0] for acc, chains in items]


def _bound_many_task(cores: list[Accelerator], chains: Chains, cluster: Cluster, grad_bytes: int,
                     precisions: tuple[Precision, ...] = PRECISIONS,
                     limits: PlanLimits | None = None) -> list[list[DesignBound]]:
    """Bounds of each core configuration, one per model (``grad_bytes`` and ``precisions``: the
    plan space's; ``limits``: its communication floor), all at once in NumPy
    (:mod:`archplace.dse.bounds_many`: bit for bit those of
    :func:`~archplace.dse.bounds.design_bound`)."""
    cost = SystolicCostModel(cluster, cache_size=0)
    per_model = [design_bounds(cores, by_key, cluster.devices, cost, grad_bytes=grad_bytes,
                               fp8=Precision.FP8 in precisions, bf16=Precision.BF16 in precisions,
                               limits=limits)
                 for by_key in chains.values()]
    return [list(row) for row in zip(*per_model, strict=True)] if per_model else [[] for _ in cores]


def plan_limits(request: SearchRequest) -> PlanLimits:
    """The :class:`~archplace.dse.comm_floor.PlanLimits` of a search request."""
    space = request.plan_space
    return PlanLimits.of(request.cluster, request.global_batch, space.schedules, space.chunks,
                         space.zero_stages, space.grad_reduce_dtype.bytes, space.grad_sync)


def _pace_task(pairs: list[tuple[Accelerator, DesignResult]], chains: Chains, cluster: Cluster,
               grad_bytes: int) -> list[float | None]:
    """:meth:`_Session.pace` of a batch, in a worker (``grad_bytes``: the plan space's; each
    plan's layers at its precision)."""
    cost = SystolicCostModel(cluster)
    fp8_cost = Fp8CostModel(cost)
    out: list[float | None] = []
    for acc, result in pairs:
        if result.best is None:
            out.append(None)
            continue
        paces = []
        for part, (name, by_key) in zip(result.components or (result,), _plan_chains(result, chains).items(),
                                        strict=True):
            assert part.best is not None, name
            plan = part.best.plan
            costs = (costs_by_key(by_key, acc, cost) if plan.precision is Precision.BF16
                     else costs_by_key(by_key, acc, cost, fp8_cost=fp8_cost))
            layers = costs[CostKey(plan.tp, plan.micro_batch, plan.sp, plan.cp, plan.ep, plan.etp)]
            paces.append(max(pace for pace, _ in device_paces(stage_times(layers, plan, cluster,
                                                                          grad_bytes=grad_bytes),
                                                              plan.pp)))
        out.append(geomean(paces))
    return out


def _bound_score(bounds: Sequence[DesignBound], acc: Accelerator, objective: Objective) -> float:
    if objective is Objective.PER_WATT:
        return geomean([b.per_watt(acc) for b in bounds])
    return geomean([b.throughput(acc) for b in bounds])


class _Session:
    """One search run: the evaluate and bounds callables handed to the strategy."""

    def __init__(self, request: SearchRequest, chains: Chains, executor: Executor | None,
                 store: ResultStore | None, progress: Progress | None) -> None:
        self.request = request
        self.chains = chains
        self.executor = executor
        self.task_chains = shared(executor, chains)  # the chains as the argument of the tasks
        self.store = store
        self.progress = progress
        self.key = ""
        self.done: dict[str, DesignResult] = {}
        if store is not None:
            self.key = request.key
            self.done = store.finished(self.key)  # read (and checked) before the store is written
            label = SearchLabel(tuple(m.name for m in request.models), request.objective,
                                request.cluster.devices, request.global_batch)
            store.begin(request.identity, label)
        self.results: dict[str, DesignResult] = {}
        self.pruned = 0
        self.best: DesignResult | None = None
        self.bound_cache: dict[Accelerator, list[DesignBound]] = {}
        self.bounds_computed = 0
        self.stored_bounds: dict[str, dict[int, tuple[float, float]]] | None = None
        self.recorded: set[str] = set()

    def _run(self, fn: Callable[..., list[Any]], batches: Sequence[list[Any]], *args: object
             ) -> Iterator[tuple[list[Any], list[Any]]]:
        """``fn(batch, *args)`` for each batch, on the executor; yields (batch, result) as each
        finishes, so results are stored before the next one is waited for.  Callers must not let
        the finishing order matter (they collect every batch before deciding anything)."""
        if self.executor is None:
            for batch in batches:
                yield batch, fn(batch, *args)
            return
        futures = {self.executor.submit(fn, batch, *args): batch for batch in batches}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def _finish(self, result: DesignResult, fresh: bool) -> None:
        name = result.accelerator.name
        self.results[name] = result
        if fresh and self.store is not None:
            self.store.record(self.key, name, result.to_dict(), result.throughput_samples_per_s,
                              result.area_mm2, result.best is not None)
        if result.best is not None and (self.best is None or rank([result, self.best],
                                                                  self.request.objective)[0] is result):
            self.best = result

    def tick(self) -> None:
        if self.progress is not None:
            self.progress(Tick(len(self.results), self.pruned, len(self.request.designs), self.best,
                               self.request.objective, len(self.bound_cache),
                               bounds_computed=self.bounds_computed))

    def evaluate(self, designs: Sequence[Accelerator]) -> list[DesignResult]:
        """Strategy callback: results in input order; earlier results are not recomputed."""
        todo: dict[Accelerator, list[Accelerator]] = {}
        for acc in designs:
            name = acc.name
            if name in self.results:
                continue
            if name in self.done:
                self._finish(self.done[name], fresh=False)
                continue
            group = todo.setdefault(core_key(acc), [])
            if acc not in group:
                group.append(acc)
        req = self.request
        for _batch, results in self._run(_evaluate_task, list(todo.values()), self.task_chains, req.cluster,
                                         req.global_batch, req.plan_space, False):
            for result in results:
                self._finish(result, fresh=True)
            self.tick()
        if not todo:
            self.tick()
        return [self.results[acc.name] for acc in designs]

    def bounds(self, designs: Sequence[Accelerator]) -> list[float]:
        """Strategy callback: upper bounds of the objective (:mod:`archplace.dse.bounds`).

        Bounds stored for this search are read back; the others are computed for all their core
        configurations at once, in this process, in chunks of :data:`BOUND_CHUNK`
        (:mod:`archplace.dse.bounds_many`), and stored."""
        keys = [core_key(acc) for acc in designs]
        self._read_bounds(designs, keys)
        cores = list(dict.fromkeys(key for key in keys if key not in self.bound_cache))
        grad_bytes = self.request.plan_space.grad_reduce_dtype.bytes
        for start in range(0, len(cores), BOUND_CHUNK):
            batch = cores[start:start + BOUND_CHUNK]
            found = _bound_many_task(batch, self.chains, self.request.cluster, grad_bytes,
                                     self.request.plan_space.precisions, plan_limits(self.request))
            self.bound_cache.update(zip(batch, found, strict=True))
            self.bounds_computed += len(batch)
            self.tick()
        if self.store is not None:
            known = self.stored_bounds or {}
            models = set(range(len(self.chains)))
            rows: list[tuple[str, int, float, float]] = []
            for acc, key in zip(designs, keys, strict=True):
                if acc.name in self.recorded or set(known.get(acc.name, {})) == models:
                    continue
                self.recorded.add(acc.name)
                rows.extend((acc.name, model, bound.samples_per_s, bound.samples_per_s_per_device)
                            for model, bound in enumerate(self.bound_cache[key]))
            if rows:
                self.store.record_bounds(self.key, rows)
        return [_bound_score(self.bound_cache[key], acc, self.request.objective)
                for acc, key in zip(designs, keys, strict=True)]

    def _read_bounds(self, designs: Sequence[Accelerator], keys: Sequence[Accelerator]) -> None:
        """Fill :attr:`bound_cache` from the store's bounds of ``designs`` (``keys``: their core
        keys; the store is read once per session)."""
        if self.store is None:
            return
        if self.stored_bounds is None:
            self.stored_bounds = self.store.bounds(self.key)
        if not self.stored_bounds:
            return
        grad_bytes = self.request.plan_space.grad_reduce_dtype.bytes
        devices = self.request.cluster.devices
        floors = [memory_floor_bytes(by_key, devices, grad_bytes=grad_bytes)
                  for by_key in self.chains.values()]
        models = set(range(len(floors)))
        for acc, core in zip(designs, keys, strict=True):
            stored = self.stored_bounds.get(acc.name)
            if core in self.bound_cache or stored is None or set(stored) != models:
                continue
            self.bound_cache[core] = [DesignBound(*stored[model], floor)
                                      for model, floor in enumerate(floors)]

    def exact(self, results: Sequence[DesignResult]) -> list[DesignResult]:
        """``results`` re-evaluated with CP-SAT layer schedules for each model's best plan's
        (tp, micro-batch, SP) key, on the executor (one design per task), in input order."""
        req = self.request
        batches = [[(r.accelerator, _plan_chains(r, self.chains))] for r in results]
        found: dict[int, DesignResult] = {}
        for batch, (result,) in self._run(_exact_task, batches, req.cluster, req.global_batch,
                                          req.plan_space):
            found[id(batch)] = result
        return [found[id(batch)] for batch in batches]

    def pace(self, pairs: Sequence[tuple[Accelerator, DesignResult]]) -> list[float | None]:
        """Strategy callback: for each (design, result), the pace of the result's best plan run on
        the design (its slowest pipeline segment per micro-batch, s; geometric mean over the
        models), with list layer schedules; None when the result is infeasible."""
        jobs = _parallelism(self.executor)
        size = max(1, -(-len(pairs) // jobs))
        batches = [list(pairs[i:i + size]) for i in range(0, len(pairs), size)]
        found: dict[int, list[float | None]] = {}
        for batch, paces in self._run(_pace_task, batches, self.task_chains, self.request.cluster,
                                      self.request.plan_space.grad_reduce_dtype.bytes):
            found[id(batch)] = paces
        return [pace for batch in batches for pace in found[id(batch)]]


def _parallelism(executor: Executor | None) -> int:
    if executor is None:
        return 1
    workers = getattr(executor, "_max_workers", None)
    return int(workers) if isinstance(workers, int) and workers > 0 else 2


def _plan_chains(result: DesignResult, chains: Chains) -> Chains:
    """The chains of the cost key (TP, micro-batch, SP, CP, EP, expert-TP) of each model's best
    plan in ``result``: the exact re-evaluation schedules only those layer graphs with CP-SAT."""
    parts = result.components or (result,)
    out: dict[str, dict[CostKey, LayerChain]] = {}
    for name, part in zip(chains, parts, strict=True):
        assert part.best is not None
        plan = part.best.plan
        key = CostKey(plan.tp, plan.micro_batch, plan.sp, plan.cp, plan.ep, plan.etp)
        out[name] = {key: chains[name][key]}
    return out


def model_chains(request: SearchRequest, jobs: int = 1) -> dict[str, dict[CostKey, LayerChain]]:
    """Layer chains of every model of ``request`` (extracted once, from the graph cache; the
    missing ones traced on a local pool of ``jobs`` processes when more than one, with the same
    chains).  The pool is its own, closed once the chains are there: the search's workers never
    import torch (a traced model costs a worker hundreds of MB for the rest of the search)."""
    return request.all_chains(jobs)


def stored_designs(store: ResultStore, request: SearchRequest) -> int:
    """Designs of ``request`` already in ``store``: those a re-run reads back instead of evaluating
    (counted, not read: fast whatever their number once :attr:`SearchRequest.key` is known)."""
    return store.count(request.key)


def run_search(request: SearchRequest, strategy: Strategy, *, progress: Progress | None = None,
               executor: Executor | None = None, store: ResultStore | None = None,
               exact_top: int = 0, seed: int = 0, budget: int | None = None,
               keep: int | None = None) -> SearchResult:
    """Explore ``request``'s designs with ``strategy``.

    Args:
        request: the search.
        strategy: exhaustive, phaze, wham, optuna (:mod:`archplace.dse.strategies`).
        progress: called in this process after every finished batch.
        executor: where evaluations run (default: in this process, one after another).
        store: SQLite store; each result is written as it finishes, and designs already in
            the store for the same request are read back instead of evaluated.
        exact_top: re-evaluate the best this-many designs with CP-SAT layer schedules (for the
            TP width, micro-batch and SP setting of each one's best plan; the rest of the plan
            is searched again), each layer graph with CP-SAT's work limit
            :data:`EXACT_WORK_LIMIT`, so the figures do not depend on the load.
        seed: random seed of stochastic strategies.
        budget: the most designs the strategy may evaluate (None: its default).
        keep: how many of the best designs must be exactly the best of the space, in order (the
            rows a caller shows; the pruned exhaustive strategy proves that many); default
            ``max(1, exact_top)``.

    Raises:
        ConfigError, ExtractionError: bad model or options, a negative ``exact_top``, ``keep``
            below 1, a store that is not a result store.
    """
    if isinstance(exact_top, bool) or not isinstance(exact_top, int) or exact_top < 0:
        raise ConfigError(f"exact_top must be a whole number >= 0, got {exact_top!r}")
    keep = max(1, exact_top) if keep is None else keep
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"keep must be a whole number >= 1, got {keep!r}")
    chains = model_chains(request, _parallelism(executor))
    session = _Session(request, chains, executor, store, progress)
    context = StrategyContext(designs=request.designs, objective=request.objective, evaluate=session.evaluate,
                              score=lambda r: score(r, request.objective), seed=seed, budget=budget,
                              bounds=session.bounds, parallelism=_parallelism(executor), pace=session.pace,
                              keep=keep)
    outcome = strategy.run(context)
    session.pruned = outcome.pruned
    session.tick()
    # the designs the strategy returns, not every design it had evaluated: a strategy may evaluate
    # ahead for its workers and set results aside (phaze), and what it reports must not depend on them
    ranked = rank(list({r.accelerator.name: r for r in outcome.evaluated}.values()), request.objective)
    log.info("%s: %d designs evaluated, %d pruned", strategy.name, len(ranked), outcome.pruned)
    baseline = None
    if request.baseline is not None:
        baseline = _evaluate_task([request.baseline], chains, request.cluster, request.global_batch,
                                  request.plan_space, False)[0]
    exact: tuple[DesignResult, ...] = ()
    if exact_top > 0:
        exact = rank(session.exact([r for r in ranked[:exact_top] if r.best is not None]), request.objective)
    space = request.plan_space
    return SearchResult(evaluated=ranked, model=", ".join(m.name for m in request.models),
                        devices=request.cluster.devices, global_batch=request.global_batch,
                        objective=request.objective, baseline=baseline, strategy=strategy.name,
                        considered=len(request.designs), pruned=outcome.pruned, note=outcome.note,
                        exact=exact, fuse=space.fuse, attention=space.attention.value,
                        kernels=space.kernels.value, capacity_factor=space.capacity_factor,
                        expert_load_imbalance=space.expert_load_imbalance)
