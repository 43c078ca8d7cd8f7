"""ZeRO stages and the data-parallel gradient traffic of a plan.

Sharding (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, Fig. 1 and section 5): with Psi parameters on one device, W = 2 bytes of bf16
weights, G gradient bytes (:class:`~archplace.placement.plan.GradReduceDtype`: 4 fp32 as
Megatron-LM's bf16 recipe, or 2) and K optimizer bytes (12 for mixed-precision Adam), the model
state of one of Nd data-parallel replicas is

* stage 0: (W + G + K) Psi;
* stage 1 (P_os; Megatron-LM's distributed optimizer): (W + G) Psi + K Psi / Nd;
* stage 2 (P_os+g): W Psi + (G + K) Psi / Nd;
* stage 3 (P_os+g+p; PyTorch FSDP FULL_SHARD, Zhao et al., "PyTorch FSDP: Experiences on
  Scaling Fully Sharded Data Parallel", VLDB 2023): (W + G + K) Psi / Nd, plus the unsharded
  parameters of the layers in flight: FSDP gathers a layer's parameters just before it runs
  and prefetches the next layer's (section 3.3, forward and backward prefetching), and its rate
  limiter allows at most two in-flight all-gathers (section 3.4), so a device holds the gathered
  weights of two layers and the unsharded gradient of the layer being back-propagated before
  its reduce-scatter: (2 W + G) Psi_max, Psi_max the largest layer of the segment (assumption:
  the largest layer stands for both, an upper bound of the two consecutive ones).

With W = 2, G = 2 these are the paper's (2 + 2 + K) Psi forms of Fig. 1.

Traffic on the DP group (ring collectives; a reduce-scatter or an all-gather costs half of an
all-reduce of the same buffer, :func:`archplace.placement.timing.dp_allreduce_cost`; ZeRO
section 7.2.1):

* stage 0: an all-reduce of the G Psi gradient bytes once per iteration;
* stage 1: a reduce-scatter of the gradients (G Psi) and an all-gather of the updated bf16
  parameters (W Psi) once per iteration (Megatron-LM's distributed optimizer: fp32 grad buffer
  reduce-scattered, bf16 parameter buffer all-gathered);
* stage 2: the gradients are sharded, so they cannot be accumulated over micro-batches: every
  micro-batch reduce-scatters each layer's gradients during its backward pass (as DeepSpeed's
  ZeRO-2 does), and the parameters are all-gathered once per iteration;
* stage 3: every micro-batch all-gathers each layer's parameters before its forward pass and
  again before its backward pass, and reduce-scatters its gradients after it (FSDP, Zhao et
  al. 2023, section 3.3).

Prefetching (:func:`segment_zero_comm_s`): the per-layer collectives of stages 2 and 3 run on
one communication stream beside the compute stream, and what is exposed is each pass's end less
its compute, over the whole segment. FSDP issues the next layer's all-gather ahead of its
compute: forward, as soon as the stream is free and at most two layers' weights are gathered
(the rate limiter of section 3.4: AG_l waits for layer l - 2's forward to free its weights);
backward, AG_(l-1) as layer l's backward starts (``BACKWARD_PRE``, section 3.3.2) and RS_l when
it ends. So a segment's first all-gather of each pass and its last reduce-scatter are exposed
whole (nothing computes before or after them), a layer whose collectives outlast its own compute
can hide behind its neighbours', and a stream that falls behind carries its backlog to the next
layer. (Earlier versions paired each layer's collectives with its own compute, max(0, AG - F) +
max(0, AG + RS - B) per layer, which exposes nothing in a compute-bound segment.)

Hybrid sharding (HSDP, r replicas; :mod:`archplace.placement.layout`): every collective above
runs over the shard group of Nd / r ranks (``dp`` is then its size, the shard count), and the
replicas all-reduce their G Psi / (Nd / r) bytes of gradient shards over the replica group of r
ranks once per iteration, after gradient accumulation (Megatron-Core's FSDP hybrid mode, which
all-reduces across the outer DP group at the optimizer step; FSDP2 with
``set_requires_all_reduce(False)`` on all but the last micro-batch, as TorchTitan's
gradient-accumulation loop leaves it to the last backward). At stage 1 it follows the
reduce-scatter bucket by bucket (each bucket reduce-scattered in the shard group, then its shard
all-reduced across replicas, FSDP's ``HYBRID_SHARD`` order); at stages 2 and 3 it is the tail's
only reduction.

The once-per-iteration gradient reduction of stages 0 and 1 (and HSDP's replica all-reduce)
runs, with ``dp_overlap``, bucket by bucket while the last micro-batch's backward pass produces
the gradients (:func:`bucketed_exposed_s`); the parameter all-gather of stages 1 and 2 is
exposed (assumption: Megatron-LM's ``--overlap-param-gather`` into the next forward pass is not
modelled).

Gradient synchronisation (``Plan.grad_sync``, :class:`~archplace.placement.choices.GradSync`;
:func:`reduces_every_micro_batch`): the traffic above is each stage's framework default
(``auto``). With ``iteration`` stages 2 and 3 accumulate the gradients over the micro-batches
and reduce them once (FSDP's ``no_sync``, FSDP2's ``set_requires_gradient_sync(False)``): the
accumulated gradients are held unsharded (the gradient divisor of :func:`shard_divisors` is 1:
G Psi bytes, as stage 1), the per-layer reduce-scatters leave every micro-batch (stage 2 then
has no per-micro-batch traffic, stage 3 keeps its all-gathers) and one reduce-scatter of the
G Psi gradient bytes per iteration joins the once-per-iteration traffic, bucketed over the last
backward pass with ``dp_overlap`` as stage 1's. With ``micro_batch`` stages 0 and 1 reduce
every micro-batch's gradients (DDP without ``no_sync``): the stage's reduction (all-reduce,
reduce-scatter) runs once per micro-batch, after each segment's backward pass, bucketed over it
with ``dp_overlap`` (:func:`micro_batch_reduce_s`), and leaves the once-per-iteration traffic,
which keeps stage 1's parameter all-gather. Per-micro-batch traffic is charged in the segment's
time T_c (v m times, in the pipeline's pace), once-per-iteration traffic in the tail. Hybrid
sharding's replica all-reduce stays once per iteration in every mode (FSDP2's
``set_requires_all_reduce(False)`` until the last micro-batch, as above).

Overlap costs (:mod:`archplace.placement.interference`): a collective hidden behind compute
slows it by L compute-seconds (:meth:`Interference.lost_s`); :func:`dp_tail_comm_s` and
:func:`segment_zero_comm_s` return, beside the exposed and total times, the compute time added
by hiding (``slowed``), max(0, L - exposed) per collective and the compute it overlaps.
Exposed collectives (the parameter all-gather of stages 1 and 2, the reduction without
``dp_overlap``) slow nothing.

Every function takes NumPy arrays or floats and returns float64 arrays of the same shape, so the
placement tables and ``evaluate_plan`` compute the same figures with the same operations.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from archplace.placement.choices import GradSync
from archplace.placement.interference import NO_INTERFERENCE, Interference, slowed_s

FloatArray = npt.NDArray[np.float64]
ArrayLike = float | FloatArray

WEIGHT_BYTES_PER_PARAM = 2
"""bf16 copy of the weights used by forward and backward (and all-gathered by ZeRO)."""

BUCKET_ELEMENTS_FLOOR = 40_000_000
BUCKET_ELEMENTS_PER_REPLICA = 1_000_000
"""Megatron-LM's default DDP bucket: max(40,000,000, 1,000,000 * dp) gradient elements
(``megatron/core/distributed/distributed_data_parallel.py``: "bucket_size =
max(40000000, 1000000 * dp_size)", chosen so that buckets stay bandwidth-bound)."""


def reduces_every_micro_batch(zero_stage: int, grad_sync: GradSync | str = GradSync.AUTO) -> bool:
    """Whether every micro-batch reduces its gradients (module docstring, "gradient
    synchronisation"): ``grad_sync`` micro_batch, or auto at ZeRO stages 2 and 3; else they are
    accumulated and reduced once per iteration."""
    sync = GradSync(grad_sync)
    if sync is GradSync.AUTO:
        return zero_stage >= 2
    return sync is GradSync.MICRO_BATCH


def shard_divisors(zero_stage: int, dp: int,
                   grad_sync: GradSync | str = GradSync.AUTO) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) divisors of one device's model state under
    ``zero_stage`` with ``dp`` replicas: stage 0 (1, 1, 1), 1 (1, 1, dp), 2 (1, dp, dp),
    3 (dp, dp, dp); the gradients' is 1 at every stage when they are accumulated over the
    micro-batches (``grad_sync`` iteration: held unsharded until the once-per-iteration
    reduce-scatter). ``dp`` = 0 stands for "infinitely many" (bounds only)."""
    sharded_grads = zero_stage >= 2 and reduces_every_micro_batch(zero_stage, grad_sync)
    return (dp if zero_stage >= 3 else 1, dp if sharded_grads else 1, dp if zero_stage >= 1 else 1)


def gathered_bytes(zero_stage: int, max_layer_params: ArrayLike, grad_bytes: int) -> FloatArray:
    """ZeRO-3's window of unsharded state, in bytes: (2 W + G) x the largest layer's parameters
    (module docstring), 0 below stage 3."""
    params = np.asarray(max_layer_params, dtype=np.float64)
    if zero_stage < 3:
        return np.zeros_like(params)
    return (2 * WEIGHT_BYTES_PER_PARAM + grad_bytes) * params


def bucket_bytes(dp: int, grad_bytes: int) -> float:
    """Bytes of one gradient bucket: Megatron-LM's default element count times ``grad_bytes``."""
    return float(max(BUCKET_ELEMENTS_FLOOR, BUCKET_ELEMENTS_PER_REPLICA * dp) * grad_bytes)


