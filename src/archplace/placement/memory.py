"""Per-device memory of the pipeline stages of a plan.

Model state (bytes per parameter, Megatron-LM mixed precision: bf16 weights used by the passes,
fp32 gradient accumulation buffer, fp32 optimizer state):

* Adam: 2 (weights) + 4 (gradients) + 12 (fp32 master weights, first and second moments) = 18 B,
  the figure of Megatron-LM's distributed-optimizer notes ("bf16 param, fp32 grads: 18, or
  6 + 12/d distributed") and of ZeRO (Rajbhandari et al., SC 2020, section 3.1: K = 12
  optimizer bytes per parameter for mixed-precision Adam);
* SGD with momentum: 2 + 4 + 8 (fp32 master weights and momentum) = 14 B;
* the gradient buffer takes the gradient-reduction dtype's bytes (4 fp32 by default, 2 bf16;
  :class:`~archplace.placement.plan.GradReduceDtype`);
* FP8 training (:mod:`archplace.cost.precision`) adds Transformer Engine's cached FP8 copies
  of the FP8 GEMMs' weights and their transposes, 2 B per such weight (``fp8_params`` of the
  layer costs), counted in ``weights`` and sharded like them;
* ZeRO stages 1-3 divide the optimizer state, then the gradients, then the weights over the d
  data-parallel replicas, and stage 3 adds its window of gathered parameters
  (:mod:`archplace.placement.zero`): 6 + 12/d B for Adam with ZeRO-1, 2 + 16/d with ZeRO-2,
  18/d (+ the window) with ZeRO-3. Gradients accumulated over the micro-batches and reduced
  once per iteration (``grad_sync`` iteration: FSDP's ``no_sync``) are held unsharded: 6 + 12/d
  with ZeRO-2, 4 + 14/d with ZeRO-3 (:func:`~archplace.placement.zero.shard_divisors`). With
  context parallelism the dense parameters are sharded over the DP x CP group (d cp ranks:
  Megatron-Core's distributed optimizer shards over its ``dp-cp`` group), the routed experts'
  parameters (``LayerCost.expert_params``) over the expert-data-parallel group (tp cp d /
  (etp ep) ranks; :mod:`archplace.placement.layout`).

Activations kept for the backward pass, per micro-batch, follow the layer costs (Korthikanti et
al. 2022, section 4: ``activation_bytes`` without recomputation, ``selective_activation_bytes``
with selective recomputation, ``input_bytes`` with full recomputation, in which case the layer
being back-propagated is re-materialised whole: the largest ``activation_bytes`` of the stage),
times the micro-batches in flight on the device:

* GPipe (Huang et al. 2019): every stage holds all m micro-batches before the first backward;
* 1F1B (Narayanan et al., SC 2021, section 2.2.1): stage j (0-based) of p holds min(p - j, m);
* interleaved 1F1B (same paper, section 2.2.2) with v chunks per device: device j runs
  W_j = 2 (p - j - 1) + (v - 1) p warm-up chunk forward passes, as Megatron-LM's interleaved
  schedule does, and holds min(W_j + 1, m v) chunk-micro-batches at its peak (Megatron-LM
  runs every forward pass first when m = p; that special case is not modelled, so that memory
  never grows with the DP degree, which the solver relies on). On the first device that is
  v p + p - 1 chunks of 1/v of a stage each, i.e. p (1 + (p - 1)/(p v)) stage-micro-batches:
  Korthikanti et al.'s interleaving factor. Which chunks those are follows the schedule's
  order (:func:`interleaved_chunk_counts`), so the device's activations are the peak over the
  schedule of the sum over its own chunks of (chunk-micro-batches of the chunk in flight) x
  (the chunk's saved bytes): exact for unequal chunks too, not v copies of the heaviest.

Plus the working set of one layer (the largest of the stage).

Sums over the layers of a stage are taken strictly left to right from the stage's first layer
(see :func:`sequential_sum`): the solver computes the same sums with ``numpy.cumsum`` and the
same operations in the same order, so both sides decide bit-identically whether a stage fits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from archplace.base.errors import ConfigError
from archplace.cost.precision import FP8_WEIGHT_CACHE_BYTES_PER_PARAM
from archplace.placement.dualpipe import in_flight_peak
from archplace.placement.plan import GradSync, LayerCost, Optimizer, PipelineSchedule, Recompute
from archplace.placement.result import StageMemory
from archplace.placement.timing import micro_batch_group_size
from archplace.placement.zero import WEIGHT_BYTES_PER_PARAM, gathered_bytes, shard_divisors

GRADIENT_BYTES_PER_PARAM = 4
"""fp32 gradient accumulation buffer, the default (Megatron-LM accumulates and reduces
gradients in fp32 with bf16 training; see ``GradReduceDtype``)."""

OPTIMIZER_STATE_BYTES_PER_PARAM: Mapping[Optimizer, int] = MappingProxyType({
    Optimizer.ADAM: 12,  # fp32 master weights + Adam m + Adam v
    Optimizer.ADAM_BF16: 8,  # fp32 master weights + bf16 m + bf16 v (Optimizer.ADAM_BF16)
    Optimizer.SGD: 8,    # fp32 master weights + momentum
})
"""Optimizer state per parameter, before ZeRO sharding."""

OPTIMIZER_BYTES_PER_PARAM = OPTIMIZER_STATE_BYTES_PER_PARAM[Optimizer.ADAM]
"""Adam's 12 optimizer bytes per parameter."""

