"""Where one design evaluation's time goes (issue #15): operator costs, layer schedules, placement.

Same search as ``bench_search.py`` (gpt2-xl on 1024 devices, global batch 4096, micro-batch
{1, 2, 4, 8}, recompute none / full, ``phaze-square`` space by default), on a random sample of its
core configurations, one evaluation per core configuration as the search's workers run them
(:func:`archplace.dse.evaluate.evaluate_designs` with a fresh cost model).  Prints, per core
configuration (CPU time, best of ``--repeat``):

* cost: every layer graph's operators costed on the scalar path
  (:meth:`~archplace.scheduling.problem.ScheduleProblem.from_graph`);
* schedule: every layer graph scheduled by the list scheduler (makespan only, as the search does);
* placement: the rest of the evaluation (plan search over the layer costs);

then the same operators costed through the vectorised path for the whole sample at once
(:class:`archplace.cost.tabulated.TabulatedCostModel`), per core configuration, its ratio to the
scalar path, and a check that both give the same floats; and the evaluation of the whole sample
in one call (operators costed once through the table) against one call per core configuration.

Run: ``.venv/bin/python benchmarks/bench_evaluate.py [--model gpt2-xl] [--space phaze] [--sample 24]``
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from archplace.cost.model import CostModel, SystolicCostModel
from archplace.cost.tabulated import TabulatedCostModel
from archplace.dse.evaluate import DesignResult, core_key, evaluate_designs
from archplace.dse.runner import model_chains
from archplace.front import api
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.placement.costs import CostKey
from archplace.placement.workflow import PlanGrid
from archplace.scheduling.list_scheduler import list_schedule_makespan_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.graph import OpGraph
from archplace.workload.layers import LayerChain

OPTIONS: dict[str, Any] = dict(devices=1024, global_batch=4096, micro_batch_sizes=(1, 2, 4, 8),
                               recomputes=["both"])


def _graphs(chains: Mapping[CostKey, LayerChain]) -> list[OpGraph]:
    """Every distinct non-empty layer graph of the chains (what an evaluation schedules)."""
    found: dict[int, OpGraph] = {}
    for chain in chains.values():
        for layer in chain.layers:
            for graph in (layer.fwd, layer.bwd):
                if graph.ops:
                    found.setdefault(id(graph), graph)
    return list(found.values())


def _cpu_s(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _problems(graphs: Iterable[OpGraph], acc: Accelerator, cost: CostModel) -> list[ScheduleProblem]:
    return [ScheduleProblem.from_graph(graph, acc, cost) for graph in graphs]


def _fresh_problems(graphs: Iterable[OpGraph], acc: Accelerator, cluster: Cluster) -> list[ScheduleProblem]:
    """Problems costed by a fresh cost model (as a search worker's task starts)."""
    return _problems(graphs, acc, SystolicCostModel(cluster))


def _makespans(problems: Iterable[ScheduleProblem]) -> list[float]:
    return [list_schedule_makespan_s(p) for p in problems]


def _evaluate(accs: list[Accelerator], chains: Mapping[CostKey, LayerChain], cluster: Cluster,
              batch: int, space: PlanGrid) -> list[DesignResult]:
    return evaluate_designs(accs, chains, cluster, batch, space, SystolicCostModel(cluster))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-xl")
    parser.add_argument("--space", default="phaze-square")
    parser.add_argument("--sample", type=int, default=24, help="core configurations timed")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    request = api.search_request(args.model, space=args.space, **OPTIONS)
    chains = model_chains(request)[args.model]
    groups: dict[Accelerator, list[Accelerator]] = {}
    for acc in request.designs:
        groups.setdefault(core_key(acc), []).append(acc)
    keys = random.Random(0).sample(list(groups), min(args.sample, len(groups)))
    graphs = _graphs(chains)
    cluster, batch, space = request.cluster, request.global_batch, request.plan_space
    ops = sum(len(g.ops) for g in graphs)
    print(f"[evaluate] {args.model}, {args.space}: {len(chains)} layer chains, {len(graphs)} distinct "
          f"layer graphs ({ops} operators), {len(keys)} core configurations sampled")

    cost_s = schedule_s = total_s = 0.0
    for key in keys:
        problems = _problems(graphs, key, SystolicCostModel(cluster))
        cost_s += _cpu_s(functools.partial(_fresh_problems, graphs, key, cluster), args.repeat)
        schedule_s += _cpu_s(functools.partial(_makespans, problems), args.repeat)
        total_s += _cpu_s(functools.partial(_evaluate, groups[key], chains, cluster, batch, space),
                          args.repeat)
    n = len(keys)
    placement_s = total_s - cost_s - schedule_s
    print(f"[evaluate] per core configuration: {total_s / n * 1e3:.1f} ms = cost {cost_s / n * 1e3:.1f} ms "
          f"({cost_s / total_s:.0%}) + schedule {schedule_s / n * 1e3:.1f} ms ({schedule_s / total_s:.0%}) "
          f"+ placement {placement_s / n * 1e3:.1f} ms ({placement_s / total_s:.0%}); "
          f"{n / total_s:.1f} evaluations/s on one core")

    designs = [groups[key][0] for key in keys]

    def tabulated() -> list[list[ScheduleProblem]]:
        table = TabulatedCostModel(designs, SystolicCostModel(cluster))
        return [_problems(graphs, acc, table) for acc in designs]

    vector_s = _cpu_s(tabulated, args.repeat)
    same = tabulated() == [_problems(graphs, acc, SystolicCostModel(cluster)) for acc in designs]
    print(f"[cost] scalar {cost_s / n * 1e3:.2f} ms, vectorised over the {n} configurations "
          f"{vector_s / n * 1e3:.2f} ms per core configuration (ratio {cost_s / vector_s:.1f}x; "
          f"{ops / (cost_s / n) / 1e3:.0f} k vs {ops / (vector_s / n) / 1e3:.0f} k operators/s); "
          f"same latencies: {same}")

    accs = [acc for key in keys for acc in groups[key]]
    together_s = _cpu_s(lambda: evaluate_designs(accs, chains, cluster, batch, space,
                                                 SystolicCostModel(cluster)), args.repeat)
    print(f"[evaluate] all {n} core configurations in one call: {together_s / n * 1e3:.1f} ms per core "
          f"configuration (one call each: {total_s / n * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
