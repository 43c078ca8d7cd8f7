"""Time and memory of one parallel plan (first fidelity: 1F1B, recompute none/full).

Device ranks are laid out with TP fastest-varying, then PP, then DP: rank = t + tp * (j
+ pp * r) for TP rank t, stage j and replica r (TP groups, the most talkative, stay
inside a node when tp <= devices_per_node; Megatron-LM's default order puts DP before PP
instead). A group of ``size`` ranks at stride ``stride`` therefore spans
``stride * (size - 1) + 1`` consecutive ranks, and its messages use the link
``Cluster.link`` returns for that span:

* pipeline neighbours are ``tp`` ranks apart: a group of 2 at stride tp spans tp + 1;
* a data-parallel group has ``dp`` ranks at stride tp * pp.

Iteration time (nothing overlapped at this fidelity)::

    (m + p - 1) * max_j T_j          1F1B / GPipe (Narayanan et al. 2021, section 2.2.1:
                                     bubble of p - 1 stage times, m micro-batches)
    + max_j allreduce(4 B * params_j)  ring all-reduce of fp32 gradients over dp replicas
    + max_j 30 B * params_j / HBM bandwidth   memory-bound Adam step

with m = global_batch / (micro_batch * dp) and T_j = sum(fwd_s + bwd_s)
(+ sum(fwd_s) again under full recomputation) + the point-to-point send of the stage's
output activation and receive of its gradient, 2 * (alpha + boundary_bytes / beta), for
every stage but the last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from archplace.errors import ConfigError, InfeasibleError
from archplace.hardware.cluster import Cluster
from archplace.placement.memory import (
    GRADIENT_BYTES_PER_PARAM,
    in_flight_micro_batches,
    sequential_sum,
    stage_memory,
)
from archplace.placement.plan import (
    LayerCost,
    Plan,
    PlanResult,
    Recompute,
    StageMemory,
    TrainingSetup,
)
from archplace.units import format_bytes

ADAM_STEP_BYTES_PER_PARAM = 30
"""HBM traffic of one mixed-precision Adam step per parameter: read the fp32 gradient (4),
read and write the fp32 master weight (8), read and write m (8) and v (8), write the bf16
weight (2)."""

BREAKDOWN_KEYS = ("compute", "bubble", "recompute", "pp_comm", "dp_comm", "optimizer")
"""Keys of ``PlanResult.breakdown_s``, in the order they are summed."""


def group_span(size: int, stride: int) -> int:
    """Consecutive ranks spanned by ``size`` ranks ``stride`` apart: stride * (size - 1) + 1."""
    return stride * (size - 1) + 1


def pipeline_p2p_time_s(cluster: Cluster, tp: int, boundary_bytes: float) -> float:
    """Time of one stage boundary per micro-batch, in seconds: send the activation forward and
    receive its gradient backward, 2 * (alpha + bytes / beta), on the link spanning tp + 1 ranks
    (alpha-beta model, Hockney 1994)."""
    alpha, beta = cluster.link(group_span(2, tp))
    return 2.0 * (alpha + boundary_bytes / beta)


def dp_allreduce_time_s(cluster: Cluster, *, tp: int, pp: int, dp: int, params: int) -> float:
    """Ring all-reduce of a stage's fp32 gradients over the ``dp`` replicas, in seconds.

    2 (d - 1) / d * bytes / beta + 2 (d - 1) * alpha (Thakur, Rabenseifner and Gropp 2005;
    Patarasuk and Yuan 2009), with bytes = 4 B * params, on the link the DP group (dp ranks
    at stride tp * pp) spans. Zero when dp = 1.
    """
    if dp == 1:
        return 0.0
    alpha, beta = cluster.link(group_span(dp, tp * pp))
    grad_bytes = GRADIENT_BYTES_PER_PARAM * float(params)
    return 2.0 * (dp - 1) / dp * grad_bytes / beta + 2.0 * (dp - 1) * alpha


def optimizer_step_time_s(params: int, hbm_bandwidth_bytes_per_s: float) -> float:
    """Memory-bound Adam step of ``params`` parameters: 30 B each over HBM bandwidth, seconds."""
    return ADAM_STEP_BYTES_PER_PARAM * float(params) / hbm_bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class StageTime:
    """Time of one pipeline stage per micro-batch, in seconds.

    Attributes:
        compute_s: sum of the forward and backward times of its layers.
        recompute_s: the forward pass again under full recomputation, else 0.
        p2p_s: activation send + gradient receive at its output boundary (0 for the last stage).
    """

    compute_s: float
    recompute_s: float
    p2p_s: float

    @property
    def total_s(self) -> float:
        """compute + recompute + p2p."""
        return self.compute_s + self.recompute_s + self.p2p_s


def micro_batches(setup: TrainingSetup, plan: Plan) -> int:
    """m = global_batch / (micro_batch * dp), micro-batches per pipeline per iteration.

    Raises:
        ConfigError: micro_batch * dp does not divide global_batch.
    """
    per_step = plan.micro_batch * plan.dp
    if setup.global_batch % per_step:
        raise ConfigError(f"plan: micro_batch*dp = {plan.micro_batch}*{plan.dp} = {per_step} "
                          f"does not divide the global batch {setup.global_batch}")
    return setup.global_batch // per_step


def validate_plan(plan: Plan, n_layers: int, setup: TrainingSetup) -> None:
    """Check that a plan fits a chain of ``n_layers`` layers, the cluster and the batch.

    (Positive degrees, ``pp == len(stages)`` and contiguity are checked when the Plan is built.)

    Raises:
        ConfigError: no layers, stages not covering layers 0..n_layers-1, more devices than the
            cluster has, or micro_batch * dp not dividing the global batch.
    """
    if n_layers < 1:
        raise ConfigError("placement needs at least one layer")
    last = plan.stages[-1][1]
    if last != n_layers - 1:
        raise ConfigError(f"plan: stages cover layers 0..{last} but the chain has {n_layers} "
                          f"layers (0..{n_layers - 1})")
    if plan.devices > setup.cluster.devices:
        raise ConfigError(f"plan: tp*pp*dp = {plan.tp}*{plan.pp}*{plan.dp} = {plan.devices} "
                          f"exceeds the cluster's {setup.cluster.devices} devices")
    micro_batches(setup, plan)


def stage_times(layers: Sequence[LayerCost], plan: Plan, cluster: Cluster) -> tuple[StageTime, ...]:
    """Per-micro-batch time of every stage of a (valid) plan; see the module docstring."""
    times = []
    for j, (first, last) in enumerate(plan.stages):
        stage = layers[first:last + 1]
        fwd = sequential_sum(layer.fwd_s for layer in stage)
        bwd = sequential_sum(layer.bwd_s for layer in stage)
        recompute = fwd if plan.recompute is Recompute.FULL else 0.0
        p2p = (pipeline_p2p_time_s(cluster, plan.tp, layers[last].boundary_bytes)
               if j < plan.pp - 1 else 0.0)
        times.append(StageTime(compute_s=fwd + bwd, recompute_s=recompute, p2p_s=p2p))
    return tuple(times)


def plan_memory(layers: Sequence[LayerCost], setup: TrainingSetup,
                plan: Plan) -> tuple[StageMemory, ...]:
    """Memory of one device of every stage of a (valid) plan, 1F1B in-flight counts."""
    m = micro_batches(setup, plan)
    return tuple(
        stage_memory(layers[first:last + 1], stage=j,
                     in_flight=in_flight_micro_batches(j, plan.pp, m), recompute=plan.recompute)
        for j, (first, last) in enumerate(plan.stages))


def evaluate_plan(layers: Sequence[LayerCost], setup: TrainingSetup, plan: Plan) -> PlanResult:
    """Iteration time, throughput, MFU and memory of one plan.

    Breakdown (its values sum, left to right, to ``iteration_time_s``): with b the bottleneck
    stage (largest T_j, the first on ties), compute = m * compute_b, recompute = m *
    recompute_b, pp_comm = m * p2p_b, bubble = (p - 1) * T_b, dp_comm = the largest stage
    all-reduce, optimizer = the largest stage optimizer step. MFU = model FLOP per
    iteration / (iteration time * tp * pp * dp * peak FLOP/s), with model FLOP per iteration
    = global_batch / micro_batch * sum(fwd_flop + bwd_flop) * tp (layer FLOP are per TP
    rank; recomputation is not model FLOP).

    Raises:
        ConfigError: an invalid plan (see :func:`validate_plan`), or all-zero costs.
        InfeasibleError: a stage does not fit in ``setup.hbm_bytes``.
    """
    validate_plan(plan, len(layers), setup)
    m = micro_batches(setup, plan)
    memory = plan_memory(layers, setup, plan)
    worst = max(memory, key=lambda s: s.total)
    if worst.total > setup.hbm_bytes:
        raise InfeasibleError(
            f"stage {worst.stage} needs {format_bytes(worst.total)} > "
            f"{format_bytes(setup.hbm_bytes)} HBM (tp={plan.tp} pp={plan.pp} dp={plan.dp} "
            f"micro_batch={plan.micro_batch} recompute={plan.recompute.value})")

    times = stage_times(layers, plan, setup.cluster)
    totals = [t.total_s for t in times]
    neck = times[totals.index(max(totals))]
    stage_params = [sum(layer.params for layer in layers[first:last + 1])
                    for first, last in plan.stages]
    max_params = max(stage_params)
    breakdown = {
        "compute": m * neck.compute_s,
        "bubble": (plan.pp - 1) * neck.total_s,
        "recompute": m * neck.recompute_s,
        "pp_comm": m * neck.p2p_s,
        # Both are non-decreasing in the parameter count, so the largest stage is the slowest.
        "dp_comm": dp_allreduce_time_s(setup.cluster, tp=plan.tp, pp=plan.pp, dp=plan.dp,
                                       params=max_params),
        "optimizer": optimizer_step_time_s(max_params, setup.hbm_bandwidth_bytes_per_s),
    }
    iteration_s = sequential_sum(breakdown[key] for key in BREAKDOWN_KEYS)
    if not iteration_s > 0:
        raise ConfigError("iteration time is zero: every layer time and parameter count is zero")
    model_flop = ((setup.global_batch // plan.micro_batch)
                  * sequential_sum(layer.fwd_flop + layer.bwd_flop for layer in layers) * plan.tp)
    throughput = setup.global_batch / iteration_s
    return PlanResult(
        plan=plan,
        iteration_time_s=iteration_s,
        throughput_samples_per_s=throughput,
        tokens_per_s=throughput * setup.seq_len,
        mfu=model_flop / (iteration_s * plan.devices * setup.peak_flop_per_s),
        breakdown_s=breakdown,
        memory=memory,
    )
