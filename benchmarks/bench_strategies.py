"""Search strategies on the tiny space: designs evaluated, wall time and quality of the answer.

Setting: gpt2-xl on 1024 devices linked as TPUv4s, global batch 4096, the default plan space of
a search (``archplace.dse.request.DEFAULT_PLAN_SPACE``), the 43 designs of ``spaces/tiny.yaml``,
objective throughput.  Three runs, each through ``run_search`` on the same executor and without a
result store (so nothing is shared between them):

1. plain exhaustive evaluation (every design, no pruning; a strategy defined here), whose best
   throughput is the optimum the other two are compared with;
2. ``PhazeStrategy()`` (PHAZE's area-descending exploration and stopping rule);
3. ``WhamStrategy()`` (WHAM's growth heuristic, beam 3).

For each it prints the designs evaluated, the wall time, the best design, its throughput and
its ratio to the exhaustive optimum, and the strategy's note.

Run: ``.venv/bin/python benchmarks/bench_strategies.py [--workers N]`` (N = 0: in this process).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import Executor, ProcessPoolExecutor

from archplace.dse.request import SearchRequest
from archplace.dse.runner import run_search
from archplace.dse.strategies.phaze import PhazeStrategy
from archplace.dse.strategies.wham import WhamStrategy
from archplace.dse.strategy import Strategy, StrategyContext, StrategyOutcome
from archplace.hw.presets import load_cluster
from archplace.hw.space import load_space
from archplace.workload.zoo import load_model


class PlainExhaustive:
    """Every design in one batch, no bound, no pruning: the reference."""

    name = "exhaustive-plain"

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        return StrategyOutcome(tuple(ctx.evaluate(ctx.designs)), note="every design evaluated")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="process-pool workers (0: in process)")
    args = parser.parse_args()

    model = load_model("gpt2-xl")
    designs = load_space("tiny").designs()
    request = SearchRequest(models=(model,), designs=designs, cluster=load_cluster("tpuv4", 1024),
                            global_batch=4096)
    request.chains(model)  # fill the graph cache outside the timed runs
    executor: Executor | None = ProcessPoolExecutor(args.workers) if args.workers > 0 else None
    print(f"gpt2-xl, 1024 devices, global batch 4096, tiny space ({len(designs)} designs), "
          f"{args.workers or 'no'} worker processes")
    strategies: list[Strategy] = [PlainExhaustive(), PhazeStrategy(), WhamStrategy()]
    optimum = 0.0
    try:
        for strategy in strategies:
            start = time.perf_counter()
            result = run_search(request, strategy, executor=executor)
            wall = time.perf_counter() - start
            best = result.best
            throughput = best.throughput_samples_per_s if best is not None else 0.0
            if isinstance(strategy, PlainExhaustive):
                optimum = throughput
            ratio = throughput / optimum if optimum > 0 else float("nan")
            name = best.accelerator.name if best is not None else "(nothing feasible)"
            print(f"{strategy.name:17s} designs {len(result.evaluated):3d}  wall {wall:6.2f} s  "
                  f"best {name:36s} {throughput:9.1f} samples/s  ratio {ratio:.3f}")
            print(f"{'':17s} {result.note}")
    finally:
        if executor is not None:
            executor.shutdown()


if __name__ == "__main__":
    main()
