"""Per-layer scheduling (issue #5): CP-SAT against PHAZE's MILP on HiGHS, and the list scheduler.

For the forward and backward graphs of a llama2-7b block (sequence 4096, micro-batch 1,
TP 1 and 8) on the ``tpuv4`` preset (8 tensor and 2 vector cores), it prints:

* CP-SAT (default options: automatic workers, 10 s limit): median and worst wall time
  over ``--repeats`` seeds, whether optimality was proven every time (target: < 1 s,
  proven, on 2 cores);
* the list scheduler: makespan above the proven optimum (target: within 10 %) and time;
* PHAZE's MILP on HiGHS (``--highs-time-limit``, default 60 s): time, proven or not,
  and the ratio of its time to CP-SAT's median (a lower bound "≥" when HiGHS ran out
  of time).  HiGHS runs in a worker process; its time excludes the process start.

Run: ``.venv/bin/python benchmarks/bench_schedule.py [--repeats 5] [--highs-time-limit 60]
[--no-highs] [--model llama2-7b]``
"""

# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import argparse
import os
import statistics
import time

from archplace.scheduling.base import SolveOptions
from archplace.scheduling.list_scheduler import list_schedule
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.solve import layer_problem, solve_problem

TARGET_CPSAT_S, TARGET_LIST_GAP = 1.0, 0.10


def bench(name: str, problem: ScheduleProblem, repeats: int, highs_limit_s: float | None) -> None:
    runs = [solve_problem(problem, "cpsat", SolveOptions(seed=seed)) for seed in range(repeats)]
    times = [r.solve_time_s for r in runs]
    median_s = statistics.median(times)
    proven = all(r.optimal for r in runs)
    best = min(r.makespan_s for r in runs)
    started = time.perf_counter()
    listed = list_schedule(problem)
    list_s = time.perf_counter() - started
    gap = listed.makespan_s / best - 1
    print(f"{name}: {len(problem.ops)} ops, optimum {best * 1e3:.4f} ms "
          f"(lower bound {runs[0].lower_bound_s * 1e3:.4f} ms)")
    print(f"  cpsat: median {median_s:.3f} s, worst {max(times):.3f} s over {repeats} seeds, "
          f"proven {'every time' if proven else 'NOT every time'} "
          f"-> {'PASS' if proven and max(times) < TARGET_CPSAT_S else 'FAIL'} "
          f"(target < {TARGET_CPSAT_S:.0f} s; worst/target {max(times) / TARGET_CPSAT_S:.2f})")
    print(f"  list:  {listed.makespan_s * 1e3:.4f} ms, {100 * gap:+.2f} % vs optimum, "
          f"{list_s * 1e3:.1f} ms -> {'PASS' if gap <= TARGET_LIST_GAP else 'FAIL'} "
          f"(target within {100 * TARGET_LIST_GAP:.0f} %)")
    many = ScheduleProblem(problem.ops, 4096, 4096)
    started = time.perf_counter()
    list_schedule(many)
    many_s = time.perf_counter() - started
    print(f"  list on 4096+4096 cores: {many_s * 1e3:.1f} ms, {many_s / list_s:.2f}x the time on "
          f"{problem.tensor_cores}+{problem.vector_cores} (the core count should not matter)")
    if highs_limit_s is None:
        return
    highs = solve_problem(problem, "highs", SolveOptions(time_limit_s=highs_limit_s, workers=2))
    relation = "=" if highs.optimal else "≥"
    print(f"  highs (PHAZE MILP): {highs.solve_time_s:.2f} s, "
          f"{'proven' if highs.optimal else f'not proven (gap {100 * highs.gap:.1f} %)'}, "
          f"{highs.makespan_s * 1e3:.4f} ms; time ratio highs/cpsat {relation} "
          f"{highs.solve_time_s / median_s:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama2-7b")
    parser.add_argument("--hardware", default="tpuv4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--highs-time-limit", type=float, default=60.0)
    parser.add_argument("--no-highs", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU cores; CP-SAT workers: automatic (SolveOptions.workers = 0)")
    for tp in (1, 8):
        for phase in ("fwd", "bwd"):
            problem = layer_problem(args.model, args.hardware, "block", phase, tp=tp)
            bench(f"{args.model} block {phase} tp={tp} on {args.hardware}", problem, args.repeats,
                  None if args.no_highs else args.highs_time_limit)


if __name__ == "__main__":
    main()
