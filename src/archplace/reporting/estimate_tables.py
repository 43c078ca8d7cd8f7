"""Rich tables of ``archplace estimate``: per-layer and per-operator estimates of a model, and the
figures of one matmul (rendering only; the figures are those of :mod:`archplace.cost.estimate`)."""

from __future__ import annotations

from rich.table import Table

from archplace.cost.estimate import EFFICIENCY_NOTES, ModelEstimate, layer_rows, op_rows
from archplace.reporting.plain import PlainTable


def efficiency_caption(result: ModelEstimate) -> str:
    """``HARDWARE: NOTE``, the note saying where ``result``'s efficiency figures come from."""
    return f"{result.hardware}: {EFFICIENCY_NOTES[result.efficiency_model]}"


def model_table(result: ModelEstimate) -> Table:
    """One row per distinct layer and pass (fwd, bwd) of ``result``, then the totals: count, time on
    one core and on all cores (ms), bound, energy (mJ), MFU, achieved TFLOP/s and fraction of peak."""
    table = PlainTable(title=f"{result.model} on {result.hardware}: tp={result.tp}, micro-batch "
                        f"{result.micro_batch}, sequence {result.seq_len} (per layer, per device)",
                  caption=efficiency_caption(result))
    for column in ("layer", "×", "pass", "one core ms", "all cores ms", "bound", "energy mJ", "MFU",
                   "TFLOP/s", "of peak"):
        table.add_column(column, justify="left" if column in ("layer", "pass", "bound") else "right")
    for row in layer_rows(result):
        table.add_row(row["layer"], str(row["count"]), row["phase"], f"{1e3 * row['single_core_s']:.3f}",
                      f"{1e3 * row['all_cores_s']:.3f}", row["bound"], f"{1e3 * row['energy_j']:.2f}",
                      f"{100 * row['mfu']:.1f}%", f"{row['achieved_flop_per_s'] / 1e12:.1f}",
                      f"{100 * row['fraction_of_peak']:.1f}%")
    totals = result.to_dict()["total"]
    for phase in ("fwd", "bwd"):
        t = totals[phase]
        table.add_row("total", "", phase, f"{1e3 * t['single_core_s']:.3f}", f"{1e3 * t['all_cores_s']:.3f}",
                      "", f"{1e3 * t['energy_j']:.2f}", f"{100 * t['mfu']:.1f}%",
                      f"{t['achieved_flop_per_s'] / 1e12:.1f}", f"{100 * t['fraction_of_peak']:.1f}%")
    return table


def ops_table(result: ModelEstimate) -> Table:
    """One row per operator of every layer and pass of ``result``: kind, time on all cores (µs),
    GFLOP, achieved TFLOP/s, fraction of peak and bound."""
    table = PlainTable(title=f"{result.model} on {result.hardware}: operators (per device, all cores)",
                  caption=efficiency_caption(result))
    for column in ("layer", "pass", "operator", "kind", "µs", "GFLOP", "TFLOP/s", "of peak", "bound"):
        table.add_column(column, justify="left" if column in ("layer", "pass", "operator", "kind",
                                                              "bound") else "right")
    for row in op_rows(result):
        table.add_row(row["layer"], row["phase"], row["name"], row["kind"], f"{1e6 * row['all_cores_s']:.2f}",
                      f"{row['flop'] / 1e9:.3f}", f"{row['achieved_flop_per_s'] / 1e12:.1f}",
                      f"{100 * row['fraction_of_peak']:.1f}%", row["bound"])
    return table


def figures_table(title: str, data: dict[str, object], caption: str | None = None) -> Table:
    """Two columns, figure and value, one row per item of ``data`` in its order (floats to six
    significant digits, anything else as ``str``), under ``title`` with an optional ``caption``."""
    table = PlainTable(title=title, caption=caption)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in data.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    return table
