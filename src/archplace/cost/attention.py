"""Cost of a fused attention operator (``OpKind.ATTENTION``) on the systolic template.

The operator (:mod:`archplace.workload.attention_op`) is one FlashAttention kernel:
``batch`` = micro-batch x heads B, ``m`` = query length s_q, ``k`` = head dim d of Q and K,
``n`` = key length s_kv, d_v the head dim of V and O (``v_dim``; d except in multi-head latent
attention).  Below, a formula written with d alone holds for d_v = d; with d_v != d, every GEMM
over the value dimension (P V, dP = dO V^T, dV = P^T dO) and every V, O, dO, dV term of the
traffic uses d_v (:mod:`archplace.workload.attention_blocks`).  Formulas:

* **Score blocks.**  FlashAttention-2 tiles the s_q x s_kv score matrix into blocks of
  ``BLOCK`` x ``BLOCK`` (assumption: 128; Dao 2023, sec. 3.3, tunes the block sizes among
  {64, 128} x {64, 128}, and the FlashAttention source, ``csrc/flash_api.cpp``, uses key blocks
  of 128 for head dims up to 128; smaller for a shorter sequence).
  Under a causal mask, FlashAttention-2 skips the blocks whose every column lies above the
  diagonal and applies the mask only on the blocks the diagonal crosses, which it computes in
  full (Dao 2023, sec. 3.1.1, "Causal masking"): :func:`computed_area` counts their score
  elements exactly.  PyTorch SDPA (``skip_masked_blocks`` False) computes every block.
* **FLOP.**  Forward: two GEMMs per score element, S = Q K^T and O = P V, so
  ``4 · B · d · area`` (Dao 2023, sec. 4.1: "4 · seqlen² · head dimension · number of heads",
  halved for causal as there).  Backward: five GEMMs per score element -- S = Q K^T
  recomputed, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q (Dao 2023, Algorithm 2) --
  ``10 · B · d · area``, 2.5 x the forward (the FlashAttention-2 benchmark convention, Dao 2023
  sec. 4.1).
* **Tensor-core time.**  Each computed block is a set of small GEMMs on the arrays, timed with
  :func:`archplace.cost.batched.matmul_cycles` (the template's GEMM cycle model): forward
  ``[Br, d] x [d, Bc]`` and ``[Br, Bc] x [Bc, d]``; backward those two shapes for S and dP
  and ``[Bc, Br] x [Br, d]`` twice (dV, dK) and ``[Br, Bc] x [Bc, d]`` (dQ), each batched over
  B x computed blocks.
* **Vector-core time.**  The online softmax on every computed score element: forward max,
  subtract, exp, sum and the rescale of the running output, ``FORWARD_VECTOR_CYCLES`` per
  element; backward P = exp(S - L) recomputed and dS = P (dP - D), ``BACKWARD_VECTOR_CYCLES``
  (cycle counts of :mod:`archplace.cost.vector`).  FlashAttention-2 runs the softmax between
  the two GEMMs of a block, not overlapped with them (overlapping them is FlashAttention-3's
  contribution, Shah et al. 2024, sec. 3.1-3.2), so tensor and vector time add up.
* **HBM traffic.**  IO-aware tiling (Dao et al. 2022, Theorem 2: Θ(N² d² / M) accesses for
  SRAM of M elements; backward Theorem 5, the same order).  The SRAM one kernel instance uses
  is the template's global buffer divided by its tensor cores (assumption: the buffer is shared
  evenly, as one FlashAttention thread block uses one SM's shared memory).  Row blocks of
  ``Br = min(⌈M / 4d⌉, d)`` and column blocks of ``Bc = ⌈M / 4d⌉`` (Dao et al. 2022,
  Algorithm 1 line 1).  Forward, FlashAttention-2's loop order (outer loop over Q row blocks,
  Dao 2023 Algorithm 1): Q read and O written once, K and V read once per row block, the
  fp32 log-sum-exp written: ``e·B·(2·s_q·d + T_r·f·2·s_kv·d) + 4·B·s_q`` bytes, with
  ``T_r = ⌈s_q / Br⌉`` and f the computed fraction of the score matrix.  Backward (Dao 2023,
  Algorithm 2, outer loop over K/V column blocks): K, V read and dK, dV written once; Q, dO
  read and dQ read and written once per column block, with the fp32 log-sum-exp and
  D = rowsum(dO ∘ O): ``e·B·(4·s_kv·d + T_c·f·4·s_q·d) + 8·B·s_q·T_c·f``.  An unbounded
  buffer holds everything: one block each way.

``latency = max(tensor_s + vector_s, hbm_bytes / bandwidth)``, on one tensor and one vector
core (single) or on all of them (all).  The scalar path (:func:`attention_arrays`) and the
vectorised path (:func:`attention_many`) share one NumPy implementation, so they agree
exactly.

**Ring attention (context parallelism, ``op.cp`` = c > 1).**  The operator computes the
rank's queries against the whole sequence in c steps (score areas per step in
:func:`archplace.workload.attention_blocks.ring_steps`); the kernel time T above covers all of
them (its block GEMMs and traffic are those of the chunk tiles, and its HBM traffic is that of
one kernel over the rank's queries and all the keys it computes: the per-step rescaling of O
is not charged).  At steps 0 .. c-2 the rank sends the K and V block it holds to the next rank
of the ring and receives the next one while it computes on the current one; the last step sends
nothing (Liu et al., "Ring Attention with Blockwise Transformers", 2023, sec. 3; Transformer
Engine's ``attn_forward_func_with_cp``, whose send/receive of step r+1 is posted before the
attention of step r).  The backward pass sends K, V and the dK, dV accumulated so far: twice
the bytes, the same overlap.  With ``a_r`` the score elements of step r and A their sum, step
r computes for ``t_r = T · a_r / A`` (assumption: the kernel's time splits over the steps in
proportion to their scores), and one transfer takes ``t_x = α + bytes / β`` (a send/receive
of :mod:`archplace.cost.collective`, on the link :meth:`Cluster.group_link` gives a group of c
ranks ``op.cp_stride`` (= tp) apart: NVLink while tp x c ranks fit in a node, the inter-node
link otherwise).  The exposed communication is::

    exposed = Σ_{r=0}^{c-2} max(0, t_x - t_r)

added to the latency on one core and on all cores (each with its own T), reported as the
estimate's ``communication_s`` (on all cores) and making it communication-bound when positive.
The c - 1 transfers' bytes are charged the HBM-path energy on both ends, as a collective's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.cost import batched
from archplace.cost.collective import collective_time_s
from archplace.cost.types import Bound, ManyEstimates, OpEstimate
from archplace.cost.vector import (
    BACKWARD_CYCLES_PER_ELEMENT,
    CYCLES_PER_ELEMENT,
    SIMPLE_CYCLES_PER_ELEMENT,
    TRANSCENDENTAL_CYCLES_PER_ELEMENT,
)
from archplace.hw.cluster import Cluster
from archplace.hw.power import (
    HBM_PATH_ENERGY_J_PER_BYTE,
    LOCAL_SRAM_ENERGY_J_PER_BYTE,
    MAC_ENERGY_J,
    VECTOR_OP_ENERGY_J,
)
from archplace.workload.attention_blocks import (
    BLOCK,
    attention_flop,
    blocks,
    computed_area,
    is_backward,
    op_area,
    op_blocks,
    ring_steps,
    value_dim,
)
from archplace.workload.graph import Operator, OpKind

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

FORWARD_VECTOR_CYCLES = CYCLES_PER_ELEMENT[OpKind.SOFTMAX]
"""Online softmax per score element: max, subtract, exp, sum, rescale (:mod:`~archplace.cost.vector`)."""

BACKWARD_VECTOR_CYCLES = (SIMPLE_CYCLES_PER_ELEMENT + TRANSCENDENTAL_CYCLES_PER_ELEMENT
                          + BACKWARD_CYCLES_PER_ELEMENT[OpKind.SOFTMAX])
"""Backward per score element: P = exp(S - L) recomputed (subtract + exp) and the softmax
backward dS = P (dP - D) (:mod:`~archplace.cost.vector`)."""

LSE_BYTES = 4
"""Bytes of one log-sum-exp (and one D) entry: fp32 (Dao 2023, Algorithm 1 line 13)."""


def _gemms(op: Operator) -> list[tuple[int, int, int, int]]:
    """(batch, m, k, n) of the block GEMMs of one operator."""
    _, count = op_area(op)
    br, bc = op_blocks(op)
    d, d_v, b = op.k, value_dim(op), op.batch * count
    score, value = (b, br, d, bc), (b, br, bc, d)
    if not is_backward(op):
        return [score, (b, br, bc, d_v)]
    # S = Q K^T, dP = dO V^T, dV = P^T dO, dK = dS^T Q, dQ = dS K
    return [score, (b, br, d_v, bc), (b, bc, br, d_v), (b, bc, br, d), value]


def estimate_arrays(op: Operator, rows: IntArray, cols: IntArray, tensor_cores: IntArray,
                    output_stationary: NDArray[np.bool_], buffer_bytes: FloatArray,
                    bandwidth: FloatArray, clock_hz: FloatArray, vector_lanes: IntArray,
                    vector_cores: IntArray,
                    scalesim: NDArray[np.bool_] | None = None) -> dict[str, FloatArray]:
    """Per-design arrays (length N, one entry per design) of the estimate of ``op``.

    ``scalesim[i]`` times design i's block GEMMs with SCALE-Sim's count
    (``ArrayTiming.SCALESIM``); None: the overlapped timing everywhere.

    Returns:
        ``{"single_s", "all_s", "compute_single_s", "compute_all_s", "memory_s", "hbm_bytes",
        "energy_j"}`` (seconds, bytes, joules).
    """
    count = len(rows)
    zeros = np.zeros(count)
    if op.batch <= 0 or op.m <= 0 or op.k <= 0 or op.n <= 0:
        return {key: zeros for key in ("single_s", "all_s", "compute_single_s", "compute_all_s",
                                       "memory_s", "hbm_bytes", "energy_j")}
    backward = is_backward(op)
    area, _ = op_area(op)
    fraction = area / (op.m * op.n)
    single_cyc = np.zeros(count, dtype=np.int64)
    all_cyc = np.zeros(count, dtype=np.int64)
    feed = np.zeros(count, dtype=np.int64)
    e = op.dtype_bytes or 2
    for b, m, k, n in _gemms(op):
        one, every = batched.matmul_cycles(b, m, k, n, rows, cols, tensor_cores, output_stationary,
                                           scalesim)
        single_cyc = single_cyc + one
        all_cyc = all_cyc + every
        feed = feed + batched.matmul_feed_elements(b, m, k, n, rows, cols, output_stationary)
    vector_elements = op.batch * area
    cpe = BACKWARD_VECTOR_CYCLES if backward else FORWARD_VECTOR_CYCLES
    vec_single = batched.vector_cycles(vector_elements, vector_lanes, 1, cpe)
    vec_all = batched.vector_cycles(vector_elements, vector_lanes, vector_cores, cpe)
    compute_single = single_cyc / clock_hz + vec_single / clock_hz
    compute_all = all_cyc / clock_hz + vec_all / clock_hz
    hbm_bytes = hbm_traffic_bytes(op, buffer_bytes / tensor_cores, fraction)
    memory_s = hbm_bytes / bandwidth
    macs = attention_flop(op) / 2.0
    energy = (macs * MAC_ENERGY_J + e * feed * LOCAL_SRAM_ENERGY_J_PER_BYTE
              + hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE + vector_elements * cpe * VECTOR_OP_ENERGY_J)
    return {"single_s": np.maximum(compute_single, memory_s), "all_s": np.maximum(compute_all, memory_s),
            "compute_single_s": compute_single, "compute_all_s": compute_all, "memory_s": memory_s,
            "hbm_bytes": hbm_bytes, "energy_j": energy}


def hbm_traffic_bytes(op: Operator, sram_bytes: FloatArray, fraction: float) -> FloatArray:
    """HBM bytes of the operator for an SRAM of ``sram_bytes`` per kernel instance (module
    docstring, Dao et al. 2022 Theorems 2 and 5); ``fraction`` = computed share of the scores."""
    e = op.dtype_bytes or 2
    b, s_q, d, s_kv = op.batch, op.m, op.k, op.n
    finite = np.isfinite(sram_bytes)
    sram = np.where(finite, sram_bytes, 0.0) // e
    col_block = np.maximum(1, np.ceil(sram / (4 * max(d, 1))))
    row_block = np.maximum(1, np.minimum(col_block, d))
    d_v = value_dim(op)
    if is_backward(op):
        passes = np.where(finite, np.ceil(s_kv / col_block), 1.0)
        if d_v == d:  # the same arithmetic as ever, so figures stay bit-identical
            kv, q_side = 4.0 * s_kv * d, 4.0 * s_q * d
        else:  # K, V read and dK, dV written; Q, dO read and dQ read and written per pass
            kv, q_side = 2.0 * s_kv * (d + d_v), 1.0 * s_q * (3 * d + d_v)
        result: FloatArray = (e * b * (kv + passes * fraction * q_side)
                              + 2 * LSE_BYTES * b * s_q * passes * fraction)
        return result
    passes = np.where(finite, np.ceil(s_q / row_block), 1.0)
    if d_v == d:
        q_side, kv = 2.0 * s_q * d, 2.0 * s_kv * d
    else:  # Q read and O written once; K and V read per pass
        q_side, kv = 1.0 * s_q * (d + d_v), 1.0 * s_kv * (d + d_v)
    result = e * b * (q_side + passes * fraction * kv) + LSE_BYTES * b * s_q
    return result


def attention_arrays(op: Operator, acc: Any) -> dict[str, float]:
    """The estimate of ``op`` on one accelerator (``acc`` an :class:`Accelerator`), as floats."""
    def ints(value: int) -> IntArray:
        return np.array([value], dtype=np.int64)

    def floats(value: float) -> FloatArray:
        return np.array([value], dtype=np.float64)

    arrays = estimate_arrays(
        op, ints(acc.array_rows), ints(acc.array_cols), ints(acc.tensor_cores),
        np.array([acc.dataflow.value == "os"]), floats(acc.buffer_bytes),
        floats(acc.hbm_bandwidth_bytes_per_s), floats(acc.clock_hz), ints(acc.vector_lanes),
        ints(acc.vector_cores), np.array([acc.array_timing.value == "scalesim"]))
    return {key: float(value[0]) for key, value in arrays.items()}


def attention_many(op: Operator, configs: Any) -> dict[str, FloatArray]:
    """The estimate of ``op`` on every design of ``configs`` (a :class:`CoreConfigArray`)."""
    return estimate_arrays(
        op, configs.array_rows, configs.array_cols, configs.tensor_cores,
        configs.output_stationary, configs.buffer_bytes, configs.hbm_bandwidth_bytes_per_s,
        configs.clock_hz, configs.vector_lanes, configs.vector_cores, configs.scalesim_timing)


def ring_transfer_s(op: Operator, cluster: Cluster | None) -> float:
    """Seconds of one ring step's transfer ``t_x = α + bytes / β`` (module docstring): the K and
    V block (``op.ring_bytes``) forward, K, V, dK and dV (twice the bytes) backward, on the
    link of a group of ``op.cp`` ranks ``op.cp_stride`` apart.  0 without CP.

    Raises:
        ConfigError: a ring over several ranks and no cluster.
    """
    if op.cp <= 1:
        return 0.0
    if cluster is None:
        raise ConfigError(f"operator {op.name}: ring attention over {op.cp} context-parallel "
                          "ranks needs the cluster's links (a cost model with cluster=...)")
    alpha, beta = cluster.group_link(op.cp, max(op.cp_stride, 1))
    sent = op.ring_bytes * (2.0 if is_backward(op) else 1.0)
    return collective_time_s("send_recv", sent, 2, alpha, beta)


def ring_energy_j(op: Operator) -> float:
    """Energy of the ring's c - 1 transfers: their bytes read on the sender and written on the
    receiver at ``HBM_PATH_ENERGY_J_PER_BYTE``, as a collective's are (link energy is not
    modelled); 0 without CP."""
    if op.cp <= 1:
        return 0.0
    sent = op.ring_bytes * (2.0 if is_backward(op) else 1.0)
    return (op.cp - 1) * 2.0 * sent * HBM_PATH_ENERGY_J_PER_BYTE


def ring_exposed_s(op: Operator, kernel_s: FloatArray, transfer_s: float) -> FloatArray:
    """Exposed ring communication ``Σ_{r=0}^{c-2} max(0, t_x - T · a_r / A)`` (module docstring)
    for kernel times ``kernel_s`` (seconds, one per design) and one transfer of ``transfer_s``."""
    kernel = np.asarray(kernel_s, dtype=np.float64)
    exposed = np.zeros_like(kernel)
    steps = ring_steps(op)
    total = float(sum(area for area, _ in steps))
    if op.cp <= 1 or transfer_s <= 0 or total <= 0:
        return exposed
    for area, _ in steps[:-1]:
        exposed = exposed + np.maximum(0.0, transfer_s - kernel * (area / total))
    return exposed


def with_ring(op: Operator, estimate: OpEstimate, cluster: Cluster | None) -> OpEstimate:
    """``estimate`` (of the attention kernel) with the exposed ring communication added to both
    latencies, ``communication_s`` = the exposed time on all cores; unchanged without CP.

    Raises:
        ConfigError: as :func:`ring_transfer_s`.
    """
    if op.cp <= 1:
        return estimate
    transfer = ring_transfer_s(op, cluster)
    single, every = (float(x) for x in ring_exposed_s(
        op, np.array([estimate.single_core_s, estimate.all_cores_s]), transfer))
    return OpEstimate(
        estimate.single_core_s + single, estimate.all_cores_s + every, estimate.compute_single_s,
        estimate.compute_all_s, estimate.memory_s, every, estimate.hbm_bytes,
        estimate.energy_j + ring_energy_j(op),
        Bound.COMMUNICATION if single > 0 else estimate.bound_single,
        Bound.COMMUNICATION if every > 0 else estimate.bound_all)


def with_ring_many(op: Operator, many: ManyEstimates, cluster: Cluster | None) -> ManyEstimates:
    """:func:`with_ring` on every design of ``many`` (equal to it design by design)."""
    if op.cp <= 1:
        return many
    transfer = ring_transfer_s(op, cluster)
    return ManyEstimates(many.single_core_s + ring_exposed_s(op, many.single_core_s, transfer),
                         many.all_cores_s + ring_exposed_s(op, many.all_cores_s, transfer),
                         many.memory_s, many.hbm_bytes, many.energy_j + ring_energy_j(op))


__all__ = ["BLOCK", "attention_arrays", "attention_flop", "attention_many", "blocks", "computed_area",
           "estimate_arrays", "hbm_traffic_bytes", "ring_energy_j", "ring_exposed_s", "ring_transfer_s",
           "with_ring", "with_ring_many"]
