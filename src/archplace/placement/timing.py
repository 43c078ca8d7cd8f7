"""Communication, optimizer-step and micro-batch-count formulas of the placement time model.

Device ranks are laid out with TP fastest-varying, then PP, then DP: rank = t + tp * (j + pp * r)
for TP rank t, pipeline device j and replica r (TP groups, the most talkative, stay inside a
node when tp <= devices_per_node; Megatron-LM's default order puts DP before PP instead, and
context parallelism widens a stage: both in :mod:`archplace.placement.layout`). A
group of ``size`` ranks at stride ``stride`` spans ``stride * (size - 1) + 1`` consecutive ranks,
and its messages use the link ``Cluster.link`` returns for that span (alpha-beta model, Hockney
1994):

* pipeline neighbours are ``tp`` ranks apart (span tp + 1); with interleaving the boundary from
  the last device back to the first (chunk c -> c + 1 with c % pp = pp - 1) spans
  tp * (pp - 1) + 1 ranks; with tp > 1 and no sequence parallelism the boundary tensor is
  scattered over the TP ranks and gathered again (:func:`p2p_link`);
* a data-parallel group has ``dp`` ranks at stride tp * pp, reduced hierarchically when it has
  several members in each of several nodes (:func:`dp_allreduce_cost`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from archplace.base.errors import ConfigError
from archplace.hw.cluster import Cluster
from archplace.placement.plan import LayerCost, Optimizer, PipelineSchedule, TrainingSetup

if TYPE_CHECKING:
    from archplace.workload.layers import Layer

OPTIMIZER_STEP_BYTES_PER_PARAM: Mapping[Optimizer, int] = MappingProxyType({
    # read the fp32 gradient (4), read+write the fp32 master weight (8), m (8) and v (8),
    # write the bf16 weight (2)
    Optimizer.ADAM: 30,
    # the same with the two moments in bf16: read+write 2 B each instead of 4
    Optimizer.ADAM_BF16: 22,
    # read the fp32 gradient (4), read+write the fp32 master weight (8) and momentum (8),
    # write the bf16 weight (2)
    Optimizer.SGD: 22,
})
"""HBM traffic of one memory-bound optimizer step per parameter, in bytes: one pass over the
state the step touches. Adam with bf16 weights and fp32 main gradients keeps 18 bytes per
parameter, 2 (bf16 weight) + 4 (fp32 main gradient) + 12 (fp32 main weight, momentum and
variance; Megatron-Core's distributed optimizer guide, "bf16 parameters, fp32 gradients: 18 =
6 + 12/d"; the 12 bytes of optimizer state of Rajbhandari et al., ZeRO, SC 2020, sec. 3.1);
the step reads the gradient and the three fp32 states, writes the three states and the bf16
weight: 4 + 2 x 12 + 2 = 30; with bf16 moments (8 bytes of state)
4 + 2 x 8 + 2 = 22. SGD with momentum has one moment: 4 + 2 x 8 + 2 = 22. The step is
an HBM-bound element-wise kernel (Megatron's fused multi-tensor Adam), charged at the chip's
streaming bandwidth, ``TrainingSetup.step_bandwidth_bytes_per_s`` (datasheet x
``efficiency.hbm``), once per iteration on each device for its shard."""

ADAM_STEP_BYTES_PER_PARAM = OPTIMIZER_STEP_BYTES_PER_PARAM[Optimizer.ADAM]


P2P_TRANSFERS_PER_BOUNDARY = 4
"""Transfers of a pipeline boundary's tensor per micro-batch in the placement model: forward
activation and backward gradient, each charged to the sender and to the receiver
(:mod:`archplace.placement.pipeline`, :func:`pipeline_p2p_time_s`)."""


def smallest_boundary_bytes(layers: Sequence[LayerCost] | Sequence[Layer]) -> float:
    """The smallest tensor a pipeline boundary of ``layers`` can carry: the least
    ``boundary_bytes`` of every layer but the last (0 for one layer), in bytes."""
    return float(min((layer.boundary_bytes for layer in layers[:-1]), default=0.0))


def group_span(size: int, stride: int) -> int:
    """Consecutive ranks spanned by ``size`` ranks ``stride`` apart: stride * (size - 1) + 1."""
    return stride * (size - 1) + 1


def p2p_link(cluster: Cluster, *, tp: int, pp: int, segment: int, chunks: int = 1,
             scatter_gather: bool = False, stride: int | None = None) -> tuple[float, float]:
    """(alpha_s, beta_bytes_per_s) of the boundary after pipeline segment ``segment``: the
    neighbour link (span tp + 1), or with interleaving the wrap-around link from the last device
    to the first (span tp * (pp - 1) + 1) after every chunk on the last device.

    With ``scatter_gather`` and tp > 1 (Narayanan et al., SC 2021, section 4.1, Megatron-LM's
    default when the boundary tensor is replicated over the TP group, i.e. without sequence
    parallelism), each of the tp ranks sends only its 1/tp slice on its own link and the
    receiving TP group all-gathers the slices over the TP group's link (a ring all-gather,
    (tp - 1) start-ups and (tp - 1)/tp of the bytes). One transfer of b bytes then costs
    alpha + b / (tp beta) + (tp - 1) alpha_tp + (tp - 1)/tp b / beta_tp, returned as one
    affine link: alpha' = alpha + (tp - 1) alpha_tp, 1/beta' = 1/(tp beta) + (tp - 1)/(tp beta_tp).

    ``stride``: ranks between pipeline neighbours (tp by default; with context parallelism and
    the rank orders of :class:`~archplace.placement.plan.RankOrder` see
    :attr:`archplace.placement.layout.RankLayout.pp_stride`).
    """
    step = tp if stride is None else stride
    span = group_span(pp, step) if chunks > 1 and segment % pp == pp - 1 else group_span(2, step)
    alpha, beta = cluster.link(span)
    if not scatter_gather or tp == 1:
        return alpha, beta
    alpha_tp, beta_tp = cluster.group_link(tp)
    return (alpha + (tp - 1) * alpha_tp,
            1.0 / (1.0 / (tp * beta) + (tp - 1) / (tp * beta_tp)))


def pipeline_p2p_time_s(cluster: Cluster, tp: int, boundary_bytes: float, *, pp: int = 2,
                        segment: int = 0, chunks: int = 1, scatter_gather: bool = False,
                        stride: int | None = None) -> float:
    """Time of one segment boundary per micro-batch, in seconds: send the activation forward and
    receive its gradient backward, 2 * (alpha + bytes / beta), on the link of :func:`p2p_link`."""
    alpha, beta = p2p_link(cluster, tp=tp, pp=pp, segment=segment, chunks=chunks,
                           scatter_gather=scatter_gather, stride=stride)
    return 2.0 * (alpha + boundary_bytes / beta)


def dp_allreduce_cost(cluster: Cluster, *, tp: int, pp: int, dp: int) -> tuple[float, float]:
    """(start-up seconds, seconds per gradient byte) of the DP all-reduce of the gradients over
    the ``dp`` replicas: time = start-up + per byte x bytes (ring all-reduce, Thakur, Rabenseifner
    and Gropp 2005). The ZeRO stages replace it by reduce-scatters and all-gathers of half its
    cost each (:mod:`archplace.placement.zero`).

    A group of dp ranks at stride s = tp * pp. When the whole group is inside one node, or has one
    member per node, it is one ring on that link: 2 (d - 1) alpha + 2 (d - 1)/d * bytes / beta.
    When it has g = devices_per_node / s > 1 members in each of k = d / g nodes (s divides the
    node size and g divides d), every member has its own inter-node port (a DGX A100 node has one
    200 Gb/s HDR InfiniBand adapter per GPU [DGXA100]), so the reduction is hierarchical: a
    reduce-scatter inside the node, an all-reduce across the k nodes of each member's 1/g shard
    on its own port, an all-gather inside the node (Jia et al., "Highly Scalable Deep Learning
    Training System with Mixed-Precision", arXiv:1807.11205, 2018, section 3.3; NCCL likewise
    runs one ring per NIC):

        2 (g - 1) alpha_intra + 2 (k - 1) alpha_inter
        + 2 (g - 1)/g * bytes / beta_intra + 2 (k - 1)/k * (bytes / g) / beta_inter

    Returns (0, 0) when dp = 1. (:func:`strided_allreduce_cost` of dp ranks at stride tp * pp.)
    """
    return strided_allreduce_cost(cluster, dp, tp * pp)


def strided_allreduce_cost(cluster: Cluster, size: int, stride: int) -> tuple[float, float]:
    """(start-up seconds, seconds per byte) of an all-reduce over ``size`` ranks ``stride``
    apart: one ring on the link of the group's span, or hierarchical when it has several members
    in each of several nodes (as :func:`dp_allreduce_cost` explains); (0, 0) for one rank."""
    dp = size
    if dp == 1:
        return 0.0, 0.0
    node = cluster.devices_per_node
    g = node // stride if stride < node and node % stride == 0 else 1
    if g <= 1 or g >= dp or dp % g:
        alpha, beta = cluster.link(group_span(dp, stride))
        return 2.0 * (dp - 1) * alpha, 2.0 * (dp - 1) / dp / beta
    k = dp // g
    alpha_in, beta_in = cluster.link(group_span(g, stride))
    alpha_out, beta_out = cluster.link(node + 1)
    return (2.0 * (g - 1) * alpha_in + 2.0 * (k - 1) * alpha_out,
            2.0 * (g - 1) / g / beta_in + 2.0 * (k - 1) / k / (g * beta_out))


def optimizer_step_time_s(params: float, hbm_bandwidth_bytes_per_s: float,
                          optimizer: Optimizer = Optimizer.ADAM, shards: int = 1) -> float:
    """Memory-bound optimizer step of ``params`` parameters, in seconds: step bytes per
    parameter (30 Adam, 22 SGD) x params / shards over HBM bandwidth; with a ZeRO stage >= 1
    each replica updates only its 1/shards of the parameters."""
    return OPTIMIZER_STEP_BYTES_PER_PARAM[optimizer] * float(params) / shards \
        / hbm_bandwidth_bytes_per_s


def micro_batch_group_size(micro_batches: int, pp: int) -> int:
    """N, the micro-batches an interleaved schedule runs through each chunk in a row: the
    smallest N from pp to m for which Megatron-Core runs m micro-batches without dependency
    bubbles, m % N == 0 or m % N >= pp.

    Megatron-Core's interleaved schedule (``forward_backward_pipelining_with_interleaving`` and
    ``get_schedule_table`` in megatron/core/pipeline_parallel/schedules.py of NVIDIA/Megatron-LM
    @ d98e8a64dd) runs each chunk for N micro-batches in a row (``--microbatch-group-size-per-
    virtual-pipeline-stage``, default pp), the last group taking the rest; it refuses N outside
    pp..m and a remainder m % N in 1..pp - 1. So any m >= pp runs (N = m at worst), and a
    multiple of pp runs with the default N = pp; Llama 3 tuned N so (Dubey et al. 2024, sec.
    3.3.2: "N = 5", an arbitrary number of micro-batches). The smallest N holds the fewest
    micro-batches in flight (:func:`archplace.placement.memory.interleaved_in_flight_chunks`);
    with equal chunks the schedule takes (v m + pp - 1) chunk slots for every valid N (played
    out in :mod:`archplace.placement.pipeline_timeline`).

    Raises:
        ConfigError: m < pp (the schedule needs at least pp micro-batches) or pp < 1.
    """
    if pp < 1 or micro_batches < pp:
        raise ConfigError(f"the interleaved schedule needs at least pp={pp} micro-batches, "
                          f"got {micro_batches}")
    return next(n for n in range(pp, micro_batches + 1)
                if micro_batches % n == 0 or micro_batches % n >= pp)


def micro_batch_count(setup: TrainingSetup, *, micro_batch: int, dp: int, pp: int,
                      schedule: PipelineSchedule) -> int:
    """m, the micro-batches each pipeline runs per iteration.

    With ``setup.dp_must_divide_batch``: m = global_batch / (micro_batch * dp), which must be
    an integer, for the interleaved schedule at least pp (:func:`micro_batch_group_size`), for
    DualPipe even and at least 2 pp (``DualPipe.step``'s assertion, deepseek-ai/DualPipe).
    Otherwise m = ceil(global_batch / (micro_batch * dp)), raised to pp for the interleaved
    schedule and to an even count of at least 2 pp for DualPipe (the batch is padded).

    Raises:
        ConfigError: with ``dp_must_divide_batch``, micro_batch * dp does not divide the global
            batch, (interleaved) m < pp, or (DualPipe) m odd or below 2 pp.
    """
    per_step = micro_batch * dp
    interleaved = schedule is PipelineSchedule.INTERLEAVED
    dualpipe = schedule is PipelineSchedule.DUALPIPE
    if setup.dp_must_divide_batch:
        if setup.global_batch % per_step:
            raise ConfigError(f"plan: micro_batch*dp = {micro_batch}*{dp} = {per_step} does not "
                              f"divide the global batch {setup.global_batch}")
        m = setup.global_batch // per_step
        if interleaved and m < pp:
            raise ConfigError(f"plan: the interleaved schedule needs at least pp={pp} micro-batches, "
                              f"got {m}")
        if dualpipe and (m % 2 or m < 2 * pp):
            raise ConfigError(f"plan: dualpipe needs an even number of micro-batches >= 2 pp = {2 * pp}, "
                              f"got {m} (DualPipe.step's assertion)")
        return m
    m = -(-setup.global_batch // per_step)
    if dualpipe:  # padded to an even count of at least 2 pp
        return max(m + m % 2, 2 * pp)
    return max(m, pp) if interleaved else m


def divisors(q: int) -> list[int]:
    """The divisors of ``q`` >= 1, ascending (trial division up to sqrt(q): 32,768 steps for the
    largest global batch, 2**30)."""
    small, large = [], []
    k = 1
    while k * k <= q:
        if q % k == 0:
            small.append(k)
            if k * k != q:
                large.append(q // k)
        k += 1
    return small + large[::-1]


def dp_degrees(setup: TrainingSetup, micro_batch: int, limit: int) -> list[int]:
    """The DP degrees d <= ``limit`` for which :func:`micro_batch_count` can succeed: with
    ``setup.dp_must_divide_batch`` the divisors of global_batch / micro_batch (none when
    micro_batch does not divide it), otherwise 1..limit. Enumerating divisors keeps plans on
    up to 2**20 devices from walking a million DP degrees."""
    if not setup.dp_must_divide_batch:
        return list(range(1, limit + 1))
    if setup.global_batch % micro_batch:
        return []
    return [d for d in divisors(setup.global_batch // micro_batch) if d <= limit]


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int, or ConfigError naming ``name`` when it is not a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value
