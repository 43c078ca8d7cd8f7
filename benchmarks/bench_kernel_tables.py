"""archplace's kernel predictions against every row of the shipped measured tables.

For each table of ``archplace/cost/measured/`` (:mod:`archplace.cost.measured_tables`) and
each of its rows, the cost model's latency of the same kernel on the table's hardware preset
(``a100-80gb``, ``h100-80gb``): GEMMs through :func:`archplace.app.estimate_preset_matmul`
(times ``calls``), softmax, layer norm and gelu as one vector operator of the cost model
(``SystolicCostModel().estimate``, the path a traced graph's operator takes; fp16/bf16, 2 bytes
per element read and written).

Prints per row: the shape, measured and predicted latency, and the signed error
``predicted / measured - 1`` (negative: the model is too fast); per table: count, median and
mean signed error, mean and max |error| (the worst rows), and the mean signed error binned by
decade of FLOP (GEMM) or of bytes moved (vector ops).  So a change to a table or to the model
shows its effect here.  The measurements include what the source's method includes (the
LLMCompass rows are wall-clock times with launch overhead); see each file's header.

Run: ``.venv/bin/python benchmarks/bench_kernel_tables.py [--summary]``
(``--summary``: the per-table summaries only).
"""
# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict

import numpy as np

from archplace.app import accelerator, estimate_preset_matmul
from archplace.cost.measured_tables import MeasuredTable, load_table, shipped_tables
from archplace.cost.model import SystolicCostModel
from archplace.hardware.accelerator import Accelerator
from archplace.specs import HardwareSpec
from archplace.workload.graph import Operator, OpKind, Phase

# The vector operator each kernel class is traced as (kind, aten target).
VECTOR_OPS = {
    "softmax": (OpKind.SOFTMAX, "aten._softmax.default"),
    "layernorm": (OpKind.NORM, "aten.native_layer_norm.default"),
    "gelu": (OpKind.ELEMENTWISE, "aten.gelu.default"),
}
BYTES_PER_ELEMENT = 2  # every shipped vector table is fp16


def vector_latency(acc: Accelerator, kernel: str, elements: int) -> float:
    """The cost model's all-cores latency (s) of one fp16 vector op over ``elements``."""
    kind, target = VECTOR_OPS[kernel]
    size = float(BYTES_PER_ELEMENT * elements)
    op = Operator(id=0, name=kernel, target=target, kind=kind, phase=Phase.FWD, batch=0, m=0, k=0,
                  n=0, elements=elements, flop=float(elements), bytes_read=size, bytes_written=size)
    return SystolicCostModel().estimate(op, acc).all_cores_s


def rows(table: MeasuredTable) -> list[tuple[str, float, float, float]]:
    """(shape, measured_s, predicted_s, size for binning) of each row of ``table``."""
    s = table.sizes
    out = []
    if table.kernel == "gemm":
        for i in range(len(table)):
            b, m, n, k, calls = (int(s[c][i]) for c in ("batch", "m", "n", "k", "calls"))
            predicted = calls * estimate_preset_matmul(table.preset, m, k, n, batch=b).latency_s
            shape = f"{calls}x " if calls > 1 else ""
            shape += f"b={b} m={m} n={n} k={k}" + (f" ({table.labels[i]})" if table.labels[i] != "-" else "")
            out.append((shape, float(table.latency_s[i]), predicted, 2.0 * calls * b * m * n * k))
        return out
    acc = accelerator(HardwareSpec(table.preset))
    for i in range(len(table)):
        if table.kernel == "gelu":
            elements = int(s["elements"][i])
            shape = f"elements={elements}"
        else:
            rows_, cols = int(s["rows"][i]), int(s["cols"][i])
            elements = rows_ * cols
            shape = f"{rows_}x{cols}"
        if table.labels[i] != "-":
            shape += f" ({table.labels[i]})"
        out.append((shape, float(table.latency_s[i]), vector_latency(acc, table.kernel, elements),
                    2.0 * BYTES_PER_ELEMENT * elements))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def report(table: MeasuredTable, *, per_row: bool) -> None:
    """Print one table's rows (unless not ``per_row``) and its summary."""
    data = rows(table)
    errors = [p / m - 1.0 for _, m, p, _ in data]
    h = table.header
    print(f"== {table.name}: {table.kernel} on {h['gpu']} ({h['dtype']}, {h['library']}) "
          f"against preset {table.preset}")
    print(f"   source: {h['source_repo']} {h['source_path']} @ {h['source_commit']}")
    if per_row:
        width = max(len(d[0]) for d in data)
        print(f"   {'shape':<{width}}  {'measured':>12}  {'predicted':>12}  {'error':>8}")
        for (shape, measured, predicted, _), e in zip(data, errors, strict=True):
            print(f"   {shape:<{width}}  {measured * 1e6:10.2f}us  {predicted * 1e6:10.2f}us  {_pct(e):>8}")
    absolute = [abs(e) for e in errors]
    print(f"   summary: n={len(errors)}  median {_pct(statistics.median(errors))}  "
          f"mean {_pct(statistics.fmean(errors))}  mean|e| {100 * statistics.fmean(absolute):.1f}%  "
          f"max|e| {100 * max(absolute):.1f}%")
    worst = sorted(range(len(data)), key=lambda i: -absolute[i])[:3]
    print("   worst: " + "; ".join(f"{data[i][0]} {_pct(errors[i])}" for i in worst))
    bins: dict[int, list[float]] = defaultdict(list)
    for (_, _, _, size), e in zip(data, errors, strict=True):
        bins[math.floor(math.log10(size))].append(e)
    unit = "FLOP" if table.kernel == "gemm" else "bytes"
    print(f"   by {unit}: " + "  ".join(
        f"1e{d}: n={len(v)} {_pct(float(np.mean(v)))}" for d, v in sorted(bins.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description="predicted vs measured kernel latencies")
    parser.add_argument("--summary", action="store_true", help="per-table summaries only")
    args = parser.parse_args()
    for name in shipped_tables():
        report(load_table(name), per_row=not args.summary)
        print()


if __name__ == "__main__":
    main()
