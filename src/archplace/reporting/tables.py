"""Rich tables for the CLI (rendering only; no computation)."""

from __future__ import annotations

import csv
from collections import Counter
from typing import IO, Any

from rich.table import Table

from archplace.dse.evaluate import DesignResult, geomean
from archplace.dse.request import SearchResult
from archplace.dse.store import StoredResult
from archplace.placement.plan import Plan
from archplace.reporting.plain import PlainTable

_MIB = 2.0**20
_GIB = 2.0**30


def _degrees(plans: list[Plan], wide: bool, expert_tp: bool = False) -> str:
    """The parallel degrees of each plan (one per model): ``tp/pp/dp``, or ``tp/cp/ep/pp/dp``
    when ``wide``, ``tp/cp/ep/etp/pp/dp`` when ``expert_tp`` too; a plan with hybrid sharding
    over R replicas adds `` hsdpR`` after its DP degree (as
    :func:`~archplace.reporting.plan_tables.plan_label`)."""
    def one(p: Plan) -> str:
        if expert_tp:
            text = f"{p.tp}/{p.cp}/{p.ep}/{p.etp}/{p.pp}/{p.dp}"
        else:
            text = f"{p.tp}/{p.cp}/{p.ep}/{p.pp}/{p.dp}" if wide else f"{p.tp}/{p.pp}/{p.dp}"
        return text + (f" hsdp{p.dp_replicate}" if p.dp_replicate > 1 else "")
    return " | ".join(one(p) for p in plans)


def _plans(r: DesignResult) -> list[Plan]:
    """The plan of each model of a design's result (none when it is infeasible)."""
    if r.best is None:
        return []
    return [c.best.plan for c in (r.components or (r,)) if c.best is not None]


def _wide(results: list[DesignResult]) -> bool:
    """Whether any plan of ``results`` uses context or expert parallelism (cp or ep > 1)."""
    return any(p.cp > 1 or p.ep > 1 or p.etp > 1 for r in results for p in _plans(r))


def _expert_tp(results: list[DesignResult]) -> bool:
    """Whether any plan of ``results`` splits its experts over expert-TP ranks (etp > 1)."""
    return any(p.etp > 1 for r in results for p in _plans(r))


def design_columns(wide: bool, expert_tp: bool = False) -> list[str]:
    """Columns of :func:`search_table` (and of the HTML report's table of designs): the plan's
    degrees as ``tp/pp/dp``, or ``tp/cp/ep/pp/dp`` when ``wide``, ``tp/cp/ep/etp/pp/dp`` when
    ``expert_tp``."""
    degrees = "tp/cp/ep/etp/pp/dp" if expert_tp else "tp/cp/ep/pp/dp" if wide else "tp/pp/dp"
    return ["#", "design", "tensor cores", "vector cores", "buffer", "HBM", "area mm²", "TDP W",
            degrees, "micro-batch", "recompute", "samples/s", "samples/s/W", "MFU"]


DESIGN_COLUMNS = tuple(design_columns(True))
"""Columns of the HTML report's table of designs (the degrees always as ``tp/cp/ep/pp/dp``)."""


def design_cells(label: str, r: DesignResult) -> list[str]:
    """The cells of one design under :data:`DESIGN_COLUMNS`, ``label`` in the first."""
    return _design_row(label, r, wide=True)


def _design_row(label: str, r: DesignResult, wide: bool = False, expert_tp: bool = False) -> list[str]:
    a = r.accelerator
    chip = [label, a.name, f"{a.tensor_cores}×{a.array_rows}×{a.array_cols}",
            f"{a.vector_cores}×{a.vector_lanes}", f"{a.buffer_bytes / _MIB:.0f} MiB",
            f"{a.hbm_bytes / _GIB:.0f} GiB", f"{r.area_mm2:.1f}", f"{r.tdp_w:.0f}"]
    if r.best is None:
        return [*chip, "infeasible", "", "", "0", "", ""]
    parts = r.components or (r,)  # several models: one plan each, figures are geometric means
    plans = _plans(r)
    mfu = geomean([c.best.mfu for c in parts if c.best is not None])
    return [*chip, _degrees(plans, wide, expert_tp),
            " | ".join(str(p.micro_batch) for p in plans), " | ".join(p.recompute.value for p in plans),
            f"{r.throughput_samples_per_s:,.1f}", f"{r.throughput_per_watt:.3g}", f"{mfu:.1%}"]


