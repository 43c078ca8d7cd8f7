"""Exhaustive search of a PHAZE space (issue #7 and #15 benchmark).

gpt2-xl on 1024 devices, global batch 4096, micro-batch {1, 2, 4, 8}, recompute none / full,
every pipeline schedule, ZeRO-1 and DP overlap on and off, HBM {32, 64, 80} GiB, over the
``phaze-square`` space (square arrays, 10,302 designs) or ``--space phaze`` (PHAZE's rectangular
space, 88,080 designs).  Strategy ``exhaustive`` with the provable pruning of
:mod:`archplace.dse.bounds`, on a local process pool.  Target: at most 15 minutes on 2 cores.

Prints, first, the pruning bounds' cost: the scalar bound
(:func:`archplace.dse.bounds.design_bound`, one core configuration at a time, timed on a
sample) against the vectorised one (:mod:`archplace.dse.bounds_many`, every core
configuration of the space at once), per design, and their ratio -- the two are equal bit for bit,
which the benchmark checks on the sample.  Then the search: designs in the space, evaluated,
pruned, wall time, the time until every design was bounded, designs settled (evaluated + pruned)
per second and evaluated per second, the best design and its throughput relative to the tpuv4
preset under the same cluster, model and plan search.  With ``--plain`` it also runs
``exhaustive-all`` (every design evaluated) and checks that both give the same best design.

With ``--four`` it runs issue #15's target instead: PHAZE's four models (bert-large, gpt2-xl,
opt-350m, llama2-7b) jointly (the geometric mean of their throughputs) on 1024 devices, global batch
4096, micro-batch {1, 2, 4, 8}, recompute none / full, the TP widths every model allows within a
node, over ``--space`` (``phaze``: 88,080 designs), with the pruned exhaustive strategy on a local
pool of ``--jobs`` workers writing a result store; it prints designs/s, designs pruned, wall time
and peak memory (resident set of this process and of its largest worker), and a progress line
every ``--every`` seconds (so a run stopped early still tells its rate).  With ``--dask`` it runs
the same search again on a local Dask cluster of 2 workers into a second store and checks that
the two stores hold the same results (and the same bounds).

Run: ``.venv/bin/python benchmarks/bench_search.py [--space phaze] [--jobs 2] [--plain] [--no-search]``
or ``.venv/bin/python benchmarks/bench_search.py --four --space phaze [--jobs 2] [--dask] [--store DIR]
[--cluster phaze-paper]``
"""

from __future__ import annotations

import argparse
import random
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

from archplace.base.executor import make_executor
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import Fp8CostModel, Precision
from archplace.dse.bounds import design_bound
from archplace.dse.bounds_many import design_bounds
from archplace.dse.evaluate import core_key
from archplace.dse.request import SearchRequest
from archplace.dse.runner import BOUND_CHUNK, Tick, model_chains, plan_limits, run_search
from archplace.dse.store import ResultStore
from archplace.dse.strategies import make_strategy
from archplace.front import api

TARGET_S = 15 * 60
OPTIONS = dict(devices=1024, global_batch=4096, micro_batch_sizes=(1, 2, 4, 8), recomputes=["both"])
PHAZE_MODELS = ("bert-large", "gpt2-xl", "opt-350m", "llama2-7b")
"""The models PHAZE searches jointly (its multi-model objective), with Megatron GPT-3 left out."""
SCALAR_SAMPLE = 40
"""Core configurations the scalar bound is timed on (it takes the whole space hours at PHAZE's size)."""