def bucketed_exposed_s(const_s: float, per_byte_s: float, total_bytes: ArrayLike, bucket: float,
                       backward_s: ArrayLike) -> FloatArray:
    """Exposed time of a gradient reduction run bucket by bucket during a backward pass.

    The ``total_bytes`` of gradients are produced evenly over ``backward_s`` and cut into
    n = ceil(total / bucket) buckets, the first of min(bucket, total) bytes and the last of
    total - (n - 1) bucket; bucket i is reduced, on one communication stream, once its
    gradients are ready, each reduction costing const + per_byte * bytes (PyTorch DDP, Li et
    al., VLDB 2020, section 3.2.3; Megatron-LM ``--overlap-grad-reduce``). The reductions end at
    max over i of (ready_i + the reductions from i on); over the full buckets i = 0 .. n - 2
    that is linear in i, so bucket 0, bucket n - 2 or the (shorter) last bucket decides, and
    the part left after the backward pass is the largest of

        const + per_byte * last                                      (the last bucket)
        n const + per_byte * total - backward (1 - first / total)   (from the first)
        2 const + per_byte * (bucket + last) - backward (1 - (n - 1) bucket / total)  (n >= 2)

    (0 without gradients). Bounded below by the last bucket's reduction, above by n reductions.
    """
    total = np.asarray(total_bytes, dtype=np.float64)
    backward = np.asarray(backward_s, dtype=np.float64)
    safe = np.where(total > 0, total, 1.0)
    count = np.ceil(safe / bucket)
    last = safe - (count - 1.0) * bucket
    first = np.minimum(bucket, safe)
    tail = const_s + per_byte_s * last
    whole = count * const_s + per_byte_s * safe
    exposed = np.maximum(tail, whole - backward * (1.0 - first / safe))
    before_last = (2.0 * const_s + per_byte_s * (bucket + last)
                   - backward * (1.0 - (count - 1.0) * bucket / safe))
    exposed = np.where(count >= 2, np.maximum(exposed, before_last), exposed)
    return np.where(total > 0, exposed, 0.0)


