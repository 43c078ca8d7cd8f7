"""archplace's kernel predictions against every row of the shipped measured tables.

For each table of ``archplace/cost/measured/`` (:mod:`archplace.cost.measured_tables`) and
each of its rows, the cost model's latency of the same kernel on the table's hardware preset
(``a100-80gb``, ``h100-80gb``): GEMMs through :func:`archplace.front.app.estimate_preset_matmul`
(per call), softmax, layer norm and gelu as one vector operator of the cost model
(``SystolicCostModel().estimate``, the path a traced graph's operator takes; fp16/bf16, 2 bytes
per element read and written).

The measured figure is the row's *kernel time* (:func:`archplace.cost.kernel_tables.kernel_time_s`:
per call, less the host overhead of a wall-clock table, at least the preset's kernel floor),
the quantity the model predicts.  A preset that uses the table is exact (up to the monotone
correction) at its rows, so each table also gets a **leave-one-out** figure: every row
predicted with that row removed from the preset's tables, which shows the interpolation's real
error.  A table of a preset that does not use it has no leave-one-out line.

Prints per row: the shape, measured and predicted latency, the signed error ``predicted /
measured - 1`` (negative: the model is too fast) and the leave-one-out error; per table:
count, median and mean signed error, mean and max |error| (the worst rows), the same for
leave-one-out, and the mean signed error binned by decade of FLOP (GEMM) or of bytes moved.

Run: ``.venv/bin/python benchmarks/bench_kernel_tables.py [--summary] [--without-tables]``
(``--summary``: the per-table summaries only; ``--without-tables``: predicted by each preset's
one-fraction model, its efficiency without kernel tables and floor, against the same kernel
times: the model before the tables).
"""
# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from dataclasses import replace

import numpy as np

from archplace.cost.efficiency import ChipColumns
from archplace.cost.estimate import preset_matmul
from archplace.cost.kernel_tables import (
    BandwidthCurve,
    GemmSurface,
    dtype_class,
    kernel_time_s,
    resolve_table,
)
from archplace.cost.measured_gemm import clamped, gemm_model_s
from archplace.cost.measured_tables import MeasuredTable, load_table, shipped_tables
from archplace.cost.model import SystolicCostModel
from archplace.cost.precision import cast_bytes, fp8_gemm_estimate
from archplace.front.app import accelerator
from archplace.front.specs import HardwareSpec
from archplace.hw.accelerator import Accelerator
from archplace.workload.graph import Operator, OpKind, Phase

# The vector operator each kernel class is traced as (kind, aten target).
VECTOR_OPS = {
    "softmax": (OpKind.SOFTMAX, "aten._softmax.default"),
    "layernorm": (OpKind.NORM, "aten.native_layer_norm.default"),
    "gelu": (OpKind.ELEMENTWISE, "aten.gelu.default"),
    # a device copy (archplace profile's copy tables): what archplace prices a cast or clone as
    "copy": (OpKind.ELEMENTWISE, "aten.copy_.default"),
}
BYTES_PER_ELEMENT = 2  # every shipped vector table is 16-bit (a copy table's bytes: as 16-bit elements)


def vector_latency(acc: Accelerator, kernel: str, elements: int) -> float:
    """The cost model's all-cores latency (s) of one fp16 vector op over ``elements``."""
    kind, target = VECTOR_OPS[kernel]
    size = float(BYTES_PER_ELEMENT * elements)
    op = Operator(id=0, name=kernel, target=target, kind=kind, phase=Phase.FWD, batch=0, m=0, k=0,
                  n=0, elements=elements, flop=float(elements), bytes_read=size, bytes_written=size)
    return SystolicCostModel().estimate(op, acc).all_cores_s


