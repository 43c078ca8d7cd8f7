"""Interactive (Plotly) figures of one parallel plan, for the HTML report (rendering only): its
pipeline timeline, memory per stage, iteration-time breakdown, and one layer's operator schedule
on the cores.  Inputs are SI (seconds, bytes); the figures show ms, µs and GiB."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from archplace.placement.pipeline import BREAKDOWN_KEYS
from archplace.placement.pipeline_timeline import (
    PipelineTimeline,
    plan_micro_batches,
    plan_timeline,
    shown_micro_batches,
)
from archplace.placement.plan import PipelineSchedule
from archplace.placement.result import PlanResult
from archplace.reporting.gantt import COLORS, gantt_bars
from archplace.scheduling.problem import ScheduleProblem
from archplace.scheduling.timeline import Schedule
from archplace.workload.graph import CoreType

_GIB = 2.0**30
_MS = 1e3
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "working", "gathered")
"""The parts of :class:`~archplace.placement.result.StageMemory` stacked in the memory chart
(``working`` and ``gathered`` only when some device has them)."""
_MEMORY_COLORS = {"weights": "#4C72B0", "gradients": "#DD8452", "optimizer": "#8172B3",
                  "activations": "#55A868", "working": "#937860", "gathered": "#DA8BC3"}
_PASS_COLORS = {False: "#4C72B0", True: "#DD8452"}
_MARGIN = {"t": 60, "b": 50, "l": 80, "r": 20}
_LAYOUT = {"margin": _MARGIN, "legend": {"orientation": "h", "y": -0.2}}


def _device_label(device: int) -> str:
    return f"device {device}"


def timeline_traces(timeline: PipelineTimeline) -> list[go.Bar]:
    """Bars of ``timeline``: the forward passes, the backward passes, the bubbles (idle), one
    trace each, on one row per device (ms)."""
    traces = []
    for backward in (False, True):
        blocks = [b for b in timeline.blocks if b.backward is backward]
        labels = [str(b.micro_batch) if timeline.chunks == 1
                  else f"{b.micro_batch}.{b.segment // timeline.pp}" for b in blocks]
        traces.append(go.Bar(
            name="backward" if backward else "forward", orientation="h",
            y=[_device_label(b.device) for b in blocks], base=[b.start_s * _MS for b in blocks],
            x=[(b.end_s - b.start_s) * _MS for b in blocks], text=labels, textposition="inside", textangle=0,
            insidetextanchor="middle", marker={"color": _PASS_COLORS[backward],
                                               "line": {"width": 0.5, "color": "white"}},
            customdata=[[b.segment, b.start_s * _MS, b.end_s * _MS] for b in blocks],
            hovertemplate=("micro-batch %{text}, segment %{customdata[0]}<br>"
                           "%{customdata[1]:.3f}–%{customdata[2]:.3f} ms<extra>%{fullData.name}</extra>")))
    gaps = [(d, start, end) for d in range(timeline.pp) for start, end in timeline.bubbles(d)]
    traces.append(go.Bar(
        name="bubble (idle)", orientation="h", y=[_device_label(d) for d, _, _ in gaps],
        base=[start * _MS for _, start, _ in gaps], x=[(end - start) * _MS for _, start, end in gaps],
        marker={"color": "rgba(196, 78, 82, 0.18)", "line": {"width": 0.5, "color": "#C44E52"}},
        hovertemplate="idle %{x:.3f} ms<extra>bubble</extra>"))
    return traces


def timeline_figure(result: PlanResult) -> go.Figure:
    """The pipeline timeline of ``result``'s plan
    (:func:`~archplace.placement.pipeline_timeline.plan_timeline`) with the micro-batches
    :func:`~archplace.placement.pipeline_timeline.shown_micro_batches` keeps; bars are labelled
    with the micro-batch (``mb.chunk`` when interleaved)."""
    plan = result.plan
    if plan.schedule is PipelineSchedule.DUALPIPE:  # its chunk order is not drawn (yet)
        figure = go.Figure()
        figure.update_layout(title=(f"pipeline timeline: dualpipe, pp {plan.pp}: not drawn (its bubble is "
                                    f"{result.breakdown_s['bubble']:.3f} s of the iteration)"), **_LAYOUT)
        return figure
    m = plan_micro_batches(result)
    shown = shown_micro_batches(plan.pp, m)
    timeline = plan_timeline(result, shown)
    figure = go.Figure(timeline_traces(timeline))
    slot_ms = max(t.total_s for t in result.stage_times) * _MS
    schedule = plan.schedule.value + (f" (v={plan.chunks})" if plan.schedule is PipelineSchedule.INTERLEAVED
                                      else "")
    which = f"all {m}" if shown == m else f"the first {shown} of {m}"
    idle = max(timeline.idle_s(d) for d in range(plan.pp)) * _MS
    figure.update_layout(
        title=(f"pipeline timeline: {schedule}, pp {plan.pp}, {which} micro-batches; most idle device "
               f"{idle:.2f} ms, the slowest segment's slot {slot_ms:.3f} ms"),
        barmode="overlay", xaxis_title="time (ms)", height=max(260, 90 + 36 * plan.pp),
        uniformtext={"minsize": 8, "mode": "hide"},
        yaxis={"autorange": "reversed", "type": "category"}, **_LAYOUT)
    return figure


def memory_figure(result: PlanResult, hbm_bytes: float | None = None) -> go.Figure:
    """Memory of each pipeline device (GiB), stacked by kind (:data:`MEMORY_PARTS`), with the
    HBM capacity as a line when ``hbm_bytes`` is given."""
    memory = result.memory
    figure = go.Figure()
    stages = [_device_label(m.stage) for m in memory]
    for part in MEMORY_PARTS:
        values = [getattr(m, part) / _GIB for m in memory]
        if part in ("working", "gathered") and not any(values):
            continue
        figure.add_trace(go.Bar(name=part, x=stages, y=values, marker={"color": _MEMORY_COLORS[part]},
                                hovertemplate=f"{part} %{{y:.2f}} GiB<extra>%{{x}}</extra>"))
    if hbm_bytes is not None:
        figure.add_hline(y=hbm_bytes / _GIB, line={"color": "#C44E52", "dash": "dash"},
                         annotation_text=f"HBM {hbm_bytes / _GIB:.0f} GiB", annotation_position="top left")
    peak = max((m.total for m in memory), default=0.0) / _GIB
    figure.update_layout(title=f"memory per device (largest {peak:.2f} GiB)", barmode="stack",
                         yaxis_title="GiB", height=420, **_LAYOUT)
    return figure


def breakdown_figure(result: PlanResult) -> go.Figure:
    """The iteration time's parts (:data:`~archplace.placement.pipeline.BREAKDOWN_KEYS`, ms) as
    bars, each with its share of the iteration."""
    keys = [k for k in BREAKDOWN_KEYS if k in result.breakdown_s] + \
        [k for k in result.breakdown_s if k not in BREAKDOWN_KEYS]
    values = [result.breakdown_s[k] * _MS for k in keys]
    total = result.iteration_time_s * _MS
    figure = go.Figure(go.Bar(
        x=values, y=keys, orientation="h", marker={"color": "#4C72B0"},
        text=[f"{v:.2f} ms ({v / total:.1%})" if total > 0 else f"{v:.2f} ms" for v in values],
        textposition="auto", hovertemplate="%{y}: %{x:.3f} ms<extra></extra>"))
    figure.update_layout(title=f"iteration time {total:.2f} ms, by part", xaxis_title="ms",
                         yaxis={"autorange": "reversed"}, height=380, showlegend=False, **_LAYOUT)
    return figure


_COMM_PARTS = (("exposed", "#C44E52"), ("hidden", "#8C8C8C"), ("slowed", "#DD8452"))


def comm_figure(result: PlanResult) -> go.Figure:
    """Communication per iteration of the critical device (ms), one stacked bar per kind
    (``result.comm_s``): its exposed part, its hidden part, and the compute time hiding it
    added (``slowed``, :mod:`archplace.placement.interference`; 0 in results without it)."""
    kinds = list(result.comm_s)
    figure = go.Figure()
    for part, color in _COMM_PARTS:
        values = []
        for kind in kinds:
            parts = result.comm_s[kind]
            if part == "hidden":
                value = parts.get("hidden", max(0.0, parts["total"] - parts["exposed"]))
            else:
                value = parts.get(part, 0.0)
            values.append(value * _MS)
        figure.add_trace(go.Bar(x=values, y=kinds, orientation="h", name=part, marker={"color": color},
                                hovertemplate=f"%{{y}} {part}: %{{x:.3f}} ms<extra></extra>"))
    figure.update_layout(title="communication per iteration: exposed, hidden, compute slowed by hiding",
                         xaxis_title="ms", barmode="stack", yaxis={"autorange": "reversed"}, height=380,
                         **_LAYOUT)
    return figure


_CORE_NAMES = {CoreType.TENSOR: "tensor core", CoreType.VECTOR: "vector core", CoreType.FUSED: "fused"}


def layer_schedule_figure(problem: ScheduleProblem, schedule: Schedule, title: str = "") -> go.Figure:
    """The Gantt chart of one layer's schedule, one row per core (µs), as
    :func:`archplace.reporting.gantt.draw_gantt` draws it: an op on all cores of its type spans
    their rows, hatched."""
    rows, bars = gantt_bars(problem, schedule)
    figure = go.Figure()
    for core_type in (CoreType.TENSOR, CoreType.VECTOR, CoreType.FUSED):
        chosen: Sequence = [b for b in bars if b.core_type is core_type]
        if not chosen:
            continue
        figure.add_trace(go.Bar(
            name=_CORE_NAMES[core_type], orientation="h", y=[b.row + (b.height - 1) / 2 for b in chosen],
            base=[b.start_us for b in chosen], x=[b.width_us for b in chosen],
            width=[b.height - 0.2 for b in chosen], text=[b.label for b in chosen],
            marker={"color": COLORS[core_type], "line": {"width": 0.5, "color": "black"},
                    "pattern": {"shape": ["/" if b.all_cores else "" for b in chosen]}},
            textposition="none",
            customdata=[["all cores" if b.all_cores else rows[b.row]] for b in chosen],
            hovertemplate="%{text} on %{customdata[0]}<br>%{base:.2f} µs + %{x:.2f} µs<extra></extra>"))
    makespan_us = schedule.makespan_s * 1e6
    figure.update_layout(
        title=html.escape(title) if title else (
            f"makespan {makespan_us:.1f} µs ({problem.tensor_cores} tensor, {problem.vector_cores} vector "
            "cores; hatched: on all cores)"),
        barmode="overlay", xaxis_title="time (µs)", height=max(300, 100 + 22 * len(rows)),
        yaxis={"tickvals": list(range(len(rows))), "ticktext": rows, "autorange": "reversed"},
        **{**_LAYOUT, "margin": {**_MARGIN, "t": 80}})
    return figure
