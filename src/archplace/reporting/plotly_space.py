"""Interactive (Plotly) plots of a searched design space, for the HTML report (rendering only):
training throughput against die area and against TDP, every feasible design a point, the
Pareto front of (throughput, area, TDP) highlighted, the best design and the baseline marked;
hovering a point shows the design and its best plan.  Units: samples/s, mm², W."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import pareto_front
from archplace.reporting.plan_tables import plan_label

FRONT_NAME = "Pareto front (throughput, area, TDP)"
AXES = {"area_mm2": "die area (mm²)", "tdp_w": "TDP (W)"}
"""The x axes of the two plots: the DesignResult attribute and its label."""


def design_hover(result: DesignResult) -> str:
    """The hover text of a design: its name, figures and best plan (HTML line breaks)."""
    acc = result.accelerator
    lines = [f"<b>{html.escape(acc.name)}</b>",
             f"{acc.tensor_cores} tensor cores {acc.array_rows}×{acc.array_cols}, "
             f"{acc.vector_cores} vector cores × {acc.vector_lanes} lanes",
             f"area {result.area_mm2:.1f} mm², TDP {result.tdp_w:.0f} W, "
             f"HBM {acc.hbm_bytes / 2**30:.0f} GiB",
             f"{result.throughput_samples_per_s:,.1f} samples/s, "
             f"{result.throughput_per_watt:.3g} samples/s/W"]
    parts = result.components or (result,)
    for part in parts:
        if part.best is not None:
            prefix = f"{html.escape(part.model)}: " if part.model else "plan: "
            lines.append(f"{prefix}{plan_label(part.best)}, MFU {part.best.mfu:.1%}")
    return "<br>".join(lines)


def _trace(designs: Sequence[DesignResult], attribute: str, name: str, marker: dict[str, object]
           ) -> go.Scatter:
    return go.Scatter(x=[getattr(r, attribute) for r in designs],
                      y=[r.throughput_samples_per_s for r in designs], mode="markers", name=name,
                      marker=marker, text=[design_hover(r) for r in designs],
                      hovertemplate="%{text}<extra></extra>")


def design_space_figures(results: Sequence[DesignResult], *, best: DesignResult | None = None,
                         baseline: DesignResult | None = None) -> list[go.Figure]:
    """Two figures, samples/s against die area (mm²) and against TDP (W).

    Args:
        results: evaluated designs; infeasible ones (no plan fits) are not drawn (the titles
            count them).
        best: the design the search chose (a star), if any.
        baseline: the reference design (a diamond), if any.

    Returns:
        ``[area figure, TDP figure]``; each has the traces ``designs`` (the feasible designs off
        the front), :data:`FRONT_NAME`, then ``best`` and the baseline's name when given.
    """
    feasible = [r for r in results if r.best is not None]
    front = pareto_front(feasible)
    on_front = {r.accelerator.name for r in front}
    rest = [r for r in feasible if r.accelerator.name not in on_front]
    dropped = len(results) - len(feasible)
    figures = []
    for attribute, label in AXES.items():
        figure = go.Figure()
        figure.add_trace(_trace(rest, attribute, "designs", {"size": 6, "color": "#9aa5b1", "opacity": 0.6}))
        figure.add_trace(_trace(front, attribute, FRONT_NAME,
                                {"size": 9, "color": "#4C72B0", "line": {"width": 1, "color": "#1f3a60"}}))
        if best is not None and best.best is not None:
            figure.add_trace(_trace([best], attribute, "best",
                                    {"size": 18, "symbol": "star", "color": "#C44E52"}))
        if baseline is not None and baseline.best is not None:
            figure.add_trace(_trace([baseline], attribute, html.escape(baseline.accelerator.name),
                                    {"size": 12, "symbol": "diamond", "color": "#55A868"}))
        suffix = f"; {dropped} infeasible not shown" if dropped else ""
        figure.update_layout(title=f"throughput against {label}: {len(feasible)} designs{suffix}",
                             xaxis_title=label, yaxis_title="training throughput (samples/s)",
                             height=480, margin={"t": 60, "b": 50, "l": 70, "r": 20},
                             legend={"orientation": "h", "y": -0.18}, hovermode="closest")
        figures.append(figure)
    return figures
