"""Cost of a fused attention operator (``OpKind.ATTENTION``) on the systolic template.

The operator (:mod:`archplace.workload.attention_op`) is one FlashAttention kernel:
``batch`` = micro-batch x heads B, ``m`` = query length s_q, ``k`` = head dim d, ``n`` = key
length s_kv.  Formulas:

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.cost import batched
from archplace.cost.vector import (
    BACKWARD_CYCLES_PER_ELEMENT,
    CYCLES_PER_ELEMENT,
    SIMPLE_CYCLES_PER_ELEMENT,
    TRANSCENDENTAL_CYCLES_PER_ELEMENT,
)
from archplace.hardware.power import (
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
    _, count = computed_area(op.m, op.n, op.causal, op.skip_masked_blocks)
    br, bc = blocks(op.m, op.n)
    d, b = op.k, op.batch * count
    score, value = (b, br, d, bc), (b, br, bc, d)
    if not is_backward(op):
        return [score, value]
    transposed = (b, bc, br, d)
    return [score, score, transposed, transposed, value]


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
    area, _ = computed_area(op.m, op.n, op.causal, op.skip_masked_blocks)
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
    if is_backward(op):
        passes = np.where(finite, np.ceil(s_kv / col_block), 1.0)
        result: FloatArray = (e * b * (4.0 * s_kv * d + passes * fraction * 4.0 * s_q * d)
                              + 2 * LSE_BYTES * b * s_q * passes * fraction)
        return result
    passes = np.where(finite, np.ceil(s_q / row_block), 1.0)
    result = e * b * (2.0 * s_q * d + passes * fraction * 2.0 * s_kv * d) + LSE_BYTES * b * s_q
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


__all__ = ["BLOCK", "attention_arrays", "attention_flop", "attention_many", "computed_area",
           "estimate_arrays", "hbm_traffic_bytes"]
