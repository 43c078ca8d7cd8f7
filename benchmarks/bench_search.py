"""Exhaustive search of the full PHAZE space (issue #7 benchmark).

gpt2-xl on 1024 devices, global batch 4096, micro-batch {1, 2, 4, 8}, recompute none / full,
every pipeline schedule, ZeRO-1 and DP overlap on and off, HBM {32, 64, 80} GiB: the ``phaze``
space (PHAZE Table 1 with its area rule, 9477 designs).  Strategy ``exhaustive`` with the
provable pruning of :mod:`archplace.search.bounds`, on a local process pool.  Target: at most
15 minutes on 2 cores.

Prints: designs in the space, evaluated, pruned, wall time, designs settled (evaluated +
pruned) per second and evaluated per second, the best design and its throughput relative to
the tpuv4 preset under the same cluster, model and plan search.  With ``--plain`` it also runs
``exhaustive-all`` (every design evaluated) and checks that both give the same best design.

Run: ``.venv/bin/python benchmarks/bench_search.py [--jobs 2] [--plain]``
"""

from __future__ import annotations

import argparse
import time

from archplace import api
from archplace.search.executor import make_executor
from archplace.search.runner import run_search
from archplace.search.strategies import make_strategy

TARGET_S = 15 * 60
OPTIONS = dict(space="phaze", devices=1024, global_batch=4096, micro_batches=(1, 2, 4, 8),
               recompute=["both"])


def _run(strategy: str, jobs: int) -> None:
    request = api.search_request("gpt2-xl", **OPTIONS)
    start = time.perf_counter()
    with make_executor("local", jobs) as pool:
        result = run_search(request, make_strategy(strategy), executor=pool)
    wall = time.perf_counter() - start
    best = result.best
    settled = len(result.evaluated) + result.pruned
    print(f"[{strategy}] space {result.considered} designs: {len(result.evaluated)} evaluated, "
          f"{result.pruned} pruned, {wall:.1f} s on {jobs} workers "
          f"({wall / TARGET_S:.2f} of the 15-minute target)")
    print(f"[{strategy}] {settled / wall:.1f} designs settled/s, {len(result.evaluated) / wall:.1f} "
          f"evaluated/s")
    if best is None:
        print(f"[{strategy}] nothing fits")
        return
    plan = best.best.plan if best.best else None
    print(f"[{strategy}] best {best.accelerator.name}: {best.throughput_samples_per_s:,.1f} samples/s, "
          f"area {best.area_mm2:.1f} mm², plan {plan.tp if plan else '-'}/{plan.pp if plan else '-'}/"
          f"{plan.dp if plan else '-'} b={plan.micro_batch if plan else '-'}")
    if result.speedup_vs_baseline is not None and result.baseline is not None:
        print(f"[{strategy}] tpuv4 preset: {result.baseline.throughput_samples_per_s:,.1f} samples/s; "
              f"best / tpuv4 = {result.speedup_vs_baseline:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--plain", action="store_true", help="also evaluate every design")
    args = parser.parse_args()
    _run("exhaustive", args.jobs)
    if args.plain:
        _run("exhaustive-all", args.jobs)


if __name__ == "__main__":
    main()
