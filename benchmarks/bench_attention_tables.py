"""Predicted vs measured fused-attention throughput, row by row.

For every shipped attention table (:mod:`archplace.cost.attention_tables`) and every row:

* ``fraction``: what the preset's declared ``attention_fwd`` / ``attention_bwd`` fractions of
  the peak predict (the cost model without a table; a ``fwd+bwd`` row combines them as
  ``3.5 / (1 / (f·peak) + 2.5 / (b·peak))``, the papers' FLOP weights);
* ``leave-one-out``: the table's lookup with that row removed (a ``use: check`` table is
  predicted by the model table of its family and preset instead, every row out of sample).

Errors are (predicted - measured) / measured: positive means predicted too fast.

Run: ``PYTHONPATH=src python benchmarks/bench_attention_tables.py [--summary]``.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import numpy as np

from archplace.base.errors import ConfigError
from archplace.cost.attention_tables import (
    AttentionTable,
    attention_table_names,
    attention_throughput_flop_per_s,
    load_attention_table,
    model_tables,
)
from archplace.hw.presets import load_accelerator


def _without(table: AttentionTable, row: int) -> AttentionTable:
    keep = np.arange(len(table)) != row

    def pick(values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(v for v, k in zip(values, keep, strict=True) if k)

    return replace(table, labels=pick(table.labels), batch=table.batch[keep], heads=table.heads[keep],
                   seq_len=table.seq_len[keep], head_dim=table.head_dim[keep], causal=table.causal[keep],
                   directions=pick(table.directions), dtypes=pick(table.dtypes),
                   flop_per_s=table.flop_per_s[keep])


def _predict(table: AttentionTable, s: int, d: int, causal: bool, direction: str) -> float | None:
    """The lookup's rate for a row of ``direction``; a fwd+bwd row from the two passes."""
    try:
        if direction == "fwd+bwd":
            fwd = attention_throughput_flop_per_s(table, seq_len=s, head_dim=d, causal=causal, backward=False)
            bwd = attention_throughput_flop_per_s(table, seq_len=s, head_dim=d, causal=causal, backward=True)
            return 3.5 / (1.0 / fwd + 2.5 / bwd)
        return attention_throughput_flop_per_s(table, seq_len=s, head_dim=d, causal=causal,
                                               backward=direction == "bwd")
    except ConfigError:
        return None


def _fraction(preset: str, direction: str) -> float:
    acc = load_accelerator(preset)
    assert acc.efficiency is not None
    fwd, bwd = (acc.efficiency.attention_fwd * acc.peak_flop_per_s,
                acc.efficiency.attention_bwd * acc.peak_flop_per_s)
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": 3.5 / (1.0 / fwd + 2.5 / bwd)}[direction]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def report(name: str, per_row: bool) -> None:
    """Print one table's rows and summary."""
    table = load_attention_table(name)
    reference = None
    if table.use == "check":
        reference = load_attention_table(model_tables()[(table.family, table.preset)])
    print(f"== {name}  ({table.family} on {table.preset}, use: {table.use}"
          + (f", predicted by {reference.name})" if reference else ")"))
    if per_row:
        print(f"   {'seq':>6} {'d':>4} {'causal':>6} {'dir':>7}  {'measured':>9}  "
              f"{'fraction':>9} {'err':>7}  {'table':>9} {'err':>7}")
    frac_err: list[float] = []
    table_err: list[float] = []
    for i in range(len(table)):
        s, d, causal, direction = (int(table.seq_len[i]), int(table.head_dim[i]), bool(table.causal[i]),
                                   table.directions[i])
        measured = float(table.flop_per_s[i])
        by_fraction = _fraction(table.preset, direction)
        source = reference if reference is not None else _without(table, i)
        by_table = _predict(source, s, d, causal, direction)
        e_frac = by_fraction / measured - 1.0
        e_table = None if by_table is None else by_table / measured - 1.0
        frac_err.append(e_frac)
        if e_table is not None:
            table_err.append(e_table)
        if per_row:
            shown = "-" if by_table is None else f"{by_table / 1e12:9.1f}"
            print(f"   {s:>6} {d:>4} {int(causal):>6} {direction:>7}  {measured / 1e12:9.1f}  "
                  f"{by_fraction / 1e12:9.1f} {_pct(e_frac):>7}  {shown:>9} {_pct(e_table):>7}")
    table_label = "table" + ("" if reference else " (leave-one-out)")
    for label, errors in (("fraction", frac_err), (table_label, table_err)):
        if errors:
            absolute = [abs(e) for e in errors]
            print(f"   {label}: n={len(errors)}  mean {_pct(statistics.fmean(errors))}  "
                  f"mean|e| {100 * statistics.fmean(absolute):.1f}%  max|e| {100 * max(absolute):.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description="predicted vs measured attention throughput")
    parser.add_argument("--summary", action="store_true", help="per-table summaries only")
    args = parser.parse_args()
    for name in attention_table_names():
        report(name, per_row=not args.summary)
        print()


if __name__ == "__main__":
    main()
