"""(operator, accelerator) estimates per second of the cost model.

Workload: the operators of one llama2-7b block, forward and backward (sequence 4096,
micro-batch 1), against every design of the ``phaze`` space -- the inner loop of a
PHAZE-style exhaustive search.  Target: >= 1 million estimates per second on 2 cores.

Measured paths:

* vectorised -- ``SystolicCostModel.estimate_many(op, configs)``, one call per operator
  over all designs (a fresh model each repetition, so nothing comes from the cache;
  building the ``CoreConfigArray`` and its distinct rows is included);
* scalar -- ``SystolicCostModel.estimate(op, acc)`` per pair, cache off, on a sample of
  designs (what the per-design search loop calls today).

Run: ``.venv/bin/python benchmarks/bench_cost.py``
"""
# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import os
import time

from archplace.cost.configs import CoreConfigArray
from archplace.cost.model import SystolicCostModel
from archplace.hw.space import load_space
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model

TARGET_PER_S = 1_000_000
REPEATS = 5
SCALAR_SAMPLE = 200


def main() -> None:
    start = time.perf_counter()
    chain = extract_chain(load_model("llama2-7b"), ExtractOptions.of(1, 4096))
    block = chain.layers[1]
    ops = list(block.fwd.ops) + list(block.bwd.ops)
    designs = load_space("phaze").designs()
    print(f"setup: {len(ops)} operators (llama2-7b block, fwd+bwd) x {len(designs)} designs "
          f"(phaze space), {time.perf_counter() - start:.1f} s; {os.cpu_count()} CPUs visible")

    pairs = len(ops) * len(designs)
    best = float("inf")
    for _ in range(REPEATS):
        model = SystolicCostModel()
        t0 = time.perf_counter()
        configs = CoreConfigArray.from_accelerators(designs)
        for op in ops:
            model.estimate_many(op, configs)
        best = min(best, time.perf_counter() - t0)
    rate = pairs / best
    print(f"vectorised: {pairs:,} estimates in {best * 1e3:.1f} ms = {rate:,.0f} /s on 1 core "
          f"({rate / TARGET_PER_S:.1f}x the {TARGET_PER_S:,}/s target for 2 cores)")

    sample = designs[:: max(1, len(designs) // SCALAR_SAMPLE)]
    model = SystolicCostModel(cache_size=0)
    t0 = time.perf_counter()
    for acc in sample:
        for op in ops:
            model.estimate(op, acc)
    elapsed = time.perf_counter() - t0
    scalar_rate = len(sample) * len(ops) / elapsed
    print(f"scalar:     {len(sample) * len(ops):,} estimates in {elapsed * 1e3:.1f} ms = "
          f"{scalar_rate:,.0f} /s on 1 core ({scalar_rate / TARGET_PER_S:.2f}x target)")


if __name__ == "__main__":
    main()
