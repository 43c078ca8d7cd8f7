"""Communication, optimizer-step and micro-batch-count formulas of the placement time model.

Device ranks are laid out with TP fastest-varying, then PP, then DP: rank = t + tp * (j + pp * r)
for TP rank t, pipeline device j and replica r (TP groups, the most talkative, stay inside a
node when tp <= devices_per_node; Megatron-LM's default order puts DP before PP instead). A
group of ``size`` ranks at stride ``stride`` spans ``stride * (size - 1) + 1`` consecutive ranks,
and its messages use the link ``Cluster.link`` returns for that span (alpha-beta model, Hockney
1994):

* pipeline neighbours are ``tp`` ranks apart (span tp + 1); with interleaving the boundary from
  the last device back to the first (chunk c -> c + 1 with c % pp = pp - 1) spans
  tp * (pp - 1) + 1 ranks;
* a data-parallel group has ``dp`` ranks at stride tp * pp.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from archplace.errors import ConfigError
from archplace.hardware.cluster import Cluster
from archplace.placement.memory import GRADIENT_BYTES_PER_PARAM
from archplace.placement.plan import Optimizer, PipelineSchedule, TrainingSetup

OPTIMIZER_STEP_BYTES_PER_PARAM: Mapping[Optimizer, int] = MappingProxyType({
    # read the fp32 gradient (4), read+write the fp32 master weight (8), m (8) and v (8),
    # write the bf16 weight (2)
    Optimizer.ADAM: 30,
    # read the fp32 gradient (4), read+write the fp32 master weight (8) and momentum (8),
    # write the bf16 weight (2)
    Optimizer.SGD: 22,
})
"""HBM traffic of one memory-bound optimizer step per parameter, in bytes."""

ADAM_STEP_BYTES_PER_PARAM = OPTIMIZER_STEP_BYTES_PER_PARAM[Optimizer.ADAM]


def group_span(size: int, stride: int) -> int:
    """Consecutive ranks spanned by ``size`` ranks ``stride`` apart: stride * (size - 1) + 1."""
    return stride * (size - 1) + 1


def p2p_link(cluster: Cluster, *, tp: int, pp: int, segment: int, chunks: int = 1
             ) -> tuple[float, float]:
    """(alpha_s, beta_bytes_per_s) of the boundary after pipeline segment ``segment``: the
    neighbour link (span tp + 1), or with interleaving the wrap-around link from the last device
    to the first (span tp * (pp - 1) + 1) after every chunk on the last device."""
    if chunks > 1 and segment % pp == pp - 1:
        return cluster.link(group_span(pp, tp))
    return cluster.link(group_span(2, tp))


def pipeline_p2p_time_s(cluster: Cluster, tp: int, boundary_bytes: float, *, pp: int = 2,
                        segment: int = 0, chunks: int = 1) -> float:
    """Time of one segment boundary per micro-batch, in seconds: send the activation forward and
    receive its gradient backward, 2 * (alpha + bytes / beta), on the link of :func:`p2p_link`."""
    alpha, beta = p2p_link(cluster, tp=tp, pp=pp, segment=segment, chunks=chunks)
    return 2.0 * (alpha + boundary_bytes / beta)


def dp_allreduce_time_s(cluster: Cluster, *, tp: int, pp: int, dp: int, params: float) -> float:
    """Ring all-reduce of ``params`` parameters' fp32 gradients over the ``dp`` replicas, seconds.

    2 (d - 1) / d * bytes / beta + 2 (d - 1) * alpha (Thakur, Rabenseifner and Gropp 2005;
    Patarasuk and Yuan 2009), bytes = 4 B * params, on the link the DP group (dp ranks at stride
    tp * pp) spans. ZeRO-1 replaces it by a reduce-scatter of the gradients and an all-gather of
    the updated parameters, each half of it: the same time (Rajbhandari et al. 2020, section
    7.2.1: the same 2 x volume). Zero when dp = 1.
    """
    if dp == 1:
        return 0.0
    alpha, beta = cluster.link(group_span(dp, tp * pp))
    grad_bytes = GRADIENT_BYTES_PER_PARAM * float(params)
    return 2.0 * (dp - 1) / dp * grad_bytes / beta + 2.0 * (dp - 1) * alpha


def exposed_dp_time_s(allreduce_s: float, backward_s: float, overlap: bool) -> float:
    """DP gradient-reduction time left on the critical path, in seconds: all of it, or with
    overlap max(0, all-reduce - backward time of the last micro-batch), the reduction running
    bucket by bucket while that backward pass produces the gradients."""
    return max(0.0, allreduce_s - backward_s) if overlap else allreduce_s


def optimizer_step_time_s(params: float, hbm_bandwidth_bytes_per_s: float,
                          optimizer: Optimizer = Optimizer.ADAM, shards: int = 1) -> float:
    """Memory-bound optimizer step of ``params`` parameters, in seconds: step bytes per
    parameter (30 Adam, 22 SGD) x params / shards over HBM bandwidth; with ZeRO-1 each replica
    updates only its 1/shards of the parameters."""
    return OPTIMIZER_STEP_BYTES_PER_PARAM[optimizer] * float(params) / shards \
        / hbm_bandwidth_bytes_per_s


def micro_batch_count(setup: TrainingSetup, *, micro_batch: int, dp: int, pp: int,
                      schedule: PipelineSchedule) -> int:
    """m, the micro-batches each pipeline runs per iteration.

    With ``setup.dp_must_divide_batch``: m = global_batch / (micro_batch * dp), which must be
    an integer, and for the interleaved schedule a multiple of pp (Megatron-LM requires it).
    Otherwise m = ceil(global_batch / (micro_batch * dp)), rounded up to a multiple of pp for
    the interleaved schedule (the batch is padded).

    Raises:
        ConfigError: with ``dp_must_divide_batch``, micro_batch * dp does not divide the global
            batch, or (interleaved) m is not a multiple of pp.
    """
    per_step = micro_batch * dp
    interleaved = schedule is PipelineSchedule.INTERLEAVED
    if setup.dp_must_divide_batch:
        if setup.global_batch % per_step:
            raise ConfigError(f"plan: micro_batch*dp = {micro_batch}*{dp} = {per_step} does not "
                              f"divide the global batch {setup.global_batch}")
        m = setup.global_batch // per_step
        if interleaved and m % pp:
            raise ConfigError(f"plan: the interleaved schedule needs the micro-batch count "
                              f"{m} to be a multiple of pp={pp}")
        return m
    m = -(-setup.global_batch // per_step)
    return pp * -(-m // pp) if interleaved else m


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int, or ConfigError naming ``name`` when it is not a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value