class CommTimes(NamedTuple):
    """Seconds of a set of collectives: ``exposed`` (not hidden behind compute), ``total`` (all
    of their time) and ``slowed`` (compute time added by hiding the rest,
    :mod:`archplace.placement.interference`); the time charged is exposed + slowed."""

    exposed: FloatArray
    total: FloatArray
    slowed: FloatArray


def dp_tail_comm_s(cost: tuple[float, float], *, zero_stage: int, grad_bytes: int, dp: int,
                   params: ArrayLike, backward_s: ArrayLike, overlap: bool,
                   expert_cost: tuple[float, float] = (0.0, 0.0), expert_dp: int = 1,
                   expert_params: ArrayLike = 0.0,
                   interference: Interference = NO_INTERFERENCE, replicas: int = 1,
                   replica_costs: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0), (0.0, 0.0)),
                   grad_sync: GradSync | str = GradSync.AUTO) -> CommTimes:
    """(exposed, total, slowed) seconds of the once-per-iteration DP traffic of ``params`` parameters
    (module docstring): stage 0 the all-reduce of the gradients, stage 1 their reduce-scatter
    and the parameter all-gather, stage 2 the parameter all-gather, stage 3 nothing; with
    ``grad_sync`` iteration stages 2 and 3 add the reduce-scatter of the accumulated gradients,
    with micro_batch stages 0 and 1 leave out their reduction (it runs every micro-batch:
    :func:`micro_batch_reduce_s`). With ``overlap`` the gradient reduction is bucketed over
    ``backward_s`` (:func:`bucketed_exposed_s`); the all-gather is always exposed.

    Expert parameters (``expert_params``, routed experts' weights) have their own collectives
    of the same kinds over the expert-data-parallel group (``expert_cost``, ``expert_dp``
    ranks), after the dense ones on the same stream: their times add (with ``overlap`` each
    reduction is bucketed over the backward pass on its own, Megatron-Core keeping expert and
    dense gradients in separate buffers; an assumption that their exposed parts add).

    The bucketed reduction slows the backward pass it hides behind: slowed = max(0, L -
    exposed part of R), L = ``interference.lost_s`` of R, its whole time, over its group (0
    without ``overlap``: then R is exposed whole).

    Args:
        cost: (start-up s, s per byte) of an all-reduce over the DP group (DP x CP with context
            parallelism; :mod:`archplace.placement.layout`), ``dp`` its ranks; a
            reduce-scatter or an all-gather costs half of each.
        params: the parameters reduced over it (the dense ones).
        interference: the compute capacity a hidden collective takes (default none).
        replicas, replica_costs: hybrid sharding's r replicas (module docstring; ``dp`` and
            ``expert_dp`` are then the shard groups' sizes) and the all-reduce costs over the
            dense and the expert replica groups; 1 (default): no replica all-reduce.
        grad_sync: when the gradients are reduced (:func:`reduces_every_micro_batch`).
    """
    reduce = not reduces_every_micro_batch(zero_stage, grad_sync)
    dense = _tail_one(cost, zero_stage, grad_bytes, dp, params, backward_s, overlap, interference,
                      (replicas, replica_costs[0]), reduce=reduce, gather=True, bucket_ranks=0)
    if (expert_dp == 1 and replicas == 1) or not np.any(np.asarray(expert_params) > 0):
        return dense
    expert = _tail_one(expert_cost, zero_stage, grad_bytes, expert_dp, expert_params,
                       backward_s, overlap, interference, (replicas, replica_costs[1]), reduce=reduce,
                       gather=True, bucket_ranks=0)
    return CommTimes(dense.exposed + expert.exposed, dense.total + expert.total,
                     dense.slowed + expert.slowed)


