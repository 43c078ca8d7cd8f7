"""Rich tables for the CLI (rendering only; no computation)."""

from __future__ import annotations

import csv
from typing import IO, Any

from rich.table import Table

from archplace.search.evaluate import DesignResult, geomean
from archplace.search.request import SearchResult
from archplace.search.store import StoredResult

_MIB = 2.0**20
_GIB = 2.0**30


def _design_row(label: str, r: DesignResult) -> list[str]:
    a = r.accelerator
    chip = [label, a.name, f"{a.tensor_cores}×{a.array_rows}×{a.array_cols}",
            f"{a.vector_cores}×{a.vector_lanes}", f"{a.buffer_bytes / _MIB:.0f} MiB",
            f"{a.hbm_bytes / _GIB:.0f} GiB", f"{r.area_mm2:.1f}", f"{r.tdp_w:.0f}"]
    if r.best is None:
        return [*chip, "infeasible", "", "", "0", "", ""]
    parts = r.components or (r,)  # several models: one plan each, figures are geometric means
    plans = [c.best.plan for c in parts if c.best is not None]
    mfu = geomean([c.best.mfu for c in parts if c.best is not None])
    return [*chip, " | ".join(f"{p.tp}/{p.pp}/{p.dp}" for p in plans),
            " | ".join(str(p.micro_batch) for p in plans), " | ".join(p.recompute.value for p in plans),
            f"{r.throughput_samples_per_s:,.1f}", f"{r.throughput_per_watt:.3g}", f"{mfu:.1%}"]


def search_table(result: SearchResult, top: int) -> Table:
    """The ``top`` best designs (chip, area, TDP, plan, samples/s, per watt, MFU) -- the Pareto
    front for the ``pareto`` objective -- then the baseline; the caption says how the space was
    explored, the CP-SAT re-evaluation and the ratio to the baseline."""
    pareto = result.objective.value == "pareto"
    table = Table(title=f"{'Pareto front' if pareto else 'best designs'} for {result.model} on "
                        f"{result.devices} devices, global batch {result.global_batch} "
                        f"(objective: {result.objective.value})")
    exact = {r.accelerator.name: r for r in result.exact}
    columns = ["#", "design", "tensor cores", "vector cores", "buffer", "HBM", "area mm²", "TDP W",
               "tp/pp/dp", "micro-batch", "recompute", "samples/s", "samples/s/W", "MFU"]
    if exact:
        columns.append("CP-SAT samples/s")
    rows = result.front if pareto else result.evaluated
    longest = max((len(r.accelerator.name) for r in rows[:top]), default=0)
    for name in columns:
        if name == "design":  # never truncate a design's name
            table.add_column(name, justify="left", min_width=longest, no_wrap=True)
        else:
            table.add_column(name, justify="right")
    for i, r in enumerate(rows[:top], 1):
        cells = _design_row(str(i), r)
        if exact:
            found = exact.get(r.accelerator.name)
            cells.append(f"{found.throughput_samples_per_s:,.1f}" if found is not None else "")
        table.add_row(*cells)
    lines = [f"strategy {result.strategy}: {result.note or f'{len(result.evaluated)} designs evaluated'} "
             f"({result.considered} in the space)"]
    if result.fuse:
        lines.append("layers costed with element-wise operators fused into their matmul (--fuse)")
    models = next((r.components for r in result.evaluated if r.components), ())
    if models:
        names = ", ".join(c.model for c in models)
        lines.append(f"samples/s, samples/s/W and MFU are geometric means over {names}; "
                     f"tp/pp/dp, micro-batch and recompute per model in that order")
    if exact:
        lines.append(f"CP-SAT samples/s: the best {len(exact)} designs' plans re-evaluated with exact "
                     f"(CP-SAT) layer schedules instead of list schedules")
    if result.baseline is not None:
        table.add_section()
        table.add_row(*_design_row("base", result.baseline))
        speedup = result.speedup_vs_baseline
        if speedup is not None:
            lines.append(f"best / {result.baseline.accelerator.name}: {speedup:.2f}× "
                         f"{'throughput' if pareto else result.objective.value} on the same cluster, "
                         f"model and plan search")
    table.caption = "\n".join(lines)
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


def _flat(row: StoredResult) -> dict[str, Any]:
    acc, plan = row.result["accelerator"], row.result.get("plan") or {}
    return {"design": row.design, "feasible": row.feasible, "area_mm2": row.area_mm2,
            "throughput_samples_per_s": row.throughput_samples_per_s, "mfu": row.result.get("mfu"),
            "tdp_w": row.result.get("tdp_w"), "throughput_per_watt": row.result.get("throughput_per_watt"),
            "iteration_time_s": row.result.get("iteration_time_s"),
            "tensor_cores": acc["tensor_cores"], "array_rows": acc["array_rows"],
            "array_cols": acc["array_cols"], "vector_cores": acc["vector_cores"],
            "vector_lanes": acc["vector_lanes"], "buffer_bytes": acc["buffer_bytes"],
            "hbm_bytes": acc["hbm_bytes"], "tp": plan.get("tp"), "pp": plan.get("pp"), "dp": plan.get("dp"),
            "micro_batch": plan.get("micro_batch"), "recompute": plan.get("recompute"),
            "infeasible_reason": row.result.get("infeasible_reason")}


def _maybe(value: float | None, spec: str) -> str:
    """``value`` formatted, or empty when a stored row lacks it."""
    return "" if value is None else format(value, spec)


def results_table(rows: list[StoredResult], title: str) -> Table:
    """Stored search results: design, area, TDP, plan, samples/s, samples/s/W, MFU."""
    table = Table(title=title)
    for name in ("#", "design", "area mm²", "TDP W", "tp/pp/dp", "micro-batch", "recompute", "samples/s",
                 "samples/s/W", "MFU"):
        table.add_column(name, justify="left" if name == "design" else "right")
    for i, row in enumerate(rows, 1):
        f = _flat(row)
        chip = [str(i), row.design, f"{row.area_mm2:.1f}", _maybe(f["tdp_w"], ".0f")]
        if not row.feasible:
            table.add_row(*chip, "infeasible", "", "", "0", "0", "")
            continue
        table.add_row(*chip, f"{f['tp']}/{f['pp']}/{f['dp']}", str(f["micro_batch"]), str(f["recompute"]),
                      f"{row.throughput_samples_per_s:,.1f}", _maybe(f["throughput_per_watt"], ".3g"),
                      f"{f['mfu']:.1%}")
    return table


def write_results_csv(rows: list[StoredResult], handle: IO[str]) -> None:
    """Every stored result as one CSV row (chip fields, plan, figures), to a text file opened
    with ``newline=""``."""
    flat = [_flat(row) for row in rows]
    writer = csv.DictWriter(handle, fieldnames=list(flat[0]) if flat else ["design"])
    writer.writeheader()
    writer.writerows(flat)
