"""NCCL's predicted bus bandwidth against measured nccl-tests logs (tests/data/nccl/).

Prints, per log and message size, the measured busbw, archplace's prediction
(:mod:`archplace.cost.nccl`: NCCL's own tuner model, the algorithm and protocol it picks) and
its error, the same choice charged as NCCL's kernels pipeline it
(:func:`archplace.cost.nccl.pipelined_time_s`) and its error, then per log the mean |error|
of each from 1 MiB up and at 256 MiB and up.

Run: ``PYTHONPATH=src python benchmarks/bench_nccl.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

from archplace.cost.nccl_logs import compare, read_log

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "nccl"
MIB = 2**20


def main() -> int:
    for path in sorted(DATA.glob("*.csv")):
        log = read_log(path)
        table = compare(log)
        m = log.machine
        print(f"\n{log.name}: {m['nodes']} node(s) x {m['gpus_per_node']} GPU(s), {m['generation']}, "
              f"{m['nics_per_node']} NICs/node at {m['nic_gbps']} GB/s")
        print(f"{'size':>12} {'op':>10} {'measured':>9} {'predicted':>9} {'error':>8} "
              f"{'pipelined':>9} {'error':>8}  choice")
        for row in table.itertuples():
            print(f"{row.size_bytes:>12} {row.op:>10} {row.busbw_gbps:>9.2f} "
                  f"{row.predicted_busbw_gbps:>9.2f} {row.error:>+8.1%} "
                  f"{row.pipelined_busbw_gbps:>9.2f} {row.pipelined_error:>+8.1%}  "
                  f"{row.algorithm}/{row.protocol}")
        big = table[table["size_bytes"] >= MIB]
        large = table[table["size_bytes"] >= 256 * MIB]
        for label, column in (("tuner", "error"), ("pipelined", "pipelined_error")):
            print(f"{label}: mean |error| >= 1 MiB: {big[column].abs().mean():.1%} "
                  f"(max {big[column].abs().max():.1%}); >= 256 MiB: {large[column].abs().mean():.1%} "
                  f"(max {large[column].abs().max():.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
