"""Rich table of ``archplace schedule``: the figures of one layer schedule (rendering only)."""

from __future__ import annotations

from rich.table import Table

from archplace.reporting.plain import PlainTable
from archplace.scheduling.base import ScheduleResult
from archplace.scheduling.problem import ScheduleProblem


def schedule_table(problem: ScheduleProblem, result: ScheduleResult, source: str) -> Table:
    """Figure and value of one layer schedule: ``source`` (where ``problem`` came from), its size,
    the makespan and lower bound (ms), whether optimality is proven, the gap (%), how many ops run
    on one core and on all cores, and the solve time (s)."""
    modes = {"single": 0, "all": 0}
    for placed in result.schedule.ops:
        modes[placed.mode] += 1
    table = PlainTable(title=f"layer schedule ({result.backend})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("problem", source)
    table.add_row("size", f"{len(problem.ops)} ops, {problem.tensor_cores} tensor + "
                          f"{problem.vector_cores} vector cores")
    table.add_row("makespan", f"{result.makespan_s * 1e3:.4f} ms")
    table.add_row("lower bound", f"{result.lower_bound_s * 1e3:.4f} ms")
    table.add_row("optimal", "yes (proven)" if result.optimal else "not proven")
    table.add_row("gap", f"{100 * result.gap:.3f} %")
    table.add_row("ops on one core", str(modes["single"]))
    table.add_row("ops on all cores", str(modes["all"]))
    table.add_row("solve time", f"{result.solve_time_s:.3f} s")
    return table
