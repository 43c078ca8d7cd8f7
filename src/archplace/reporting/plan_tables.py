"""Rich tables of parallel plans (``archplace plan`` and ``archplace evaluate``): rendering only.

Each function takes :class:`~archplace.placement.result.PlanResult` objects (SI units inside) and
returns :class:`rich.table.Table` objects whose cells show seconds, milliseconds or GiB as their
titles say; nothing is computed here but the formatting.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from archplace.placement.choices import PipelineSchedule
from archplace.placement.pipeline import device_segments
from archplace.placement.result import PlanResult, StageTime
from archplace.reporting.plain import PlainTable

_GIB = 2.0**30


def plan_label(result: PlanResult) -> str:
    """One line naming ``result``'s plan: ``tp2 cp2 ep4 pp4 dp8 b=2 1f1b recompute=selective``
    (``cpN``, ``epN`` and ``etpN`` only when above 1, so a dense plan reads ``tp2 pp4 dp8 ...``;
    ``hsdpR`` after the DP degree for hybrid sharding over R replicas) then
    ``v=CHUNKS`` (interleaved) and the flags ``sp``, ``zeroN`` (the ZeRO stage, when above 0),
    ``overlap``, ``sync=WHEN`` (the gradient synchronisation, when not auto), ``fp8`` (the
    precision, when not bf16) that are on."""
    p = result.plan
    optional = (("cp", p.cp), ("ep", p.ep), ("etp", p.etp))
    degrees = [f"tp{p.tp}", *(f"{name}{value}" for name, value in optional if value > 1),
               f"pp{p.pp}", f"dp{p.dp}", *([f"hsdp{p.dp_replicate}"] if p.dp_replicate > 1 else [])]
    parts = [" ".join(degrees), f"b={p.micro_batch}", p.schedule.value]
    if p.chunks > 1:
        parts.append(f"v={p.chunks}")
    parts.append(f"recompute={p.recompute.value}")
    sync = p.grad_sync.value
    parts += [flag for flag, on in (("sp", p.sp), (f"zero{p.zero_stage}", p.zero_stage > 0),
                                    ("overlap", p.dp_overlap), (f"sync={sync}", sync != "auto"),
                                    ("fp8", p.precision.value == "fp8"))
              if on]
    return " ".join(parts)


def summary_table(results: list[PlanResult], title: str) -> Table:
    """One row per plan of ``results``, numbered from 1 in the given order: the plan, iteration
    time (s), samples/s, tokens/s, model TFLOP/s per device, MFU, HFU and the largest memory of
    any device (GiB)."""
    table = PlainTable(title=title)
    for column in ("#", "plan", "iteration s", "samples/s", "tokens/s", "TFLOP/s per device", "MFU",
                   "HFU", "max memory GiB"):
        table.add_column(column, justify="left" if column == "plan" else "right")
    for i, r in enumerate(results, 1):
        peak = max((m.total for m in r.memory), default=0.0)
        table.add_row(str(i), plan_label(r), f"{r.iteration_time_s:.3f}",
                      f"{r.throughput_samples_per_s:,.1f}", f"{r.tokens_per_s:,.0f}",
                      f"{r.model_flop_per_s_per_device / 1e12:.1f}", f"{r.mfu:.1%}", f"{r.hfu:.1%}",
                      f"{peak / _GIB:.1f}")
    return table


def detail_tables(result: PlanResult) -> list[Table]:
    """The four tables that explain one plan, in print order: the iteration time breakdown (s and
    share; every part the result has, e.g. ``cp_comm`` and ``ep_comm`` with context and expert
    parallelism), :func:`comm_table`, :func:`stage_time_table` and the memory per device (GiB by kind,
    with the layers each device holds)."""
    breakdown = PlainTable(title="iteration time breakdown")
    breakdown.add_column("part")
    breakdown.add_column("seconds", justify="right")
    breakdown.add_column("share", justify="right")
    for part, seconds in result.breakdown_s.items():
        if _unused(result, part.removesuffix("_comm"), seconds):
            continue
        breakdown.add_row(part, f"{seconds:.4f}", f"{seconds / result.iteration_time_s:.1%}")
    memory = PlainTable(title="memory per device (GiB)")
    for column in ("stage", "layers", "weights", "gradients", "optimizer", "activations", "gathered",
                   "total"):
        memory.add_column(column, justify="right")
    stages = result.plan.ranges
    for m in result.memory:  # interleaved: chunks j, j + pp, ...; DualPipe: stages j and pp - 1 - j
        own = device_segments(result.plan, m.stage)
        layers = ", ".join(f"{stages[c][0]}–{stages[c][1]}" for c in own)
        if result.plan.stage_layers:  # a layer-graph plan names its layers
            layers = ", ".join(name for c in own for name in result.plan.stage_layers[c])
        memory.add_row(str(m.stage), layers, *(f"{v / _GIB:.2f}" for v in
                                                 (m.weights, m.gradients, m.optimizer, m.activations,
                                                  m.gathered, m.total)))
    return [breakdown, comm_table(result), stage_time_table(result), memory]


def _unused(result: PlanResult, kind: str, seconds: float) -> bool:
    """Whether ``kind`` is context or expert parallelism the plan does not use (degree 1, no
    time): its rows are left out of the tables (the JSON keeps them)."""
    degree = {"cp": result.plan.cp, "ep": result.plan.ep}.get(kind)
    return degree == 1 and seconds == 0.0


def comm_table(result: PlanResult) -> Table:
    """Communication of the critical device per iteration: all of it, its exposed and hidden
    parts, and the compute time hiding it added (``slowed``; 0 in results written before it was
    modelled), for every kind the result has (tp, pp, dp; cp and ep with context and expert
    parallelism)."""
    table = PlainTable(title="communication per iteration (s; exposed = not hidden behind computation, "
                             "slowed = compute time added by hiding it)")
    for column in ("kind", "total", "exposed", "hidden", "slowed"):
        table.add_column(column, justify="right")
    for kind, parts in result.comm_s.items():
        total, exposed = parts["total"], parts["exposed"]
        if _unused(result, kind, total):
            continue
        hidden = parts.get("hidden", max(0.0, total - exposed))
        table.add_row(kind, f"{total:.4f}", f"{exposed:.4f}", f"{hidden:.4f}",
                      f"{parts.get('slowed', 0.0):.4f}")
    return table


def stage_time_table(result: PlanResult) -> Table:
    """Time per micro-batch of every segment (stage or interleaved chunk); * marks the slowest.

    Columns: its compute (forward + backward, collectives in the layers included) and of it the
    TP collectives, and, when the plan has them, the context-parallel and expert all-to-all
    shares; recomputation; pipeline sends; with ZeRO-2/3 the per-layer collectives left exposed
    plus the compute their hidden part slowed (``ZeRO comm``; ``DP comm`` at stages 0 and 1
    reducing every micro-batch, ``Plan.grad_sync``); the total, which is compute + recompute +
    p2p + ZeRO comm (:attr:`~archplace.placement.result.StageTime.total_s`)."""
    table = PlainTable(title="time per micro-batch of each stage (ms; * the slowest, which sets the pace)")
    times = result.stage_times
    parts: list[tuple[str, Callable[[StageTime], float]]] = [
        ("compute", lambda t: t.compute_s), ("of it TP comm", lambda t: t.tp_comm_s)]
    if any(t.cp_comm_s for t in times):
        parts.append(("of it CP comm", lambda t: t.cp_comm_s))
    if any(t.ep_comm_s for t in times):
        parts.append(("of it EP comm", lambda t: t.ep_comm_s))
    parts += [("recompute", lambda t: t.recompute_s), ("p2p", lambda t: t.p2p_s)]
    if any(t.dp_comm_s or t.dp_slowed_s for t in times):
        name = "ZeRO comm" if result.plan.zero_stage >= 2 else "DP comm"
        parts.append((name, lambda t: t.dp_comm_s + t.dp_slowed_s))
    for column in ("segment", "device", "layers", *(name for name, _ in parts), "total"):
        table.add_column(column, justify="right")
    plan = result.plan
    slowest = max((t.total_s for t in times), default=0.0)
    for i, (t, (first, last)) in enumerate(zip(times, plan.ranges, strict=True)):
        layers = ", ".join(plan.stage_layers[i]) if plan.stage_layers else f"{first}–{last}"
        mark = " *" if t.total_s == slowest else ""
        device = (f"{i}, {plan.pp - 1 - i}" if plan.schedule is PipelineSchedule.DUALPIPE  # both directions
                  else str(i % plan.pp))
        table.add_row(str(i), device, layers, *(f"{part(t) * 1e3:.3f}" for _, part in parts),
                      f"{t.total_s * 1e3:.3f}{mark}")
    return table