def _without(table: MeasuredTable, row: int) -> MeasuredTable:
    keep = np.arange(len(table)) != row
    return replace(table, labels=tuple(np.array(table.labels, dtype=object)[keep]),
                   sizes={c: v[keep] for c, v in table.sizes.items()},
                   dtypes=tuple(np.array(table.dtypes, dtype=object)[keep]), latency_s=table.latency_s[keep])


def _loo(table: MeasuredTable, acc: Accelerator, row: int) -> float | None:
    """Kernel seconds of ``row`` predicted with the row removed from the preset's tables; None
    when the preset does not use ``table`` (or the row is its table's only one)."""
    eff = acc.efficiency
    if eff is None or table.name not in eff.kernel_tables or len(table) < 2:
        return None
    tables = tuple(_without(table, row) if n == table.name else resolve_table(n) for n in eff.kernel_tables)
    s = table.sizes
    chip = ChipColumns.of([acc])
    if table.kernel == "gemm":
        b, m, n, k = (int(s[c][row]) for c in ("batch", "m", "n", "k"))
        op = _gemm_op(b, m, n, k)
        surface = GemmSurface.build(tuple(t for t in tables if t.kernel == "gemm"),
                                    dtype_class(table.dtypes[row]), eff.kernel_floor_s)
        return float(clamped(gemm_model_s(op, eff, chip), surface, op, eff.kernel_floor_s)[0])
    elements = int(s["elements"][row]) if "elements" in s else int(s["rows"][row] * s["cols"][row])
    curve = BandwidthCurve.build(tuple(t for t in tables if t.kernel == table.kernel), eff.kernel_floor_s)
    size = 2.0 * BYTES_PER_ELEMENT * elements
    model = np.array([max(size / (acc.hbm_bandwidth_bytes_per_s * eff.hbm), eff.kernel_floor_s)])
    return float(curve.time_s(np.array([size]), model)[0])


def fp8_gemm_s(acc: Accelerator, op: Operator) -> float:
    """The FP8 GEMM kernel of :func:`archplace.cost.precision.fp8_gemm_estimate`, without the
    quantization of its inputs that the estimate adds (the tables time the GEMM kernel alone)."""
    est = fp8_gemm_estimate(op, acc)
    hbm = acc.efficiency.hbm if acc.efficiency is not None else 1.0
    return est.all_cores_s - cast_bytes(op) / (acc.hbm_bandwidth_bytes_per_s * hbm)


def _gemm_op(b: int, m: int, n: int, k: int) -> Operator:
    e = BYTES_PER_ELEMENT
    return Operator(id=0, name="matmul", target="aten.mm.default" if b == 1 else "aten.bmm.default",
                    kind=OpKind.MATMUL, phase=Phase.FWD,
                    batch=b, m=m, k=k, n=n, elements=b * m * n, flop=2.0 * b * m * n * k,
                    bytes_read=float(e * b * (m * k + k * n)), bytes_written=float(e * b * m * n))


Row = tuple[str, float, float, float, float | None]