def micro_batch_reduce_s(cost: tuple[float, float], *, zero_stage: int, grad_bytes: int, dp: int,
                         params: ArrayLike, backward_s: ArrayLike, overlap: bool,
                         expert_cost: tuple[float, float] = (0.0, 0.0), expert_dp: int = 1,
                         expert_params: ArrayLike = 0.0,
                         interference: Interference = NO_INTERFERENCE, replicas: int = 1,
                         grad_sync: GradSync | str = GradSync.AUTO) -> CommTimes:
    """(exposed, total, slowed) seconds, per micro-batch, of the gradient reduction of a segment
    of ``params`` parameters whose backward pass takes ``backward_s`` when stages 0 and 1 reduce
    every micro-batch (``grad_sync`` micro_batch; module docstring): stage 0 an all-reduce,
    stage 1 a reduce-scatter over the ``dp`` ranks of ``cost`` (the shard group with hybrid
    sharding, whose replica all-reduce stays in :func:`dp_tail_comm_s`), bucketed over the
    backward pass with ``overlap`` as there; the experts' over their group likewise. 0 otherwise
    (stages 2 and 3 have :func:`segment_zero_comm_s`). ``replicas`` only sizes the buckets
    (Megatron-LM's count the whole DP group). Arrays of any shape (the placement tables' n x n)."""
    count = np.asarray(params, dtype=np.float64)
    if zero_stage >= 2 or not reduces_every_micro_batch(zero_stage, grad_sync):
        zeros = np.zeros(np.broadcast(count, np.asarray(backward_s)).shape)
        return CommTimes(zeros, zeros, zeros)
    dense = _tail_one(cost, zero_stage, grad_bytes, dp, count, backward_s, overlap, interference,
                      reduce=True, gather=False, bucket_ranks=dp * replicas)
    if expert_dp == 1 or not np.any(np.asarray(expert_params) > 0):
        return dense
    expert = _tail_one(expert_cost, zero_stage, grad_bytes, expert_dp, expert_params, backward_s, overlap,
                       interference, bucket_ranks=expert_dp * replicas, reduce=True, gather=False)
    return CommTimes(dense.exposed + expert.exposed, dense.total + expert.total,
                     dense.slowed + expert.slowed)


