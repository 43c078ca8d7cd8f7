"""Time and memory of one parallel plan.

Segments: the plan's ``stages`` are s = pp * v contiguous layer ranges (v = chunks, 1 unless
interleaved); segment c runs on pipeline device c % pp. Per micro-batch, segment c takes

    T_c = compute_c + recompute_c + p2p_c

with compute = sum(fwd_s + bwd_s) of its layers (TP collectives included), recompute = sum(fwd_s)
under full recomputation, sum(selective_recompute_s) under selective recomputation, else 0, and
p2p_c = p2p_in + p2p_out: every boundary the segment touches, in both directions. A boundary
carrying b bytes (``boundary_bytes`` of the layer before it) costs 2 (alpha + b / beta) per
micro-batch to each of its two segments: the sender sends the activation forward and receives
its gradient back, the receiver receives the activation and sends the gradient back. Both
sides pay it because Megatron-LM's 1F1B schedule exchanges them with blocking, batched
point-to-point operations (``send_forward_recv_backward`` / ``send_backward_recv_forward`` in
``megatron/core/pipeline_parallel/schedules.py``: a stage cannot start its next forward before
its activation has arrived, nor its backward before the gradient has; Narayanan et al. 2021,
sections 2.2 and 4.1), in warm-up and cool-down as in the steady state, and at every chunk
boundary of the interleaved schedule. So the first segment pays its output boundary, the last
its input boundary (the LM head waits for its input too), the others both; p2p_c > 0 for every
segment when pp > 1 (links in :mod:`archplace.placement.timing`; with tp > 1 and no sequence
parallelism the scatter/gather of Narayanan et al. 2021, section 4.1, applies).

Iteration time (the pipeline advances at the pace of the slowest device; a device's pace per
micro-batch and chunk slot is the mean time of its segments, T_j = (sum of T_c over the v
segments c of device j) / v, and T = max_j T_j)::

    (v m + p - 1) * T                pipeline: GPipe and 1F1B have v = 1, a bubble of p - 1 stage
                                     times and m micro-batches (Narayanan et al. 2021, section
                                     2.2.1); interleaving runs v m chunk slots and shrinks the
                                     bubble to (p - 1)/v device times of v T (section 2.2.2),
                                     with a p2p at every chunk boundary (v times as many)
    + max over devices of (exposed DP traffic + compute slowed by the hidden DP traffic
      + optimizer step)

with m micro-batches per pipeline (:func:`~archplace.placement.timing.micro_batch_count`). With
``TrainingSetup.pp_comm_overlap`` (Megatron-Core's ``overlap_p2p_comm``, valid with the
interleaved schedule only: ``megatron/core/pipeline_parallel/schedules.py`` posts the next
chunk's sends and receives asynchronously and waits for them just before they are needed) an
interleaved segment's sends overlap its computation: T_c = max(compute_c + recompute_c, p2p_c)
(+ its exposed ZeRO-2/3 collectives), p2p_c = what sticks out; GPipe and 1F1B keep them
blocking. The SMs NCCL's send/receive kernels take are not charged. Interleaved, a device runs
its v chunks one after another for every micro-batch, so its own work is m times the sum of its
chunks' times whatever their split: a chunk slower than the others (the one with the LM head, or
the embedding) delays its device by its own excess once per micro-batch, not every chunk slot.
Played out op by op in Megatron-LM's interleaved order
(:func:`archplace.placement.pipeline_timeline.simulate_pipeline`), this pace agrees with the
schedule's makespan to within 0.5 % on the published runs with one block per chunk (Nemotron-22B
p 4 v 10: 3.748 s against 3.733 s; charging every chunk slot at the slowest chunk, as before,
gave 13.5 s) and exactly for equal chunks. For device j with parameters P_j and last-micro-batch
backward time B_j (the sums over its segments of sum(bwd_s) + recompute of their layers): the
once-per-iteration DP traffic of its ZeRO stage (:mod:`archplace.placement.zero`: the gradient
all-reduce for stage 0, reduce-scatter + parameter all-gather for stage 1, the all-gather for
stage 2, none for stage 3), exposed whole, or with ``dp_overlap`` the gradient reduction
bucketed over B_j; and the memory-bound optimizer step of P_j (P_j / dp with ZeRO stages >= 1);
without overlap the device with the most parameters decides. ZeRO-2 and 3 add, per micro-batch,
the exposed part of the segment's per-layer collectives, prefetched over each pass
(:func:`~archplace.placement.zero.segment_zero_comm_s`), to its time T_c (``StageTime.dp_comm_s``).
``Plan.grad_sync`` moves the gradient reduction between the two (:mod:`archplace.placement.zero`,
"gradient synchronisation"): with ``iteration`` ZeRO-2/3's reduce-scatters leave T_c and one per
iteration joins the tail; with ``micro_batch`` stages 0 and 1 reduce every micro-batch, each
segment's reduction after its backward pass in T_c
(:func:`~archplace.placement.zero.micro_batch_reduce_s`), the tail keeping stage 1's all-gather.

Hidden DP traffic is not free (:mod:`archplace.placement.interference`): the bucketed gradient
reduction and the ZeRO-2/3 per-layer collectives slow the compute they overlap, by max(0, L -
exposed), L the compute-seconds the collectives take while they run (``setup.interference``), added
to the device's tail and to T_c (``StageTime.dp_slowed_s``). The optimizer step streams its bytes
at ``setup.step_bandwidth_bytes_per_s`` (datasheet x the chip's ``efficiency.hbm``).

GPipe and 1F1B take the same time and differ in memory (micro-batches in flight); memory and
the rule for whether a plan fits are in :mod:`archplace.placement.memory` and
:func:`check_fits`.

Breakdown (summed left to right in :data:`BREAKDOWN_KEYS` order to give the iteration time),
with b the bottleneck device (largest pace T_j, the first on ties; each of its figures the mean
over its segments, :func:`device_paces`) and e the device with the largest DP + optimizer tail:
compute = v m (compute_b - tp_comm_b - cp_comm_b - ep_comm_b), tp_comm = v m tp_comm_b, cp_comm =
v m cp_comm_b, ep_comm = v m ep_comm_b (the layers' exposed ring attention and expert all-to-all
shares), recompute = v m recompute_b, pp_comm = v m p2p_b, bubble = (p - 1) T_b, dp_comm = v m
dp_comm_b + the exposed DP traffic of device e, overlap_slowdown = v m dp_slowed_b + the compute
slowed by device e's hidden DP traffic, optimizer of device e.

EP overlap (``ep_comm_overlap``, :mod:`archplace.placement.ep_overlap`): the layers' times are
their passes' when paired with another micro-batch's; the W0 warm-up and cool-down chunk slots of
device 0 run unpaired, adding W0 times the bottleneck device's per-slot saving s_b (its hidden
all-to-alls h_b, less the computation hiding them slows, e_b): (v m + p - 1) T + W0 s_b. In the
breakdown, with W = min(W0, v m): compute loses v m e_b, ep_comm gains W h_b, overlap_slowdown
gains (v m - W) e_b, and the bubble gains (W0 - W) s_b (GPipe, which pairs nothing).

Context and expert parallelism (:mod:`archplace.placement.layout`): a plan occupies
tp * cp * pp * dp devices; the dense parameters' DP traffic and ZeRO shards are over the DP x CP
group (dp * cp ranks), the routed experts' (``LayerCost.expert_params``) over the
expert-data-parallel group (tp * cp * dp / (etp * ep) ranks), each a collective of its own; the rank
order (``TrainingSetup.rank_order``) decides the links of those groups and of the pipeline
sends. With hybrid sharding (``Plan.dp_replicate`` r > 1) ZeRO shards over each group's shard
groups of 1/r of its ranks, and the tail adds the replicas' gradient all-reduce
(:func:`archplace.placement.zero.dp_tail_comm_s`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from archplace.base.errors import ConfigError, InternalError, OutOfMemoryError, SolverError
from archplace.base.fields import plain
from archplace.base.units import format_bytes
from archplace.hw.cluster import Cluster
from archplace.placement.dualpipe_time import dualpipe_figures
from archplace.placement.ep_overlap import check_recompute, unpaired_slots
from archplace.placement.interference import NO_INTERFERENCE, Interference
from archplace.placement.layout import RankLayout
from archplace.placement.memory import (
    dualpipe_device_memory,
    in_flight_micro_batches,
    interleaved_device_memory,
    sequential_sum,
    stage_memory,
)
from archplace.placement.plan import (
    SETUP_FIELDS,
    GradSync,
    LayerCost,
    PipelineSchedule,
    Plan,
    RankOrder,
    Recompute,
    TrainingSetup,
)
from archplace.placement.result import PlanResult, StageMemory, StageTime
from archplace.placement.timing import (
    micro_batch_count,
    micro_batch_group_size,
    optimizer_step_time_s,
    pipeline_p2p_time_s,
)
from archplace.placement.zero import (
    dp_tail_comm_s,
    micro_batch_reduce_s,
    reduces_every_micro_batch,
    segment_zero_comm_s,
)

BREAKDOWN_KEYS = ("compute", "bubble", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm",
                  "overlap_slowdown", "optimizer")
"""Keys of ``PlanResult.breakdown_s``, in the order they are summed (``overlap_slowdown``: the
compute time added by hiding communication, :mod:`archplace.placement.interference`)."""


def micro_batches(setup: TrainingSetup, plan: Plan) -> int:
    """m, micro-batches per pipeline per iteration (see ``timing.micro_batch_count``).

    Raises:
        ConfigError: the plan's micro-batch and dp do not suit the global batch.
    """
    return micro_batch_count(setup, micro_batch=plan.micro_batch, dp=plan.dp, pp=plan.pp,
                             schedule=plan.schedule)


def validate_plan(plan: Plan, n_layers: int, setup: TrainingSetup) -> None:
    """Check that a plan fits a chain of ``n_layers`` layers, the cluster and the batch.

    (Positive degrees, the stage count and contiguity are checked when the Plan is built.)

    Raises:
        ConfigError: no layers, stages not covering layers 0..n_layers-1, more devices than the
            cluster has, a rank order other than the setup's, or a micro-batch count the batch
            does not allow.
    """
    if n_layers < 1:
        raise ConfigError("placement needs at least one layer")
    last = plan.ranges[-1][1]
    if last != n_layers - 1:
        raise ConfigError(f"plan: stages cover layers 0..{last} but the chain has {n_layers} "
                          f"layers (0..{n_layers - 1})")
    if plan.devices > setup.cluster.devices:
        if plan.cp == 1:
            raise ConfigError(f"plan: tp*pp*dp = {plan.tp}*{plan.pp}*{plan.dp} = {plan.devices} "
                              f"exceeds the cluster's {setup.cluster.devices} devices")
        raise ConfigError(f"plan: tp*cp*pp*dp = {plan.tp}*{plan.cp}*{plan.pp}*{plan.dp} = {plan.devices} "
                          f"exceeds the cluster's {setup.cluster.devices} devices")
    for name in SETUP_FIELDS:  # the setup prices them: a plan must agree
        mine, priced = getattr(plan, name), getattr(setup, name)
        if mine != priced:
            raise ConfigError(f"plan: {name} {plain(mine)} but the setup prices {plain(priced)}: "
                              f"give both the same")
    RankLayout.of(plan, setup.rank_order)  # etp * ep divides tp * cp * dp (per replica with HSDP)
    micro_batches(setup, plan)


def stage_times(layers: Sequence[LayerCost], plan: Plan, cluster: Cluster, *,
                grad_bytes: int, rank_order: RankOrder = RankOrder.TP_CP_EP_PP_DP,
                interference: Interference = NO_INTERFERENCE,
                pp_overlap: bool = False) -> tuple[StageTime, ...]:
    """Per-micro-batch time of every segment of a (valid) plan; see the module docstring
    (``grad_bytes``: bytes per gradient element of the ZeRO-2/3 reduce-scatters; ``rank_order``:
    the layout of the groups, :mod:`archplace.placement.layout`; ``interference``: the compute
    the hidden ZeRO-2/3 collectives slow, :mod:`archplace.placement.interference`;
    ``pp_overlap``: an interleaved plan's pipeline sends overlap the computation, only what
    sticks out of the segment's compute counts, ``TrainingSetup.pp_comm_overlap``). The
    per-micro-batch DP traffic follows ``plan.grad_sync`` (module docstring)."""
    times = []
    n_segments = len(plan.ranges)
    layout = RankLayout.of(plan, rank_order)
    experts = any(layer.expert_params for layer in layers)
    sharded = layout.dense_shards > 1 or (experts and layout.expert_shards > 1)
    per_layer_zero = plan.zero_stage >= 2 and sharded  # ZeRO-2/3 collectives in each layer
    # stages 0 and 1 reducing every micro-batch: each segment's reduction after its backward pass
    per_batch_reduce = (plan.zero_stage <= 1 and sharded
                        and reduces_every_micro_batch(plan.zero_stage, plan.grad_sync))
    cost, expert_cost = (layout.shard_costs(cluster, experts) if per_layer_zero or per_batch_reduce
                         else ((0.0, 0.0), (0.0, 0.0)))
    stride = layout.pp_stride
    for c, (first, last) in enumerate(plan.ranges):
        stage = layers[first:last + 1]
        fwd = sequential_sum(layer.fwd_s for layer in stage)
        bwd = sequential_sum(layer.bwd_s for layer in stage)
        tp_comm = (sequential_sum(layer.tp_comm_fwd_s for layer in stage)
                   + sequential_sum(layer.tp_comm_bwd_s for layer in stage))
        cp_comm = (sequential_sum(layer.cp_comm_fwd_s for layer in stage)
                   + sequential_sum(layer.cp_comm_bwd_s for layer in stage))
        ep_comm = (sequential_sum(layer.ep_comm_fwd_s for layer in stage)
                   + sequential_sum(layer.ep_comm_bwd_s for layer in stage))
        ep_hidden = sequential_sum(layer.ep_comm_hidden_s for layer in stage)
        ep_slowed = sequential_sum(layer.ep_overlap_slowed_s for layer in stage)
        if plan.recompute is Recompute.FULL:
            recompute = fwd
        elif plan.recompute is Recompute.SELECTIVE:
            recompute = sequential_sum(layer.selective_recompute_s for layer in stage)
        else:
            recompute = 0.0
        p2p_in = (pipeline_p2p_time_s(cluster, plan.tp, layers[first - 1].boundary_bytes,
                                      pp=plan.pp, segment=c - 1, chunks=plan.chunks,
                                      scatter_gather=not plan.sp, stride=stride)
                  if c > 0 else 0.0)
        p2p_out = (pipeline_p2p_time_s(cluster, plan.tp, layers[last].boundary_bytes, pp=plan.pp,
                                       segment=c, chunks=plan.chunks, scatter_gather=not plan.sp,
                                       stride=stride)
                   if c < n_segments - 1 else 0.0)
        p2p = p2p_in + p2p_out
        if pp_overlap and plan.chunks > 1:  # only what sticks out of the compute (module docstring)
            p2p = max(fwd + bwd + recompute, p2p) - (fwd + bwd + recompute)
        if per_layer_zero:  # the segment's tables, entry [0, last]: as the placement tables'
            zero = segment_zero_comm_s(
                cost, zero_stage=plan.zero_stage, grad_bytes=grad_bytes, dp=layout.dense_shards,
                params=np.array([float(layer.params - layer.expert_params) for layer in stage]),
                fwd_s=np.array([layer.fwd_s for layer in stage]),
                backward_s=np.array([layer.bwd_s + layer.recompute_s(plan.recompute) for layer in stage]),
                expert_cost=expert_cost, expert_dp=layout.expert_shards,
                expert_params=np.array([float(layer.expert_params) for layer in stage]) if experts else None,
                interference=interference, grad_sync=plan.grad_sync)
            dp_comm, dp_total = float(zero.exposed[0, -1]), float(zero.total[0, -1])
            dp_slowed = float(zero.slowed[0, -1])
        elif per_batch_reduce:  # as the placement tables' (dense and expert sums, in integers)
            dense = expert = 0
            for layer in stage:
                dense += layer.params - layer.expert_params
                expert += layer.expert_params
            reduce = micro_batch_reduce_s(
                cost, zero_stage=plan.zero_stage, grad_bytes=grad_bytes, dp=layout.dense_shards,
                params=float(dense), backward_s=bwd + recompute, overlap=plan.dp_overlap,
                expert_cost=expert_cost, expert_dp=layout.expert_shards, expert_params=float(expert),
                interference=interference, replicas=layout.replicate, grad_sync=plan.grad_sync)
            dp_comm, dp_total, dp_slowed = float(reduce.exposed), float(reduce.total), float(reduce.slowed)
        else:
            dp_comm = dp_total = dp_slowed = 0.0
        times.append(StageTime(compute_s=fwd + bwd, recompute_s=recompute, p2p_s=p2p,
                               tp_comm_s=tp_comm, backward_s=bwd + recompute,
                               dp_comm_s=dp_comm, dp_comm_total_s=dp_total,
                               cp_comm_s=cp_comm, ep_comm_s=ep_comm, dp_slowed_s=dp_slowed,
                               ep_comm_hidden_s=ep_hidden, ep_slowed_s=ep_slowed))
    return tuple(times)


def device_segments(plan: Plan, device: int) -> tuple[int, ...]:
    """The segments pipeline device ``device`` runs: c = device, device + pp, ... (v of them
    interleaved, one otherwise); under DualPipe its forward-direction stage ``device`` and its
    reverse-direction stage pp - 1 - device (:mod:`archplace.placement.dualpipe`)."""
    if plan.schedule is PipelineSchedule.DUALPIPE:
        return device, plan.pp - 1 - device
    return tuple(range(device, len(plan.ranges), plan.pp))


def plan_memory(layers: Sequence[LayerCost], setup: TrainingSetup,
                plan: Plan) -> tuple[StageMemory, ...]:
    """Memory of one device of every pipeline device (stage) of a (valid) plan."""
    m = micro_batches(setup, plan)
    layout = RankLayout.of(plan, setup.rank_order)
    sharding: dict[str, Any] = {"zero_stage": plan.zero_stage, "dp": layout.dense_shards,
                                "grad_bytes": setup.grad_bytes, "expert_dp": layout.expert_shards,
                                "grad_sync": plan.grad_sync}
    if plan.schedule is PipelineSchedule.DUALPIPE:
        pairs = [(plan.ranges[j], plan.ranges[plan.pp - 1 - j]) for j in range(plan.pp)]
        return tuple(
            dualpipe_device_memory((layers[a[0]:a[1] + 1], layers[b[0]:b[1] + 1]), device=j, pp=plan.pp,
                                   micro_batches=m, recompute=plan.recompute, optimizer=setup.optimizer,
                                   **sharding)
            for j, (a, b) in enumerate(pairs))
    if plan.schedule is not PipelineSchedule.INTERLEAVED:
        return tuple(
            stage_memory(layers[first:last + 1], stage=j,
                         in_flight=in_flight_micro_batches(j, plan.pp, m, plan.schedule),
                         recompute=plan.recompute, optimizer=setup.optimizer, **sharding)
            for j, (first, last) in enumerate(plan.ranges))
    return tuple(
        interleaved_device_memory(
            [layers[first:last + 1] for first, last in plan.ranges[j::plan.pp]], device=j,
            pp=plan.pp, micro_batches=m, recompute=plan.recompute, optimizer=setup.optimizer,
            **sharding)
        for j in range(plan.pp))


def _plan_label(plan: Plan) -> str:
    label = (f"tp={plan.tp}" + (f" cp={plan.cp}" if plan.cp > 1 else "")
             + (f" ep={plan.ep}" if plan.ep > 1 else "") + (f" etp={plan.etp}" if plan.etp > 1 else "")
             + f" pp={plan.pp} dp={plan.dp}"
             + (f" dp_replicate={plan.dp_replicate}" if plan.dp_replicate > 1 else "")
             + f" micro_batch={plan.micro_batch} "
             f"recompute={plan.recompute.value} schedule={plan.schedule.value}")
    if plan.chunks > 1:
        label += f" chunks={plan.chunks}"
    label += " dp_overlap" if plan.dp_overlap else ""
    label += f" grad_sync={plan.grad_sync.value}" if plan.grad_sync is not GradSync.AUTO else ""
    return label + (" precision=fp8" if plan.precision.value == "fp8" else "")


def check_fits(layers: Sequence[LayerCost], setup: TrainingSetup, plan: Plan,
               memory: Sequence[StageMemory]) -> None:
    """Raise InfeasibleError, with the numbers, when a device of a (valid) plan does not fit:
    its ``StageMemory.total`` exceeds HBM. The message gives the worst device's need and, when
    dp > 1, what each higher ZeRO stage would need on it.
    """
    hbm = setup.hbm_bytes
    worst = max(range(len(memory)), key=lambda j: memory[j].total)
    need = memory[worst].total
    if need <= hbm:
        return
    hints = []
    layout = RankLayout.of(plan, setup.rank_order)
    if layout.dense_shards > 1 or (layout.expert_shards > 1 and any(layer.expert_params for layer in layers)):
        for stage in range(plan.zero_stage + 1, 4):
            other = plan_memory(layers, setup, replace(plan, zero_stage=stage))[worst].total
            hints.append(f"zero_stage={stage} would need {format_bytes(other)}")
    hint = f"; {', '.join(hints)}" if hints else ""
    where = (f"device {worst}" if plan.chunks > 1 or plan.schedule is PipelineSchedule.DUALPIPE
             else f"stage {worst}")
    raise OutOfMemoryError(f"{where} needs {format_bytes(need)} > {format_bytes(hbm)} HBM with "
                          f"zero_stage={plan.zero_stage} ({_plan_label(plan)}){hint}")


def device_tails(layers: Sequence[LayerCost], setup: TrainingSetup, plan: Plan,
                 times: Sequence[StageTime]) -> list[tuple[float, float, float, float]]:
    """(exposed DP traffic, optimizer step, whole DP traffic, compute slowed by the hidden DP
    traffic) in seconds for every pipeline device, of the parameters of its segments (v when
    interleaved) and their backward passes summed; the plan's tail is the largest (exposed +
    slowed) + step. See :func:`archplace.placement.zero.dp_tail_comm_s`."""
    layout = RankLayout.of(plan, setup.rank_order)
    sharded = plan.zero_stage >= 1
    shards = layout.dense_shards if sharded else 1
    expert_shards = layout.expert_shards if sharded else 1
    experts = any(layer.expert_params for layer in layers)
    cost, expert_cost = layout.shard_costs(setup.cluster, experts)
    replica_costs = layout.replica_costs(setup.cluster, experts)
    out = []
    for j in range(plan.pp):
        params = expert_params = 0
        own = device_segments(plan, j)
        for first, last in (plan.ranges[c] for c in own):
            for layer in layers[first:last + 1]:
                params += layer.params - layer.expert_params
                expert_params += layer.expert_params
        backward = sequential_sum(times[c].backward_s for c in own)
        exposed, total, slowed = dp_tail_comm_s(
            cost, zero_stage=plan.zero_stage, grad_bytes=setup.grad_bytes, dp=layout.dense_shards,
            params=float(params), backward_s=backward, overlap=plan.dp_overlap,
            expert_cost=expert_cost, expert_dp=layout.expert_shards, expert_params=float(expert_params),
            interference=setup.interference, replicas=layout.replicate, replica_costs=replica_costs,
            grad_sync=plan.grad_sync)
        step = optimizer_step_time_s(params, setup.step_bandwidth_bytes_per_s, setup.optimizer, shards)
        if expert_params:
            step = step + optimizer_step_time_s(expert_params, setup.step_bandwidth_bytes_per_s,
                                                setup.optimizer, expert_shards)
        out.append((float(exposed), step, float(total), float(slowed)))
    return out


def device_paces(times: Sequence[StageTime], pp: int) -> list[tuple[float, StageTime]]:
    """Every pipeline device's pace and mean segment: (T_j, the StageTime whose every figure is
    the mean over the device's segments c = j, j + pp, ...), T_j = sequential sum of the
    segments' ``total_s`` / v (the module docstring).  With one segment per device (v = 1),
    (T_c, the segment itself)."""
    out = []
    for j in range(pp):
        own = times[j::pp]
        if len(own) == 1:
            out.append((own[0].total_s, own[0]))
            continue
        v = len(own)
        pace = sequential_sum(time.total_s for time in own) / v
        means = {f.name: sequential_sum(getattr(time, f.name) for time in own) / v
                 for f in fields(StageTime)}
        out.append((pace, StageTime(**means)))
    return out


def comm_parts(total_s: float, exposed_s: float, slowed_s: float = 0.0) -> dict[str, float]:
    """One kind's entry of ``PlanResult.comm_s``: ``total``, ``exposed``, ``hidden`` (total -
    exposed: the part that overlaps compute) and ``slowed`` (the compute time hiding it added,
    :mod:`archplace.placement.interference`), seconds per iteration."""
    return {"total": total_s, "exposed": exposed_s, "hidden": max(0.0, total_s - exposed_s),
            "slowed": slowed_s}


def check_finite_times(layers: Sequence[LayerCost]) -> None:
    """Refuse layer costs whose times add up beyond the largest float: every figure of a plan
    (segment sums, the iteration time) would be infinite, and a plan search would mistake that
    for "nothing fits".

    Raises:
        ConfigError: naming the slowest layer and the overflow.
    """
    total = sequential_sum(layer.fwd_s + layer.bwd_s + max(layer.fwd_s, layer.selective_recompute_s)
                           for layer in layers)
    if not math.isfinite(total):
        slowest = max(layers, key=lambda layer: layer.fwd_s + layer.bwd_s)
        raise ConfigError(f"layer times overflow: {len(layers)} layers (the slowest, {slowest.name!r}, "
                          f"fwd_s {slowest.fwd_s:.3g} s + bwd_s {slowest.bwd_s:.3g} s) add up beyond "
                          f"{sys.float_info.max:.3g} s")


def evaluate_plan(layers: Sequence[LayerCost], setup: TrainingSetup, plan: Plan) -> PlanResult:
    """Iteration time, breakdown, throughput, MFU, HFU, communication and memory of one plan
    (module docstring).

    MFU = model FLOP per iteration / (iteration time * tp * cp * pp * dp * peak FLOP/s), with
    model FLOP per iteration = global_batch / micro_batch * sum(fwd_flop + bwd_flop) * tp * cp
    (layer FLOP are per TP and CP rank and micro-batch; recomputation, batch padding and the
    padded or imbalanced expert rows are not model FLOP: a mixture-of-experts model's are those
    of balanced, unpadded routing). It is
    at most 1 when every layer's FLOP take at least ``flop / peak`` of its time (true of the
    cost models' layers; layer-graph files are checked by ``dag_plan``). HFU adds the FLOP the
    backward passes recompute (``LayerCost.recompute_flop``) and the expert padding
    (``LayerCost.padding_fwd_flop`` and ``padding_bwd_flop``): Korthikanti et al. 2022, section
    6.3, define MFU without and HFU with recomputation, the hardware FLOP actually run.
    ``comm_s`` gives, per kind, the communication time of the critical device, its exposed
    and hidden parts and the compute time hiding it added (:func:`comm_parts`): TP collectives
    and pipeline sends block the computation (exposed = total), DP traffic is partly hidden
    (per-layer ZeRO-2/3 overlap, bucketed gradient reduction) and slows the compute it hides
    behind by ``setup.interference`` (breakdown key ``overlap_slowdown``).

    Raises:
        ConfigError: an invalid plan (see :func:`validate_plan`), or all-zero costs.
        InfeasibleError: a device does not fit in ``setup.hbm_bytes`` (see :func:`check_fits`).
        SolverError: the iteration time is not finite (layer times that overflow when summed).
        InternalError: MFU above 1 (a bug).
    """
    validate_plan(plan, len(layers), setup)
    check_recompute(layers, plan.recompute)
    m = micro_batches(setup, plan)
    memory = plan_memory(layers, setup, plan)
    check_fits(layers, setup, plan, memory)

    times = stage_times(layers, plan, setup.cluster, grad_bytes=setup.grad_bytes,
                        rank_order=setup.rank_order, interference=setup.interference,
                        pp_overlap=setup.pp_comm_overlap)
    tails = device_tails(layers, setup, plan, times)
    tail_sums = [(exposed + slowed) + step for exposed, step, _, slowed in tails]
    tail = tails[tail_sums.index(max(tail_sums))]
    if plan.schedule is PipelineSchedule.DUALPIPE:
        breakdown, comm = dualpipe_figures(times, m, tail)
    else:
        breakdown, comm = _pipeline_figures(times, plan, m, tail)
    iteration_s = sequential_sum(breakdown[key] for key in BREAKDOWN_KEYS)
    if not iteration_s > 0:
        raise ConfigError("iteration time is zero: every layer time and parameter count is zero")
    if not math.isfinite(iteration_s):
        parts = ", ".join(f"{key} {breakdown[key]:.3g} s" for key in BREAKDOWN_KEYS)
        raise SolverError(f"iteration time overflows ({parts}): the layer times of "
                          f"{setup.global_batch:,} samples add up beyond {sys.float_info.max:.3g} s")
    samples = setup.global_batch / plan.micro_batch
    ranks = plan.tp * plan.cp  # layer FLOP are per TP and CP rank
    model_flop = samples * sequential_sum(layer.fwd_flop + layer.bwd_flop for layer in layers) * ranks
    hardware_flop = model_flop + samples * sequential_sum(
        layer.recompute_flop(plan.recompute) + layer.padding_fwd_flop + layer.padding_bwd_flop
        for layer in layers) * ranks
    throughput = setup.global_batch / iteration_s
    mfu = model_flop / (iteration_s * plan.devices * setup.peak_flop_per_s)
    if not mfu <= 1.0 + 1e-9:
        raise InternalError(f"MFU {mfu:.6g} > 1 for {plan}: the layers' FLOP run faster than the peak "
                            f"(a bug in the time model)")
    return PlanResult(
        plan=plan,
        iteration_time_s=iteration_s,
        throughput_samples_per_s=throughput,
        tokens_per_s=throughput * setup.seq_len,
        mfu=min(mfu, 1.0),
        breakdown_s=breakdown,
        memory=memory,
        stage_times=times,
        hfu=hardware_flop / (iteration_s * plan.devices * setup.peak_flop_per_s),
        model_flop_per_s_per_device=model_flop / (iteration_s * plan.devices),
        comm_s={kind: comm_parts(*parts) for kind, parts in comm.items()},
    )


def _pipeline_figures(times: Sequence[StageTime], plan: Plan, m: int, tail: tuple[float, float, float, float]
                      ) -> tuple[dict[str, float], dict[str, tuple[float, float, float]]]:
    """The breakdown (:data:`BREAKDOWN_KEYS`) and the (total, exposed, slowed) communication per
    kind of a GPipe, 1F1B or interleaved plan (module docstring), from its segments' times, m
    and the largest device tail (exposed DP, step, whole DP, slowed)."""
    paces = device_paces(times, plan.pp)
    totals = [pace for pace, _ in paces]
    neck = paces[totals.index(max(totals))][1]
    slots = plan.chunks * m
    # EP overlap: the warm-up and cool-down slots run unpaired, their all-to-alls exposed (ep_overlap)
    unpaired = (unpaired_slots(plan.schedule, plan.pp, plan.chunks, m,
                               micro_batch_group_size(m, plan.pp) if plan.chunks > 1 else plan.pp)
                if neck.ep_comm_hidden_s > 0 else 0)
    exposed_slots = min(unpaired, slots)  # GPipe: all of them, and its bubble at the unpaired pace
    saving = neck.ep_comm_hidden_s - neck.ep_slowed_s
    breakdown = {
        "compute": slots * max(0.0, neck.compute_s - neck.tp_comm_s - neck.cp_comm_s - neck.ep_comm_s
                               - neck.ep_slowed_s),
        "bubble": (plan.pp - 1) * max(totals) + (unpaired - exposed_slots) * saving,
        "recompute": slots * neck.recompute_s,
        "tp_comm": slots * neck.tp_comm_s,
        "cp_comm": slots * neck.cp_comm_s,
        "ep_comm": slots * neck.ep_comm_s + exposed_slots * neck.ep_comm_hidden_s,
        "pp_comm": slots * neck.p2p_s,
        "dp_comm": slots * neck.dp_comm_s + tail[0],
        "overlap_slowdown": slots * neck.dp_slowed_s + tail[3] + (slots - exposed_slots) * neck.ep_slowed_s,
        "optimizer": tail[1],
    }
    comm = {
        "tp": (breakdown["tp_comm"], breakdown["tp_comm"], 0.0),
        "cp": (breakdown["cp_comm"], breakdown["cp_comm"], 0.0),
        "ep": (slots * (neck.ep_comm_s + neck.ep_comm_hidden_s), breakdown["ep_comm"],
               (slots - exposed_slots) * neck.ep_slowed_s),
        "pp": (breakdown["pp_comm"], breakdown["pp_comm"], 0.0),
        "dp": (slots * neck.dp_comm_total_s + tail[2], breakdown["dp_comm"],
               slots * neck.dp_slowed_s + tail[3]),
    }
    return breakdown, comm