def _bounds(request: SearchRequest) -> None:
    """Time the scalar and the vectorised bounds of the space's core configurations."""
    chains = model_chains(request)["gpt2-xl"]
    cores = list(dict.fromkeys(core_key(a) for a in request.designs))
    space = request.plan_space
    grad_bytes, fp8 = space.grad_reduce_dtype.bytes, Precision.FP8 in space.precisions
    devices = request.cluster.devices
    limits = plan_limits(request)
    start = time.perf_counter()
    many = []
    for first in range(0, len(cores), BOUND_CHUNK):
        many.extend(design_bounds(cores[first:first + BOUND_CHUNK], chains, devices,
                                  SystolicCostModel(request.cluster, cache_size=0), grad_bytes=grad_bytes,
                                  fp8=fp8, bf16=Precision.BF16 in space.precisions, limits=limits))
    vector_s = time.perf_counter() - start
    sample = random.Random(0).sample(range(len(cores)), min(SCALAR_SAMPLE, len(cores)))
    cost = SystolicCostModel(request.cluster)
    start = time.perf_counter()
    fp8_cost = Fp8CostModel(cost) if fp8 else None
    scalar = [design_bound(cores[i], chains, devices, cost, grad_bytes=grad_bytes, fp8_cost=fp8_cost,
                           bf16=Precision.BF16 in space.precisions, limits=limits) for i in sample]
    scalar_per_core_s = (time.perf_counter() - start) / len(sample)
    same = all(s == many[i] for s, i in zip(scalar, sample, strict=True))
    per_design = len(cores) / len(request.designs)  # core configurations per design
    scalar_s = scalar_per_core_s * len(cores)
    print(f"[bounds] {len(cores)} core configurations ({len(request.designs)} designs): scalar "
          f"{scalar_per_core_s * 1e3:.2f} ms per core configuration = "
          f"{scalar_per_core_s * per_design * 1e3:.3f} ms per design (timed on {len(sample)}; the whole "
          f"space would take {scalar_s:.0f} s)")
    print(f"[bounds] vectorised: {vector_s:.2f} s for all = {vector_s / len(request.designs) * 1e6:.1f} "
          f"µs per design; ratio {scalar_s / vector_s:.0f}x; equal bit for bit on the sample: {same}")


