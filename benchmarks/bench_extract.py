"""Graph extraction time.

Default: one block of llama2-70b at sequence 4096, cold and from the cache (targets, issue #3:
< 10 s cold, < 0.5 s from the on-disk cache).

``--plan MODEL``: the chains a first ``archplace plan --model MODEL --devices N`` needs (every
valid TP width with and without SP, CP degree, micro-batch 1, 2, 4, 8), from an empty cache, three
ways (issue #15): one trace per chain in this process (as before the chains were derived), then
:func:`archplace.workload.cache.cached_chains` with one job (micro-batches 2 and 3 traced per
setting, 4 and 8 derived from them) and with ``--jobs`` processes.  Prints wall-clock and CPU
time (this process and its finished workers) of each, and checks that the three give the same
chains.

Run: .venv/bin/python benchmarks/bench_extract.py [--plan llama2-7b [--devices 1024] [--jobs 2]]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from archplace.placement.plan import MICRO_BATCHES
from archplace.placement.workflow import valid_cp_degrees, valid_tp_widths
from archplace.workload.cache import GraphCache, cached_chains
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.layers import LayerChain
from archplace.workload.zoo import LoadedModel, load_model


def _block(spec: LoadedModel) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = GraphCache(Path(tmp))
        for tp, sp in ((1, False), (8, True)):
            options = ExtractOptions.of(micro_batch=1, seq_len=4096, tp=tp, sp=sp)
            start = time.perf_counter()
            chain = cache.chain(spec, options)
            cold_s = time.perf_counter() - start
            start = time.perf_counter()
            again = cache.chain(spec, options)
            warm_s = time.perf_counter() - start
            assert again.layers[1].fwd.flop == chain.layers[1].fwd.flop
            block = chain.layers[1]
            print(f"{spec.name} seq 4096 tp={tp} sp={sp}: {len(block.fwd)} fwd + {len(block.bwd)} bwd ops; "
                  f"cold {cold_s:.2f} s (target < 10 s, {cold_s / 10:.2f}x of it), "
                  f"cached {warm_s * 1e3:.0f} ms (target < 500 ms, {warm_s / 0.5:.2f}x of it)")


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children so far."""
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def _timed(label: str, run: Callable[[], list[LayerChain]]) -> list[LayerChain]:
    cpu, start = _cpu_s(), time.perf_counter()
    chains = run()
    print(f"  {label}: {time.perf_counter() - start:.1f} s wall, {_cpu_s() - cpu:.1f} s CPU", flush=True)
    return chains


def _plan(spec: LoadedModel, devices: int, jobs: int) -> None:
    tps = valid_tp_widths(spec, devices)
    cps = valid_cp_degrees(spec, devices)
    options = [ExtractOptions.of(b, spec.seq_len, tp=t, sp=sp, cp=cp) for t in tps for sp in (False, True)
               for cp in cps for b in MICRO_BATCHES if (t > 1 or not sp) and t * cp <= devices]
    print(f"{spec.name} on {devices} devices: {len(options)} chains (TP {tps}, CP {cps}, SP off/on, "
          f"micro-batches {MICRO_BATCHES})", flush=True)
    wanted = [(spec, o) for o in options]
    with tempfile.TemporaryDirectory() as tmp:
        one_by_one = _timed("one trace per chain", lambda: [extract_chain(spec, o) for o in options])
        serial = _timed("cached_chains, 1 job", lambda: cached_chains(wanted, GraphCache(Path(tmp) / "a")))
        pooled = _timed(f"cached_chains, {jobs} jobs",
                        lambda: cached_chains(wanted, GraphCache(Path(tmp) / "b"), jobs=jobs))
        traced = len(list((Path(tmp) / "a").iterdir()))
    print(f"  {traced} chains in the cache ({traced - len(options)} extra references); "
          f"the same chains all three ways: {one_by_one == serial == pooled}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", metavar="MODEL", help="time the chains of a first plan of MODEL")
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.plan:
        _plan(load_model(args.plan), args.devices, args.jobs)
    else:
        _block(load_model("llama2-70b"))


if __name__ == "__main__":
    main()