def search_table(result: SearchResult, top: int) -> Table:
    """The ``top`` best designs (chip, area, TDP, plan, samples/s, per watt, MFU) -- the Pareto
    front for the ``pareto`` objective -- then the baseline; the caption says how the space was
    explored, the CP-SAT re-evaluation and the ratio to the baseline. The plan's degrees read
    ``tp/pp/dp``, or ``tp/cp/ep/pp/dp`` when a plan shown uses cp or ep > 1 (``tp/cp/ep/etp/pp/dp``
    when one uses etp > 1)."""
    pareto = result.objective.value == "pareto"
    table = PlainTable(title=f"{'Pareto front' if pareto else 'best designs'} for {result.model} on "
                        f"{result.devices} devices, global batch {result.global_batch} "
                        f"(objective: {result.objective.value})")
    exact = {r.accelerator.name: r for r in result.exact}
    rows = result.front if pareto else result.evaluated
    shown = [*rows[:top], *([result.baseline] if result.baseline is not None else [])]
    wide, expert_tp = _wide(shown), _expert_tp(shown)
    columns = design_columns(wide, expert_tp)
    if exact:
        columns.append("CP-SAT samples/s")
    longest = max((len(r.accelerator.name) for r in rows[:top]), default=0)
    for name in columns:
        if name == "design":  # never truncate a design's name
            table.add_column(name, justify="left", min_width=longest, no_wrap=True)
        else:
            table.add_column(name, justify="right")
    for i, r in enumerate(rows[:top], 1):
        cells = _design_row(str(i), r, wide, expert_tp)
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
                     f"{'tp/cp/ep/pp/dp' if wide else 'tp/pp/dp'}, micro-batch and recompute per model "
                     "in that order")
    if exact:
        which = "the best design's plan" if len(exact) == 1 else f"the best {len(exact)} designs' plans"
        lines.append(f"CP-SAT samples/s: {which} re-evaluated with exact "
                     f"(CP-SAT) layer schedules instead of list schedules")
    if result.baseline is not None:
        table.add_section()
        table.add_row(*_design_row("base", result.baseline, wide, expert_tp))
        speedup = result.speedup_vs_baseline
        if speedup is not None:
            lines.append(f"best / {result.baseline.accelerator.name}: {speedup:.2f}× "
                         f"{'throughput' if pareto else result.objective.value} on the same cluster, "
                         f"model and plan search")
    table.caption = "\n".join(lines)
    return table


def models_table(rows: list[dict[str, Any]]) -> Table:
    """Model presets."""
    table = PlainTable(title="model presets")
    for name in ("name", "model_type", "layers", "hidden", "seq_len", "source"):
        table.add_column(name)
    for row in rows:
        table.add_row(*(str(row[k]) for k in ("name", "model_type", "layers", "hidden", "seq_len", "source")))
    return table


def hardware_table(rows: list[dict[str, Any]]) -> Table:
    """Hardware presets: whatever fields the preset summaries carry, in their order."""
    table = PlainTable(title="hardware presets")
    keys = list(rows[0]) if rows else []
    for key in keys:
        table.add_column(key)
    for row in rows:
        table.add_row(*(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys))
    return table


def _per_model(values: list[Any]) -> Any:
    """One model's value as is; several models' values joined in model order; None for none."""
    if not values:
        return None
    return values[0] if len(values) == 1 else " | ".join(str(v) for v in values)


