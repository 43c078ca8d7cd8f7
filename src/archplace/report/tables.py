"""Rich tables for the CLI (rendering only; no computation)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from archplace.search.exhaustive import SearchResult

_MIB = 2.0**20
_GIB = 2.0**30


def search_table(result: SearchResult, top: int) -> Table:
    """The ``top`` best designs: chip parameters, area, plan, samples/s, MFU."""
    table = Table(title=f"best designs for {result.model} on {result.devices} devices, "
                        f"global batch {result.global_batch}")
    for name in ("#", "design", "tensor cores", "vector cores", "buffer", "HBM", "area mm²",
                 "tp/pp/dp", "micro-batch", "recompute", "samples/s", "MFU"):
        table.add_column(name, justify="left" if name == "design" else "right")
    for i, r in enumerate(result.evaluated[:top], 1):
        a = r.accelerator
        chip = [str(i), a.name, f"{a.tensor_cores}×{a.array_rows}×{a.array_cols}",
                f"{a.vector_cores}×{a.vector_lanes}", f"{a.buffer_bytes / _MIB:.0f} MiB",
                f"{a.hbm_bytes / _GIB:.0f} GiB", f"{r.area_mm2:.1f}"]
        if r.best is None:
            table.add_row(*chip, "infeasible", "", "", "0", "")
            continue
        p = r.best.plan
        table.add_row(*chip, f"{p.tp}/{p.pp}/{p.dp}", str(p.micro_batch), p.recompute.value,
                      f"{r.best.throughput_samples_per_s:,.1f}", f"{r.best.mfu:.1%}")
    return table


def models_table(rows: list[dict[str, Any]]) -> Table:
    """Model presets."""
    table = Table(title="model presets")
    for name in ("name", "model_type", "layers", "hidden", "seq_len", "source"):
        table.add_column(name)
    for row in rows:
        table.add_row(*(str(row[k]) for k in ("name", "model_type", "layers", "hidden", "seq_len", "source")))
    return table


def hardware_table(rows: list[dict[str, Any]]) -> Table:
    """Hardware presets: whatever fields the preset summaries carry, in their order."""
    table = Table(title="hardware presets")
    keys = list(rows[0]) if rows else []
    for key in keys:
        table.add_column(key)
    for row in rows:
        table.add_row(*(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys))
    return table