def rows(table: MeasuredTable, *, without_tables: bool = False) -> list[Row]:
    """(shape, measured kernel s, predicted s, size for binning, leave-one-out s or None) of
    each row of ``table``; ``without_tables``: predicted by the preset's one-fraction model
    (its efficiency without kernel tables and floor), no leave-one-out."""
    s = table.sizes
    preset = accelerator(HardwareSpec(table.preset))
    floor = preset.efficiency.kernel_floor_s if preset.efficiency is not None else 0.0
    measured = kernel_time_s(table, floor)
    acc = preset
    if without_tables and preset.efficiency is not None:
        acc = replace(preset, efficiency=replace(preset.efficiency, kernel_tables=(), kernel_floor_s=0.0))
    out: list[Row] = []
    for i in range(len(table)):
        label = f" ({table.labels[i]})" if table.labels[i] != "-" else ""
        if table.kernel == "gemm":
            b, m, n, k, calls = (int(s[c][i]) for c in ("batch", "m", "n", "k", "calls"))
            if dtype_class(table.dtypes[i]) == "fp8":
                predicted = fp8_gemm_s(acc, _gemm_op(b, m, n, k))
            else:
                predicted = preset_matmul(acc, m, k, n, batch=b).latency_s
            shape = (f"{calls}x " if calls > 1 else "") + f"b={b} m={m} n={n} k={k}{label}"
            size = 2.0 * b * m * n * k
        else:
            if table.kernel == "gelu":
                elements = int(s["elements"][i])
                shape = f"elements={elements}{label}"
            elif table.kernel == "copy":
                elements = int(s["bytes"][i]) // BYTES_PER_ELEMENT
                shape = f"bytes={int(s['bytes'][i])}{label}"
            else:
                elements = int(s["rows"][i]) * int(s["cols"][i])
                shape = f"{int(s['rows'][i])}x{int(s['cols'][i])}{label}"
            predicted = vector_latency(acc, table.kernel, elements)
            size = 2.0 * BYTES_PER_ELEMENT * elements
        held_out = None if without_tables else _loo(table, acc, i)
        out.append((shape, float(measured[i]), predicted, size, held_out))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _summary(errors: list[float]) -> str:
    absolute = [abs(e) for e in errors]
    return (f"n={len(errors)}  median {_pct(statistics.median(errors))}  "
            f"mean {_pct(statistics.fmean(errors))}  mean|e| {100 * statistics.fmean(absolute):.1f}%  "
            f"max|e| {100 * max(absolute):.1f}%")


def report(table: MeasuredTable, *, per_row: bool, without_tables: bool = False) -> None:
    """Print one table's rows (unless not ``per_row``) and its summary."""
    data = rows(table, without_tables=without_tables)
    errors = [p / m - 1.0 for _, m, p, _, _ in data]
    loo = [None if q is None else q / m - 1.0 for _, m, _, _, q in data]
    h = table.header
    print(f"== {table.name}: {table.kernel} on {h['gpu']} ({h['dtype']}, {h['library']}) "
          f"against preset {table.preset}")
    print(f"   source: {h['source_repo']} {h['source_path']} @ {h['source_commit']}")
    if per_row:
        width = max(len(d[0]) for d in data)
        print(f"   {'shape':<{width}}  {'kernel':>12}  {'predicted':>12}  {'error':>8}  {'loo':>8}")
        for (shape, measured, predicted, _, _), e, q in zip(data, errors, loo, strict=True):
            print(f"   {shape:<{width}}  {measured * 1e6:10.2f}us  {predicted * 1e6:10.2f}us  {_pct(e):>8}"
                  f"  {'-' if q is None else _pct(q):>8}")
    print(f"   summary: {_summary(errors)}")
    held = [q for q in loo if q is not None]
    if held:
        print(f"   leave-one-out: {_summary(held)}")
    absolute = [abs(e) for e in errors]
    worst = sorted(range(len(data)), key=lambda i: -absolute[i])[:3]
    print("   worst: " + "; ".join(f"{data[i][0]} {_pct(errors[i])}" for i in worst))
    bins: dict[int, list[float]] = defaultdict(list)
    for (_, _, _, size, _), e in zip(data, errors, strict=True):
        bins[math.floor(math.log10(size))].append(e)
    unit = "FLOP" if table.kernel == "gemm" else "bytes"
    print(f"   by {unit}: " + "  ".join(
        f"1e{d}: n={len(v)} {_pct(float(np.mean(v)))}" for d, v in sorted(bins.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description="predicted vs measured kernel latencies")
    parser.add_argument("--summary", action="store_true", help="per-table summaries only")
    parser.add_argument("--without-tables", action="store_true",
                        help="predict with the presets' one-fraction model (no kernel tables, no floor)")
    args = parser.parse_args()
    for name in shipped_tables():
        report(load_table(name), per_row=not args.summary, without_tables=args.without_tables)
        print()


if __name__ == "__main__":
    main()