def _flat(row: StoredResult, rank: int) -> dict[str, Any]:
    """A stored result as one CSV row: its search, its rank in it, the chip, the plan, the figures
    (plan fields per model in model order when the search had several)."""
    r = row.outcome
    acc = r.accelerator
    bests = [c.best for c in (r.components or (r,)) if c.best is not None] if r.best is not None else []
    plans = [b.plan for b in bests]
    label = row.search.label
    return {"search": row.search.short_id, "models": ", ".join(label.models),
            "objective": label.objective.value, "rank": rank, "design": row.design,
            "feasible": row.feasible, "area_mm2": row.area_mm2,
            "throughput_samples_per_s": row.throughput_samples_per_s,
            "mfu": geomean([b.mfu for b in bests]) if bests else 0.0, "tdp_w": r.tdp_w,
            "throughput_per_watt": r.throughput_per_watt,
            "iteration_time_s": _per_model([b.iteration_time_s for b in bests]),
            "tensor_cores": acc.tensor_cores, "array_rows": acc.array_rows, "array_cols": acc.array_cols,
            "vector_cores": acc.vector_cores, "vector_lanes": acc.vector_lanes,
            "buffer_bytes": acc.buffer_bytes, "hbm_bytes": acc.hbm_bytes,
            "tp": _per_model([p.tp for p in plans]), "pp": _per_model([p.pp for p in plans]),
            "dp": _per_model([p.dp for p in plans]),
            "dp_replicate": _per_model([p.dp_replicate for p in plans]),
            "cp": _per_model([p.cp for p in plans]),
            "ep": _per_model([p.ep for p in plans]), "etp": _per_model([p.etp for p in plans]),
            "micro_batch": _per_model([p.micro_batch for p in plans]),
            "recompute": _per_model([p.recompute.value for p in plans]),
            "infeasible_reason": r.infeasible_reason}


def _ranked(rows: list[StoredResult]) -> list[tuple[int, StoredResult]]:
    """Each row with its rank in its search (rows come search by search, each best first)."""
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        seen[row.search.key] = seen.get(row.search.key, 0) + 1
        out.append((seen[row.search.key], row))
    return out


def results_table(rows: list[StoredResult], title: str, top: int | None = None) -> Table:
    """Stored results in the order of :func:`archplace.front.api.results` (search by search, each best
    first), at most ``top`` per search: rank, search (id and models), design, area, TDP, plan,
    samples/s, samples/s/W, MFU; the caption describes each search. The degrees read
    ``tp/pp/dp``, or ``tp/cp/ep/pp/dp`` when a stored plan uses cp or ep > 1 (``tp/cp/ep/etp/pp/dp``
    when one uses etp > 1)."""
    table = PlainTable(title=title)
    wide, expert_tp = _wide([row.outcome for row in rows]), _expert_tp([row.outcome for row in rows])
    for name in ("#", "search", "design", "area mm²", "TDP W", design_columns(wide, expert_tp)[8],
                 "micro-batch", "recompute",
                 "samples/s", "samples/s/W", "MFU"):
        table.add_column(name, justify="left" if name in ("search", "design") else "right",
                         no_wrap=name == "design")
    ranked = _ranked(rows)
    counts = Counter(row.search.key for row in rows)
    captions: list[str] = []
    for rank, row in ranked:
        search = row.search
        if rank == 1:
            if captions:
                table.add_section()
            label = search.label
            captions.append(f"search {search.short_id}: {', '.join(label.models)} on {label.devices} "
                            f"devices, global batch {label.global_batch}, ranked by {label.objective.value} "
                            f"({counts[search.key]} designs stored)")
        if top is not None and rank > top:
            continue
        r = row.outcome
        chip = [str(rank), f"{search.short_id} {', '.join(search.label.models)}", row.design,
                f"{row.area_mm2:.1f}", f"{r.tdp_w:.0f}"]
        if r.best is None:
            table.add_row(*chip, "infeasible", "", "", "0", "0", "")
            continue
        bests = [c.best for c in (r.components or (r,)) if c.best is not None]
        plans = [b.plan for b in bests]
        table.add_row(*chip, _degrees(plans, wide, expert_tp),
                      " | ".join(str(p.micro_batch) for p in plans),
                      " | ".join(p.recompute.value for p in plans),
                      f"{row.throughput_samples_per_s:,.1f}", f"{r.throughput_per_watt:.3g}",
                      f"{geomean([b.mfu for b in bests]):.1%}")
    table.caption = "\n".join(captions)
    return table


def write_results_csv(rows: list[StoredResult], handle: IO[str]) -> None:
    """Every stored result as one CSV row (search, rank in it, chip fields, plan, figures), in the
    order of :func:`archplace.front.api.results`, to a text file opened with ``newline=""``."""
    flat = [_flat(row, rank) for rank, row in _ranked(rows)]
    writer = csv.DictWriter(handle, fieldnames=list(flat[0]) if flat else ["search", "rank", "design"])
    writer.writeheader()
    writer.writerows(flat)