def _run(space: str, strategy: str, jobs: int) -> None:
    request = api.search_request("gpt2-xl", space=space, **OPTIONS)
    bounded_at: list[float] = []
    cores = len({core_key(a) for a in request.designs})
    start = time.perf_counter()

    def progress(tick: Tick) -> None:
        if not bounded_at and tick.evaluated == 0 and tick.bounds_computed == tick.bounded == cores:
            bounded_at.append(time.perf_counter() - start)

    with make_executor("local", jobs) as pool:
        result = run_search(request, make_strategy(strategy), executor=pool, progress=progress)
    wall = time.perf_counter() - start
    best = result.best
    settled = len(result.evaluated) + result.pruned
    bounds = f", every design bounded after {bounded_at[0]:.1f} s" if bounded_at else ""
    print(f"[{strategy}] {space}: {result.considered} designs: {len(result.evaluated)} evaluated, "
          f"{result.pruned} pruned, {wall:.1f} s on {jobs} workers{bounds} "
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


def _peak_memory() -> str:
    """Peak resident set of this process and of the largest of its finished children (workers)."""
    self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (f"peak memory: this process {self_kib / 2**20:.2f} GiB, largest worker "
            f"{children_kib / 2**20:.2f} GiB")


def _store_content(db: Path) -> tuple[list[tuple[str, str]], list[tuple[str, int, float, float]]]:
    """The results (design, result JSON) and the bounds of a store, sorted."""
    with sqlite3.connect(db) as connection:
        results = sorted(connection.execute("SELECT design, result FROM results").fetchall())
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        bounds = sorted(connection.execute("SELECT design, model, samples_per_s, samples_per_s_per_device "
                                           "FROM plan_bounds").fetchall()) if "plan_bounds" in tables else []
    return results, bounds


def _four(space: str, executor: str, jobs: int, db: Path, every_s: float, cluster: str | None = None) -> None:
    """The four PHAZE models jointly over ``space``, pruned exhaustive search, into the store ``db``
    (``cluster``: a cluster preset's links, e.g. ``phaze-paper``; None: the space's base's)."""
    request = api.search_request(list(PHAZE_MODELS), space=space, cluster=cluster, **OPTIONS)
    tag = f"four/{executor}" + (f"/{cluster}" if cluster else "")
    print(f"[{tag}] {', '.join(PHAZE_MODELS)} on {OPTIONS['devices']} devices, global batch "
          f"{OPTIONS['global_batch']}, {len(request.designs)} designs of {space!r}, TP widths "
          f"{request.plan_space.tps}, {len(request.cost_keys)} cost keys per model; {jobs} workers",
          flush=True)
    start = time.perf_counter()
    chains = model_chains(request)  # traced (or read from the graph cache) before the clock of the search
    print(f"[{tag}] layer chains ready after {time.perf_counter() - start:.1f} s "
          f"({sum(len(c) for c in chains.values())} chains)", flush=True)
    last = [start]

    def progress(tick: Tick) -> None:
        now = time.perf_counter()
        if now - last[0] >= every_s:
            last[0] = now
            settled = tick.evaluated + tick.pruned
            print(f"[{tag}] {now - start:.0f} s: {tick.bounded}/{tick.total} bounded, {tick.evaluated} "
                  f"evaluated, {tick.pruned} pruned ({settled / (now - start):.1f} designs settled/s)",
                  flush=True)

    with make_executor(executor, jobs) as pool:
        result = run_search(request, make_strategy("exhaustive"), executor=pool, progress=progress,
                            store=ResultStore(db))
    wall = time.perf_counter() - start
    settled = len(result.evaluated) + result.pruned
    print(f"[{tag}] {result.considered} designs: {len(result.evaluated)} evaluated, {result.pruned} pruned, "
          f"{wall:.1f} s ({wall / TARGET_S:.2f} of the 15-minute target); {settled / wall:.1f} designs "
          f"settled/s, {len(result.evaluated) / wall:.1f} evaluated/s", flush=True)
    print(f"[{tag}] {_peak_memory()}", flush=True)
    best = result.best
    if best is not None:
        print(f"[{tag}] best {best.accelerator.name}: geometric mean {best.throughput_samples_per_s:,.1f} "
              f"samples/s, area {best.area_mm2:.1f} mm²", flush=True)
    if result.speedup_vs_baseline is not None:
        print(f"[{tag}] best / tpuv4 = {result.speedup_vs_baseline:.3f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="phaze-square", help="phaze-square (default) or phaze")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--plain", action="store_true", help="also evaluate every design")
    parser.add_argument("--no-search", action="store_true", help="only time the bounds")
    parser.add_argument("--four", action="store_true", help="the four PHAZE models jointly")
    parser.add_argument("--dask", action="store_true", help="with --four: again on a 2-worker Dask cluster")
    parser.add_argument("--store", help="with --four: directory of the result stores (default: temporary)")
    parser.add_argument("--every", type=float, default=60.0, help="with --four: seconds between reports")
    parser.add_argument("--cluster", default=None,
                        help="with --four: a cluster preset's links (phaze-paper: PHAZE's 4 GiB/s)")
    args = parser.parse_args()
    if args.four:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(args.store or tmp)
            folder.mkdir(parents=True, exist_ok=True)
            local = folder / "four-local.db"
            _four(args.space, "local", args.jobs, local, args.every, args.cluster)
            if args.dask:
                dask = folder / "four-dask.db"
                _four(args.space, "dask", 2, dask, args.every, args.cluster)
                same = _store_content(local) == _store_content(dask)
                print(f"[four] local-pool and Dask stores hold the same results and bounds: {same}")
        return
    _bounds(api.search_request("gpt2-xl", space=args.space, **OPTIONS))
    if args.no_search:
        return
    _run(args.space, "exhaustive", args.jobs)
    if args.plain:
        _run(args.space, "exhaustive-all", args.jobs)


if __name__ == "__main__":
    main()
