"""Graph extraction time: one block of llama2-70b at sequence 4096, cold and from the cache.

Targets (issue #3): < 10 s cold, < 0.5 s from the on-disk cache.
Run: .venv/bin/python benchmarks/bench_extract.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from archplace.workload.cache import GraphCache
from archplace.workload.extract import ExtractOptions
from archplace.workload.zoo import load_model


def main() -> None:
    spec = load_model("llama2-70b")
    with tempfile.TemporaryDirectory() as tmp:
        cache = GraphCache(Path(tmp))
        for tp, sp in ((1, False), (8, True)):
            options = ExtractOptions(micro_batch=1, seq_len=4096, tp=tp, sp=sp)
            start = time.perf_counter()
            chain = cache.chain(spec, options)
            cold_s = time.perf_counter() - start
            start = time.perf_counter()
            again = cache.chain(spec, options)
            warm_s = time.perf_counter() - start
            assert again.layers[1].fwd.flop == chain.layers[1].fwd.flop
            block = chain.layers[1]
            print(f"llama2-70b seq 4096 tp={tp} sp={sp}: {len(block.fwd)} fwd + {len(block.bwd)} bwd ops; "
                  f"cold {cold_s:.2f} s (target < 10 s, {cold_s / 10:.2f}x of it), "
                  f"cached {warm_s * 1e3:.0f} ms (target < 500 ms, {warm_s / 0.5:.2f}x of it)")


if __name__ == "__main__":
    main()