def _tail_one(cost: tuple[float, float], zero_stage: int, grad_bytes: int, dp: int,
              params: ArrayLike, backward_s: ArrayLike, overlap: bool,
              interference: Interference,
              replica: tuple[int, tuple[float, float]] = (1, (0.0, 0.0)), *, reduce: bool, gather: bool,
              bucket_ranks: int) -> CommTimes:
    """:func:`dp_tail_comm_s` of one group (``replica``: (replicas, all-reduce cost over them)):
    the shard group's gradient reduction (an all-reduce at stage 0, a reduce-scatter above)
    when ``reduce``, the parameter all-gather of stages 1 and 2 when ``gather``, the replicas'
    all-reduce; ``bucket_ranks``: the ranks that size the buckets (0: dp x replicas)."""
    count = np.asarray(params, dtype=np.float64)
    zeros = np.zeros_like(count)
    replicas, (replica_const, replica_byte) = replica
    gathers = gather and 1 <= zero_stage <= 2
    if replicas == 1 and (dp == 1 or not (reduce or gathers)):
        return CommTimes(zeros, zeros, zeros)
    const_s, per_byte_s = cost
    if not reduce:
        reduce_const = reduce_byte = 0.0
    elif zero_stage == 0:
        reduce_const, reduce_byte = const_s, per_byte_s
    else:
        reduce_const, reduce_byte = const_s / 2.0, per_byte_s / 2.0
    grads = grad_bytes * count
    shard_byte = reduce_byte
    shard_part = np.where(count > 0, reduce_const + reduce_byte * grads, 0.0)
    if replicas > 1:  # each bucket's 1/dp shard all-reduced across the replicas after it
        reduce_const, reduce_byte = reduce_const + replica_const, reduce_byte + replica_byte / dp
    reduces = reduce or replicas > 1
    if reduces:
        whole = np.where(count > 0, reduce_const + reduce_byte * grads, 0.0)
        hidden = (bucketed_exposed_s(reduce_const, reduce_byte, grads,
                                     bucket_bytes(bucket_ranks or dp * replicas, grad_bytes), backward_s)
                  if overlap else whole)
    else:
        whole = hidden = zeros
    if gathers:
        gathered = np.where(count > 0, const_s / 2.0 + per_byte_s / 2.0 * (WEIGHT_BYTES_PER_PARAM * count),
                            0.0)
    else:
        gathered = zeros
    if overlap and reduces and not interference.free:
        transfer = np.where(count > 0, shard_byte * grads, 0.0)
        lost = interference.lost_s(shard_part, transfer, cost, dp)
        if replicas > 1:
            part = np.where(count > 0, replica_const + replica_byte / dp * grads, 0.0)
            wire = np.where(count > 0, replica_byte / dp * grads, 0.0)
            lost = lost + interference.lost_s(part, wire, (replica_const, replica_byte), replicas)
        slowed = slowed_s(lost, hidden)
    else:
        slowed = zeros
    return CommTimes(hidden + gathered, whole + gathered, slowed)


