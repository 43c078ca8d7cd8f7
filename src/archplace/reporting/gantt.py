"""Gantt chart of a layer schedule: one row per core, time in microseconds.

Single ops are bars on their core's row (a fused op on its tensor and its vector
core); an op on all cores spans every row of its type (fused: of the chip), with
a light band across the whole chart, since nothing else runs meanwhile.  Rows
are drawn for every core up to 32 per type and beyond that for the cores the
schedule uses, so designs with thousands of cores stay readable.  Uses matplotlib's object API (no pyplot,
no global state).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from archplace.base.outputs import replace_atomically
from archplace.reporting.plain import figure_text
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import Schedule
from archplace.workload.graph import CoreType

MAX_ROWS_SHOWN = 32  # per core type; beyond it only the cores the schedule uses get a row
COLORS = {CoreType.TENSOR: "#4C72B0", CoreType.VECTOR: "#DD8452", CoreType.FUSED: "#55A868"}


@dataclass(frozen=True, slots=True)
class GanttBar:
    """One bar of a layer schedule's chart: rows ``row`` .. ``row + height - 1`` (of
    :func:`gantt_bars`' row labels) from ``start_us`` for ``width_us``."""

    row: int
    height: int
    start_us: float
    width_us: float
    core_type: CoreType
    all_cores: bool
    label: str


def gantt_bars(problem: ScheduleProblem, schedule: Schedule) -> tuple[list[str], list[GanttBar]]:
    """The rows (``T0``, ``T1``, ..., ``V0``, ...: tensor then vector cores; module docstring for
    which) and the bars of ``schedule``; ops of zero duration have none."""
    used = {t: min(problem.cores(t), MAX_ROWS_SHOWN) for t in (CoreType.TENSOR, CoreType.VECTOR)}
    for op, placed in zip(problem.ops, schedule.ops, strict=True):
        if placed.mode == "single" and placed.end_s > placed.start_s:
            if op.core_type is CoreType.VECTOR:
                used[CoreType.VECTOR] = max(used[CoreType.VECTOR], (placed.core or 0) + 1)
            else:
                used[CoreType.TENSOR] = max(used[CoreType.TENSOR], (placed.core or 0) + 1)
            if op.core_type is CoreType.FUSED:
                used[CoreType.VECTOR] = max(used[CoreType.VECTOR], (placed.vector_core or 0) + 1)
    rows = [f"T{c}" for c in range(used[CoreType.TENSOR])] + \
        [f"V{c}" for c in range(used[CoreType.VECTOR])]
    tensor_rows = range(used[CoreType.TENSOR])
    vector_rows = range(used[CoreType.TENSOR], len(rows))
    scale = 1e6
    bars = []
    for op, placed in zip(problem.ops, schedule.ops, strict=True):
        width = (placed.end_s - placed.start_s) * scale
        if width <= 0:
            continue
        left = placed.start_s * scale
        if placed.mode == "all":
            span = list(tensor_rows if op.core_type is CoreType.TENSOR else
                        vector_rows if op.core_type is CoreType.VECTOR else range(len(rows)))
            targets = [(span[0], len(span))]
        else:
            first = placed.core or 0
            row = first if op.core_type is not CoreType.VECTOR else used[CoreType.TENSOR] + first
            targets = [(row, 1)]
            if op.core_type is CoreType.FUSED:
                targets.append((used[CoreType.TENSOR] + (placed.vector_core or 0), 1))
        bars += [GanttBar(row, height, left, width, op.core_type, placed.mode == "all", op.name or str(op.id))
                 for row, height in targets]
    return rows, bars


def draw_gantt(problem: ScheduleProblem, schedule: Schedule, path: str | Path,
               title: str = "", image_format: str = "png") -> None:
    """Write the Gantt chart of ``schedule`` (a schedule of ``problem``) to exactly ``path``, in
    ``image_format`` (any format matplotlib writes: ``png``, ``svg``, ``pdf``, ...; check a
    user's path with :func:`archplace.base.outputs.check_image_output` first).

    Raises:
        OSError: the file cannot be written.
        ValueError: a format matplotlib does not know.
    """
    rows, bars = gantt_bars(problem, schedule)
    figure = Figure(figsize=(12, 1.5 + 0.3 * len(rows)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    scale = 1e6
    for bar in bars:
        left, width, row, height = bar.start_us, bar.width_us, bar.row, bar.height
        if bar.all_cores:
            axes.axvspan(left, left + width, color="#cccccc", alpha=0.3, lw=0)
        axes.barh(row + (height - 1) / 2, width, left=left, height=height - 0.2,
                  color=COLORS[bar.core_type], edgecolor="black", linewidth=0.3,
                  hatch="//" if bar.all_cores else None)
        if schedule.makespan_s > 0 and width >= 0.03 * schedule.makespan_s * scale:
            axes.text(left + width / 2, row + (height - 1) / 2, figure_text(bar.label),
                      ha="center", va="center", fontsize=6, clip_on=True)
    axes.set_yticks(range(len(rows)), [figure_text(row) for row in rows])
    axes.invert_yaxis()
    axes.set_xlabel("time (µs)")
    axes.set_xlim(0, max(schedule.makespan_s * scale, 1e-9))
    axes.set_title(figure_text(title) if title else f"makespan {schedule.makespan_s * scale:.1f} µs "
                   f"({problem.tensor_cores} tensor, {problem.vector_cores} vector cores; "
                   "hatched: on all cores)")
    figure.tight_layout()
    replace_atomically(Path(path), lambda handle: figure.savefig(handle, dpi=120, format=image_format),
                       binary=True)  # a failure leaves the file as it was
