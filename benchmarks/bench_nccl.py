"""NCCL's predicted bus bandwidth against measured nccl-tests logs (tests/data/nccl/).

Prints, per log and message size, the measured busbw, archplace's prediction
(:mod:`archplace.cost.nccl`: NCCL's own tuner model, the algorithm and protocol it picks) and
the error, then per log the mean |error| from 1 MiB up and at 256 MiB and up.

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
        print(f"{'size':>12} {'op':>10} {'measured':>9} {'predicted':>9} {'error':>8}  choice")
        for row in table.itertuples():
            print(f"{row.size_bytes:>12} {row.op:>10} {row.busbw_gbps:>9.2f} "
                  f"{row.predicted_busbw_gbps:>9.2f} {row.error:>+8.1%}  {row.algorithm}/{row.protocol}")
        big = table[table["size_bytes"] >= MIB]
        large = table[table["size_bytes"] >= 256 * MIB]
        print(f"mean |error| >= 1 MiB: {big['error'].abs().mean():.1%} (max {big['error'].abs().max():.1%}); "
              f">= 256 MiB: {large['error'].abs().mean():.1%} (max {large['error'].abs().max():.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