def segment_zero_comm_s(cost: tuple[float, float], *, zero_stage: int, grad_bytes: int, dp: int,
                        params: ArrayLike, fwd_s: ArrayLike, backward_s: ArrayLike,
                        expert_cost: tuple[float, float] = (0.0, 0.0), expert_dp: int = 1,
                        expert_params: ArrayLike | None = None,
                        interference: Interference = NO_INTERFERENCE,
                        grad_sync: GradSync | str = GradSync.AUTO) -> CommTimes:
    """(exposed, total, slowed) seconds per micro-batch of the ZeRO-2/3 collectives of every
    segment of consecutive layers (module docstring, "prefetching"): n x n tables whose entry
    [i, j] is the segment of layers i..j (0 where j < i), for arrays of n layers' ``params`` (the
    dense ones, over the ``dp`` ranks of ``cost``), forward times and backward (+ recompute)
    times. ``expert_params`` (per layer) have their own RS and AG over the expert-data-parallel
    group (``expert_cost``, ``expert_dp`` ranks), on the same stream after the dense ones.
    Stages 0 and 1 (and no sharding) have none.

    Each pass of a segment runs on two streams, compute and communication, as FSDP runs it
    (Zhao et al., VLDB 2023, sec. 3.3-3.4): forward, AG_l may start once AG_(l-1) is done and
    layer l - 2's forward has freed its gathered weights (at most two layers gathered, the rate
    limiter), and F_l once AG_l and F_(l-1) are done; backward, the segment's last layer is
    gathered first, the next gather AG_(l-1) is issued as B_l starts (FSDP's BACKWARD_PRE
    prefetch), RS_l as B_l ends, and the pass ends with the first layer's RS. Exposed: each
    pass's end less its compute (stage 2: no gathers, the backward pass only). Total:
    2 AG + RS per layer (stage 2: RS). Slowed, per pass: max(0, L - exposed), L the
    compute-seconds its collectives take (``interference.lost_s``, summed).

    With ``grad_sync`` iteration the gradients are reduced once per iteration
    (:func:`dp_tail_comm_s`): no reduce-scatters here, stage 2 has nothing and stage 3 its
    all-gathers only.
    """
    count = np.asarray(params, dtype=np.float64)
    n = count.shape[0]
    zeros = np.zeros((n, n))
    experts = (expert_params is not None and expert_dp > 1
               and bool(np.any(np.asarray(expert_params) > 0)))
    scatters = reduces_every_micro_batch(zero_stage, grad_sync)
    if zero_stage < 2 or (dp == 1 and not experts) or (zero_stage == 2 and not scatters):
        return CommTimes(zeros, zeros, zeros)
    dense_cost = cost if dp > 1 else (0.0, 0.0)
    rs, ag = _layer_collectives(dense_cost, grad_bytes, count, scatters)
    lost_rs, lost_ag = _layer_lost(interference, dense_cost, dp, rs, ag)
    if experts:
        rs_e, ag_e = _layer_collectives(expert_cost, grad_bytes,
                                        np.asarray(expert_params, dtype=np.float64), scatters)
        rs, ag = rs + rs_e, ag + ag_e
        lost_rs_e, lost_ag_e = _layer_lost(interference, expert_cost, expert_dp, rs_e, ag_e)
        lost_rs, lost_ag = lost_rs + lost_rs_e, lost_ag + lost_ag_e
    forward = np.asarray(fwd_s, dtype=np.float64)
    backward = np.asarray(backward_s, dtype=np.float64)
    upper = np.triu(np.ones((n, n), dtype=bool))
    if zero_stage == 2:
        ag, lost_ag = np.zeros(n), np.zeros(n)
        exposed_fwd = zeros
    else:
        exposed_fwd = _forward_exposure(ag, forward)
    exposed_bwd = _backward_exposure(ag, rs, backward)
    per_layer_total = rs + 2.0 * ag
    slowed = (slowed_s(_range_sums(lost_ag, upper), exposed_fwd)
              + slowed_s(_range_sums(lost_ag + lost_rs, upper), exposed_bwd))
    return CommTimes(exposed_fwd + exposed_bwd, _range_sums(per_layer_total, upper),
                     np.where(upper, slowed, 0.0))


def _range_sums(values: FloatArray, upper: npt.NDArray[np.bool_]) -> FloatArray:
    """[i, j]: the sum of ``values`` over i..j, summed left to right (0 where j < i)."""
    return np.cumsum(np.where(upper, values[None, :], 0.0), axis=1)