MODEL_STATE_BYTES_PER_PARAM = (
    WEIGHT_BYTES_PER_PARAM + GRADIENT_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM
)
"""18 bytes per parameter for mixed-precision Adam without ZeRO."""


def sequential_sum(values: Iterable[float]) -> float:
    """Sum strictly left to right starting from 0.0 (the order ``numpy.cumsum`` uses).

    Python's built-in ``sum`` of floats is compensated from Python 3.12 on, which
    would make figures differ by an ulp from the solver's; this function does not.
    """
    total = 0.0
    for value in values:
        total += value
    return total


def model_state_bytes(params: int, optimizer: Optimizer = Optimizer.ADAM, *, zero_stage: int = 0,
                      dp: int = 1, grad_bytes: int = GRADIENT_BYTES_PER_PARAM, fp8_params: int = 0,
                      expert_params: int = 0, expert_dp: int | None = None,
                      fp8_expert_params: int = 0,
                      grad_sync: GradSync = GradSync.AUTO) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes of ``params`` parameters on one device:
    2 B (+ 2 B of FP8 weight cache per each of the ``fp8_params`` FP8 GEMM weights),
    ``grad_bytes`` and the optimizer's bytes per parameter, each divided over the ``dp``
    replicas as ``zero_stage`` shards it (:func:`archplace.placement.zero.shard_divisors`; the
    gradients unsharded when ``grad_sync`` accumulates them over the micro-batches)::

        weights = 2·params/s_w + 2·fp8_params/s_w

    ``expert_params`` of the ``params`` (and ``fp8_expert_params`` of the ``fp8_params``) are
    routed experts' weights, sharded the same way over the ``expert_dp`` ranks of the
    expert-data-parallel group (default ``dp``) instead; the dense rest over ``dp`` (the DP x
    CP group with context parallelism)::

        weights = (2·dense/s_w + 2·fp8_dense/s_w) + (2·experts/e_w + 2·fp8_experts/e_w)

    Raises:
        ConfigError: expert counts larger than the totals.
    """
    if not 0 <= expert_params <= params or not 0 <= fp8_expert_params <= min(fp8_params, expert_params):
        raise ConfigError(f"expert_params {expert_params} (fp8 {fp8_expert_params}) must be within "
                          f"params {params} (fp8 {fp8_params})")
    p = float(params - expert_params)
    sw, sg, so = shard_divisors(zero_stage, dp, grad_sync)
    per_optimizer = OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer]
    weights = (WEIGHT_BYTES_PER_PARAM * p / sw
               + FP8_WEIGHT_CACHE_BYTES_PER_PARAM * float(fp8_params - fp8_expert_params) / sw)
    gradients = grad_bytes * p / sg
    state = per_optimizer * p / so
    if expert_params:
        e = float(expert_params)
        ew, eg, eo = shard_divisors(zero_stage, dp if expert_dp is None else expert_dp, grad_sync)
        weights = weights + (WEIGHT_BYTES_PER_PARAM * e / ew
                             + FP8_WEIGHT_CACHE_BYTES_PER_PARAM * float(fp8_expert_params) / ew)
        gradients = gradients + grad_bytes * e / eg
        state = state + per_optimizer * e / eo
    return (weights, gradients, state)


def fp8_expert_count(layer: LayerCost) -> int:
    """The FP8 GEMM weights of ``layer`` that are routed experts' (whose FP8 copies shard with
    the experts under ZeRO-3): min(fp8_params, expert_params), assuming the experts' grouped
    GEMMs run in FP8 whenever the layer has FP8 weights (Transformer Engine's recipe runs
    every linear layer's GEMM in FP8)."""
    return min(layer.fp8_params, layer.expert_params)


def in_flight_micro_batches(stage: int, pp: int, micro_batches: int,
                            schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based) of ``pp`` holds at its peak.

    1F1B (PipeDream-Flush, Narayanan et al. 2021, section 2.2.1): stage j runs ``pp - j - 1``
    warm-up forward passes and one more before its first backward pass, after which every
    forward is paired with a backward; it cannot start more than the ``micro_batches`` that
    exist, so it holds ``min(pp - j, micro_batches)``. GPipe holds all ``micro_batches``.

    Raises:
        ConfigError: ``stage`` outside ``0..pp-1``, a non-positive count, or the interleaved
            or DualPipe schedule (see :func:`interleaved_in_flight_chunks`).
    """
    if pp < 1 or micro_batches < 1:
        raise ConfigError(f"pp and micro_batches must be >= 1, got pp={pp}, "
                          f"micro_batches={micro_batches}")
    if not 0 <= stage < pp:
        raise ConfigError(f"stage must be in 0..{pp - 1}, got {stage}")
    if schedule is PipelineSchedule.GPIPE:
        return micro_batches
    if schedule is PipelineSchedule.ONE_F_ONE_B:
        return min(pp - stage, micro_batches)
    raise ConfigError(f"the {schedule.value} schedule counts its devices' in-flight micro-batches itself "
                      "(interleaved_in_flight_chunks; dualpipe.in_flight_peak_bytes)")


def interleaved_in_flight_chunks(device: int, pp: int, micro_batches: int, chunks: int) -> int:
    """Chunk-micro-batches whose activations pipeline device ``device`` holds at its peak under
    interleaved 1F1B with ``chunks`` (v) model chunks per device.

    Megatron-LM's interleaved schedule (Narayanan et al. 2021, section 2.2.2) runs
    W = 2 (pp - device - 1) + (v - 1) N warm-up chunk forward passes before its first backward
    pass, N the micro-batches each chunk runs in a row (pp when pp divides m, else the smallest
    N Megatron-Core accepts: :func:`archplace.placement.timing.micro_batch_group_size`;
    ``get_pp_rank_microbatches`` in megatron/core/pipeline_parallel/schedules.py @ d98e8a64dd);
    the peak is min(W + 1, m v).

    Raises:
        ConfigError: ``device`` outside ``0..pp-1``, chunks < 2, pp < 2, or fewer micro-batches
            than pp (the schedule needs as many).
    """
    if pp < 2 or chunks < 2:
        raise ConfigError(f"interleaving needs pp >= 2 and chunks >= 2, got pp={pp}, "
                          f"chunks={chunks}")
    if micro_batches < pp:
        raise ConfigError(f"interleaving needs at least pp={pp} micro-batches, got {micro_batches}")
    if not 0 <= device < pp:
        raise ConfigError(f"device must be in 0..{pp - 1}, got {device}")
    group = micro_batch_group_size(micro_batches, pp)
    return min(2 * (pp - device - 1) + (chunks - 1) * group + 1, micro_batches * chunks)


def stage_memory(layers: Sequence[LayerCost], *, stage: int, in_flight: int,
                 recompute: Recompute, optimizer: Optimizer = Optimizer.ADAM,
                 zero_stage: int = 0, dp: int = 1,
                 grad_bytes: int = GRADIENT_BYTES_PER_PARAM,
                 expert_dp: int | None = None, grad_sync: GradSync = GradSync.AUTO) -> StageMemory:
    """Memory of one device of a pipeline stage, in bytes.

    Args:
        layers: the stage's layers, in chain order (per TP rank, per micro-batch).
        stage: stage index (only recorded in the result).
        in_flight: micro-batches in flight (see :func:`in_flight_micro_batches`).
        recompute: activation recomputation policy.
        optimizer: optimizer whose state is kept.
        zero_stage, dp: ZeRO stage and the data-parallel replicas it shards the dense
            parameters over (the DP x CP group, dp * cp ranks, with context parallelism).
        grad_bytes: bytes per gradient element (4 fp32, 2 bf16).
        expert_dp: the ranks it shards the routed experts' parameters over (the
            expert-data-parallel group, :mod:`archplace.placement.layout`); default ``dp``.
        grad_sync: when the gradients are reduced (iteration: ZeRO-2/3 hold them unsharded).

    Returns:
        weights = 2 B x params, gradients = grad_bytes x params, optimizer = 12 B (Adam) or
        8 B (SGD) x params, each divided as the ZeRO stage shards it; activations = in_flight x
        sum(saved bytes) (+ the largest ``activation_bytes`` of the stage under full
        recomputation); working = max(working_bytes); gathered = ZeRO-3's window.

    Raises:
        ConfigError: no layers, ``in_flight < 1`` or ``dp < 1``.
    """
    if not layers:
        raise ConfigError(f"stage {stage} has no layers")
    if in_flight < 1 or dp < 1:
        raise ConfigError(f"in_flight and dp must be >= 1, got {in_flight}, {dp}")
    saved = sequential_sum(layer.saved_bytes(recompute) for layer in layers)
    return _device_memory(layers, device=stage, held=in_flight * saved, recompute=recompute,
                          optimizer=optimizer, zero_stage=zero_stage, dp=dp, grad_bytes=grad_bytes,
                          expert_dp=expert_dp, grad_sync=grad_sync)


def interleaved_chunk_counts(device: int, pp: int, micro_batches: int,
                             chunks: int) -> list[tuple[int, ...]]:
    """Chunk-micro-batches of each of its ``chunks`` (v) model chunks that pipeline device
    ``device`` holds right after each forward pass that can be its peak: the last warm-up one
    and every steady-state one (after those, backward passes only free memory).

    Megatron-LM's interleaved schedule (``megatron/core/pipeline_parallel/schedules.py``,
    ``get_model_chunk_id``; Narayanan et al. 2021, section 2.2.2): the k-th forward pass of a
    device runs chunk (k mod p v) // p, its k-th backward pass chunk v - 1 - (k mod p v) // p;
    after W = min(2 (pp - device - 1) + (v - 1) pp, m v) warm-up forward passes, every forward
    pass is followed by a backward pass. Both orders repeat every p v passes with p passes of
    each chunk, so the steady state's first p v snapshots are all the distinct ones. When pp
    does not divide m, each chunk runs N micro-batches in a row
    (:func:`archplace.placement.timing.micro_batch_group_size`), the last group the rest, and
    the warm-up has (v - 1) N chunk passes instead of (v - 1) pp, and the groups are played out.
    Every snapshot sums to :func:`interleaved_in_flight_chunks`.

    Raises:
        ConfigError: as :func:`interleaved_in_flight_chunks`.
    """
    return list(_chunk_counts(device, pp, micro_batches, chunks))


@functools.lru_cache(maxsize=4096)
def _chunk_counts(device: int, pp: int, micro_batches: int, chunks: int) -> tuple[tuple[int, ...], ...]:
    """:func:`interleaved_chunk_counts`, as tuples (cached: the placement search asks for the same
    schedule many times)."""
    interleaved_in_flight_chunks(device, pp, micro_batches, chunks)  # checks the arguments
    size = micro_batch_group_size(micro_batches, pp)
    if size != pp:
        return tuple(_grouped_chunk_counts(device, pp, micro_batches, chunks, size))
    total = micro_batches * chunks
    group = pp * chunks
    warmup = 2 * (pp - device - 1) + (chunks - 1) * pp

    def forwards(count: int) -> list[int]:  # per chunk, among the first ``count`` forward passes
        full, rest = divmod(count, group)
        return [full * pp + min(pp, max(0, rest - c * pp)) for c in range(chunks)]

    if warmup >= total:  # every forward pass before the first backward pass
        return (tuple(forwards(total)),)
    snapshots = []
    for i in range(min(total - warmup, group)):
        done, freed = forwards(warmup + i + 1), forwards(i)[::-1]  # backward: last chunk first
        snapshots.append(tuple(f - b for f, b in zip(done, freed, strict=True)))
    return tuple(snapshots)


def _grouped_chunk_counts(device: int, pp: int, micro_batches: int, chunks: int,
                          size: int) -> list[tuple[int, ...]]:
    """:func:`interleaved_chunk_counts` when each chunk runs ``size`` (N > pp) micro-batches in a
    row, the last group taking the rest (``get_schedule_table`` in Megatron-Core's
    schedules.py): each distinct snapshot once, in order of first appearance.

    After x forward passes chunk c has run F_c(x) of them (its share of the whole groups before
    x, and of the group x falls in); after i backward passes, chunk c has freed F_(v-1-c)(i)
    (backward runs the chunks in reverse). Snapshot i is F(W + i + 1) - freed(i). Within the
    whole groups F grows by N per chunk every N v passes, so snapshot i + N v repeats snapshot i
    while W + i + 1 + N v stays within them: only the first N v snapshots and those that reach
    into the last group are distinct (O(N v), not O(m v))."""
    whole, rest = divmod(micro_batches, size)
    if rest == 0:
        whole, rest = whole - 1, size
    period = size * chunks
    last = whole * period  # where the last group (``rest`` micro-batches) starts

    def ran(x: int) -> list[int]:  # per chunk, among the first x forward passes
        groups, within = divmod(min(x, last), period)
        counts = [groups * size + min(size, max(0, within - c * size)) for c in range(chunks)]
        if x > last:
            counts = [n + min(rest, max(0, x - last - c * rest)) for c, n in enumerate(counts)]
        return counts

    total = micro_batches * chunks
    warmup = min(2 * (pp - device - 1) + (chunks - 1) * size, total)
    if warmup >= total:
        return [tuple(ran(total))]
    steps = total - warmup
    visited = [*range(min(steps, period)), *range(max(period, last - warmup), steps)]
    snapshots: dict[tuple[int, ...], None] = {}
    for i in visited:
        done, freed = ran(warmup + i + 1), ran(i)[::-1]
        snapshots[tuple(d - f for d, f in zip(done, freed, strict=True))] = None
    return list(snapshots)


def interleaved_device_memory(chunk_layers: Sequence[Sequence[LayerCost]], *, device: int,
                              pp: int, micro_batches: int, recompute: Recompute,
                              optimizer: Optimizer = Optimizer.ADAM, zero_stage: int = 0,
                              dp: int = 1,
                              grad_bytes: int = GRADIENT_BYTES_PER_PARAM,
                              expert_dp: int | None = None,
                              grad_sync: GradSync = GradSync.AUTO) -> StageMemory:
    """Memory of pipeline device ``device`` of ``pp`` holding v = ``len(chunk_layers)`` model
    chunks under the interleaved schedule with ``micro_batches`` micro-batches, in bytes.

    Model state of all its layers (sharded as ``zero_stage`` and ``grad_sync`` say over ``dp``,
    the routed experts' over ``expert_dp`` as in :func:`stage_memory`); activations =
    the largest, over the schedule's snapshots (:func:`interleaved_chunk_counts`), of
    sum over its chunks c of count_c x saved bytes of chunk c, plus the largest
    ``activation_bytes`` of its layers under full recomputation; working = the largest working
    set; gathered = ZeRO-3's window.

    Raises:
        ConfigError: no chunk or an empty chunk, ``dp < 1``, or the arguments of
            :func:`interleaved_in_flight_chunks`.
    """
    if not chunk_layers or any(not chunk for chunk in chunk_layers):
        raise ConfigError(f"device {device} has an empty model chunk")
    counts = interleaved_chunk_counts(device, pp, micro_batches, len(chunk_layers))
    saved = [sequential_sum(layer.saved_bytes(recompute) for layer in chunk) for chunk in chunk_layers]
    held = max(sequential_sum(k * b for k, b in zip(snapshot, saved, strict=True)) for snapshot in counts)
    return _device_memory([layer for chunk in chunk_layers for layer in chunk], device=device,
                          held=held, recompute=recompute, optimizer=optimizer, zero_stage=zero_stage,
                          dp=dp, grad_bytes=grad_bytes, expert_dp=expert_dp, grad_sync=grad_sync)


def dualpipe_device_memory(stages: tuple[Sequence[LayerCost], Sequence[LayerCost]], *, device: int,
                           pp: int, micro_batches: int, recompute: Recompute,
                           optimizer: Optimizer = Optimizer.ADAM, zero_stage: int = 0, dp: int = 1,
                           grad_bytes: int = GRADIENT_BYTES_PER_PARAM,
                           expert_dp: int | None = None, grad_sync: GradSync = GradSync.AUTO) -> StageMemory:
    """Memory of pipeline device ``device`` of ``pp`` under DualPipe, in bytes: the model state
    of both its stages (``stages`` = its forward-direction stage ``device`` and its
    reverse-direction stage ``pp - 1 - device``: DualPipe's "2x" parameters), and the
    activations of the peak of its own order (:func:`archplace.placement.dualpipe.in_flight_peak`,
    each direction's micro-batches keeping their stage's saved bytes), plus the largest
    ``activation_bytes`` under full recomputation; sharding (and ``grad_sync``) as in
    :func:`stage_memory`.

    Raises:
        ConfigError: an empty stage, ``dp < 1``.
    """
    if any(not stage for stage in stages):
        raise ConfigError(f"device {device} has an empty stage")
    saved = tuple(sequential_sum(layer.saved_bytes(recompute) for layer in stage) for stage in stages)
    held = in_flight_peak(device, pp, micro_batches, (saved[0], saved[1]))
    return _device_memory([*stages[0], *stages[1]], device=device, held=held, recompute=recompute,
                          optimizer=optimizer, zero_stage=zero_stage, dp=dp, grad_bytes=grad_bytes,
                          expert_dp=expert_dp, grad_sync=grad_sync)


def _device_memory(layers: Sequence[LayerCost], *, device: int, held: float, recompute: Recompute,
                   optimizer: Optimizer, zero_stage: int, dp: int, grad_bytes: int,
                   expert_dp: int | None = None, grad_sync: GradSync = GradSync.AUTO) -> StageMemory:
    """StageMemory of ``layers`` keeping ``held`` bytes of activations (+ the full-recompute
    extra)."""
    if dp < 1 or (expert_dp is not None and expert_dp < 1):
        raise ConfigError(f"dp and expert_dp must be >= 1, got {dp}, {expert_dp}")
    params = fp8_params = experts = fp8_experts = 0
    for layer in layers:
        params += layer.params
        fp8_params += layer.fp8_params
        experts += layer.expert_params
        fp8_experts += fp8_expert_count(layer)
    weights, gradients, optimizer_bytes = model_state_bytes(
        params, optimizer, zero_stage=zero_stage, dp=dp, grad_bytes=grad_bytes, fp8_params=fp8_params,
        expert_params=experts, expert_dp=expert_dp, fp8_expert_params=fp8_experts, grad_sync=grad_sync)
    extra = max(layer.activation_bytes for layer in layers) if recompute is Recompute.FULL else 0.0
    window = float(gathered_bytes(zero_stage, max(layer.params for layer in layers), grad_bytes))
    return StageMemory(stage=device, weights=weights, gradients=gradients, optimizer=optimizer_bytes,
                       activations=held + extra, working=max(layer.working_bytes for layer in layers),
                       gathered=window)