def _forward_exposure(ag: FloatArray, fwd: FloatArray) -> FloatArray:
    """[i, j]: the forward pass of layers i..j less their compute, gathers prefetched with two
    layers' weights at most (:func:`segment_zero_comm_s`); every start i at once."""
    n = ag.shape[0]
    out = np.zeros((n, n))
    starts = np.arange(n)
    comm = np.zeros(n)  # when the stream is free: the end of the last gather
    done = np.zeros(n)  # the end of the last forward compute
    before = np.zeros(n)  # the end of the one before it (its weights freed then)
    compute = np.zeros(n)
    for layer in range(n):
        fresh = starts == layer
        comm, done, before, compute = (np.where(fresh, 0.0, x) for x in (comm, done, before, compute))
        if ag[layer] > 0:  # (a layer without parameters gathers nothing)
            comm = np.maximum(comm, before) + ag[layer]
            finish = np.maximum(done, comm) + fwd[layer]
        else:
            finish = done + fwd[layer]
        compute = compute + fwd[layer]
        before, done = done, finish
        out[:, layer] = np.where(starts <= layer, finish - compute, 0.0)
    return out


def _backward_exposure(ag: FloatArray, rs: FloatArray, bwd: FloatArray) -> FloatArray:
    """[i, j]: the backward pass of layers j..i (last layer first) less their compute: the last
    layer gathered first, AG_(l-1) issued as B_l starts, RS_l as it ends, the pass over when the
    first layer's RS is (:func:`segment_zero_comm_s`); every end j at once."""
    n = ag.shape[0]
    out = np.zeros((n, n))
    ends = np.arange(n)
    comm = np.zeros(n)  # when the stream is free
    gathered = np.zeros(n)  # the end of the gather of the layer about to run
    done = np.zeros(n)  # the end of the last backward compute
    compute = np.zeros(n)
    for layer in range(n - 1, -1, -1):
        fresh = ends == layer
        comm = np.where(fresh, ag[layer], comm)
        gathered = np.where(fresh, ag[layer], gathered)
        done, compute = (np.where(fresh, 0.0, x) for x in (done, compute))
        start = np.maximum(done, gathered)
        finish = start + bwd[layer]
        compute = compute + bwd[layer]
        last = np.maximum(comm, finish) + rs[layer]  # the segment starts here: its final RS
        out[layer, :] = np.where(ends >= layer, last - compute, 0.0)
        if layer > 0:  # the segment goes on: AG of the layer below as B starts, then this RS
            if ag[layer - 1] > 0:  # (a layer without parameters gathers nothing, waits for nothing)
                gathered = np.maximum(comm, start) + ag[layer - 1]
                comm = gathered
            else:
                gathered = np.zeros(n)
            if rs[layer] > 0:
                comm = np.maximum(comm, finish) + rs[layer]
        done = finish
    return out


def _layer_collectives(cost: tuple[float, float], grad_bytes: int, count: FloatArray,
                       scatters: bool = True) -> tuple[FloatArray, FloatArray]:
    """(reduce-scatter of the gradients, all-gather of the weights) of layers with ``count``
    parameters over a group of all-reduce ``cost``, in seconds (0 without parameters; the
    reduce-scatters 0 unless ``scatters``: the gradients are reduced every micro-batch)."""
    half_const, half_byte = cost[0] / 2.0, cost[1] / 2.0
    has = count > 0
    rs = np.where(has & scatters, half_const + half_byte * (grad_bytes * count), 0.0)
    ag = np.where(has, half_const + half_byte * (WEIGHT_BYTES_PER_PARAM * count), 0.0)
    return rs, ag


def _layer_lost(interference: Interference, cost: tuple[float, float], ranks: int, rs: FloatArray,
                ag: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Compute-seconds the layers' reduce-scatters ``rs`` and all-gathers ``ag`` (seconds, from
    :func:`_layer_collectives` over a group of all-reduce ``cost``) take from the compute they
    overlap (:meth:`~archplace.placement.interference.Interference.lost_s`; their transfer time
    is their time less the start-up, half of ``cost[0]``)."""
    if interference.free or ranks <= 1:
        return np.zeros_like(rs), np.zeros_like(ag)
    half_const = cost[0] / 2.0
    lost_rs = interference.lost_s(rs, np.maximum(0.0, rs - half_const), cost, ranks)
    lost_ag = interference.lost_s(ag, np.maximum(0.0, ag - half_const), cost, ranks)
    return lost_rs, lost_ag
