"""Operator latencies on a known chip from what its kernels sustain (issue #12, item 1).

A preset with an ``efficiency`` section (:class:`~archplace.hw.accelerator.KernelEfficiency`)
is costed here instead of by the cycle model: the cycle model of a GPU as 432 arrays of 16x16
runs every GEMM at about 99 % of the peak, while cuBLAS sustains less (tile and wave
quantization, memory stalls, the clock under load).  Designs of a search space have no
declared efficiency and keep the cycle model; their efficiency is what the cycle counts give.

**GEMM** ``[batch, m, k] x [batch, k, n]`` (NVIDIA, *Matrix Multiplication Background User's
Guide*, DU-09799-001, 2023, sec. 2.3 and 3): the library cuts the ``m x n`` output into tiles
of ``tm x tn`` (256x128 and 128x256 are its most efficient bf16 tiles, sec. 2.3), one thread
block per tile, and runs the blocks in waves of one block per SM (sec. 3.2: 108 tiles of
256x128 per wave on A100).  With ``T = batch·⌈m/tm⌉·⌈n/tn⌉`` tiles::

    tile quantization  q_t = m·n / (⌈m/tm⌉·tm · ⌈n/tn⌉·tn)
                       (a dimension below the tile side takes a smaller tile:
                        :func:`clipped_side`)
    wave quantization  q_w = T / (⌈T / sms⌉ · sms)
    gemm_efficiency    = gemm_sustained · max over the preset's tiles of q_t · q_w

``gemm_sustained`` is what the library reaches once the tiles fill whole waves (a published
cuBLAS measurement, cited in the preset).  On all cores::

    compute_s = 2·batch·m·k·n / (peak_flop_per_s · gemm_efficiency)
    memory_s  = hbm_bytes / (hbm_bandwidth · hbm)
    latency_s = max(compute_s, memory_s, fused epilogue lane time)

where ``hbm_bytes`` is the cycle model's buffer-aware traffic (:mod:`archplace.cost.gemm`).
On one core (one of ``tensor_cores`` arrays) the tiles run one after the other: no wave
quantization, ``compute_s = flop / (peak / tensor_cores · gemm_sustained · q_t)``.

**Measured kernel tables.**  A preset whose efficiency names ``kernel_tables`` (and a
``kernel_floor_s``) takes its GEMM times from the tables' monotone log-space surface, outside
them from the tile/wave model with split-k and the floor, and its streaming kernels' times from
the measured bandwidth-by-size curves (:mod:`archplace.cost.measured_gemm`,
:mod:`archplace.cost.kernel_tables`); the formulas below are the model without tables.

**Vector ops** (element-wise, reductions, softmax, norms, embeddings)::

    latency_s = max(hbm_bytes / (hbm_bandwidth · hbm), lane time of the cycle model)

**Fused attention** (``OpKind.ATTENTION``, FlashAttention): its FLOP at the fraction of the peak
FlashAttention-2 reaches (``attention_fwd`` / ``attention_bwd``), bounded below by its HBM bytes::

    latency_s = max(flop / (peak · attention_fwd|bwd), compulsory HBM bytes / (bw · hbm))

When the efficiency names an ``attention_kernel`` (a measured table,
:mod:`archplace.cost.attention_tables`), the compute time on all SMs is instead the operator's
FLOP over the table's rate for its sequence, head dim, mask and direction
(:func:`~archplace.cost.attention_tables.kernel_time_s`), and ``tensor_cores`` times that on one.

with the FLOP of :mod:`archplace.cost.attention` and its compulsory HBM bytes: Q, K, V, O (and
their gradients) and the log-sum-exp moved once (:func:`attention_compulsory_bytes`). The published
FlashAttention-2 fraction is a measurement of the whole kernel, its re-reads of K and V included
(on a GPU they are mostly served by the L2 cache), so counting Theorem 2's re-reads again would
charge them twice.

**Sustained clock.**  A chip that declares ``sustained_clock`` runs its compute-bound kernels
(table GEMMs, fused attention) at it rather than at the clock they were measured at
(:mod:`archplace.cost.clock`).

Both the scalar path (:func:`estimate`) and the vectorised one (:func:`estimate_many`) call
:func:`op_times`, which works on NumPy columns of designs, so they agree design by design.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from archplace.cost import batched, clock, measured_gemm
from archplace.cost.attention import hbm_traffic_bytes
from archplace.cost.attention_tables import kernel_time_s
from archplace.cost.configs import CoreConfigArray
from archplace.cost.types import ManyEstimates, OpEstimate, compute_or_memory
from archplace.cost.vector import SIMPLE_CYCLES_PER_ELEMENT, cycles_per_element
from archplace.hw.accelerator import Accelerator, KernelEfficiency
from archplace.workload.attention_blocks import attention_flop, computed_fraction, is_backward
from archplace.workload.graph import Operator, OpKind

FloatArray = NDArray[np.float64]

__all__ = ["ChipColumns", "estimate", "estimate_many", "gemm_efficiency", "op_times",
           "tile_quantization", "wave_quantization"]


def tile_quantization(m: int, n: int, tile_rows: int, tile_cols: int) -> float:
    """Useful fraction of the output tiles of an ``m x n`` output cut into ``tile_rows x tile_cols``
    tiles: ``m·n / (⌈m/tm⌉·tm · ⌈n/tn⌉·tn)``; 1 for an empty output.

    Raises:
        ValueError: a non-positive tile.
    """
    if tile_rows <= 0 or tile_cols <= 0:
        raise ValueError(f"tile must be positive, got {tile_rows}x{tile_cols}")
    if m <= 0 or n <= 0:
        return 1.0
    return (m * n) / (-(-m // tile_rows) * tile_rows * -(-n // tile_cols) * tile_cols)


def wave_quantization(tiles: int, sms: int) -> float:
    """Busy fraction of the SMs over the waves of ``tiles`` thread blocks, one per SM at a time:
    ``tiles / (⌈tiles/sms⌉·sms)``; 1 for no tiles.

    Raises:
        ValueError: a non-positive SM count.
    """
    if sms <= 0:
        raise ValueError(f"sms must be positive, got {sms}")
    if tiles <= 0:
        return 1.0
    return tiles / (-(-tiles // sms) * sms)


# Smallest tile side of cuBLASLt's tile set (cublasLtMatmulTile_t runs from 8x8 to 512x64, sides
# powers of two from 8; NVIDIA cuBLAS documentation, cuBLASLt datatypes).
MIN_TILE_SIDE = 8


def clipped_side(side: int, extent: int) -> int:
    """The tile side used along a GEMM dimension of ``extent``: the declared ``side``, or for a
    smaller dimension the smallest power of two >= ``extent`` (at least :data:`MIN_TILE_SIDE`).

    Assumption: the library covers a skinny dimension with one of its smaller tiles rather than
    padding it to a 256-row tile (cuBLASLt has tiles down to 8x8); a GEMV is not 256 x slower.
    """
    if extent >= side:
        return side
    clipped = MIN_TILE_SIDE
    while clipped < extent:
        clipped *= 2
    return min(side, clipped)


def _tiles(batch: int, m: int, n: int, tile: tuple[int, int]) -> int:
    return batch * -(-m // tile[0]) * -(-n // tile[1])


def gemm_efficiency(batch: int, m: int, n: int, efficiency: KernelEfficiency,
                    *, waves: bool = True) -> float:
    """Fraction of the peak a ``[batch, m, k] x [batch, k, n]`` GEMM sustains (module docstring):
    ``gemm_sustained`` x the best tile's tile (x wave, with ``waves``) quantization; in (0, 1].

    Args:
        batch, m, n: GEMM sizes (k does not enter: it is the loop inside each tile).
        efficiency: the chip's declared efficiency.
        waves: include wave quantization (all SMs); False for one core running tiles in turn.
    """
    if batch <= 0 or m <= 0 or n <= 0:
        return efficiency.gemm_sustained
    best = 0.0
    for rows, cols in efficiency.gemm_tiles:
        tile = (clipped_side(rows, m), clipped_side(cols, n))
        quant = tile_quantization(m, n, *tile)
        if waves:
            quant *= wave_quantization(_tiles(batch, m, n, tile), efficiency.sms)
        best = max(best, quant)
    return efficiency.gemm_sustained * best


@dataclass(frozen=True, slots=True)
class ChipColumns:
    """The chip fields the formulas read, one array entry per design (SI units)."""

    peak_flop_per_s: FloatArray
    tensor_cores: FloatArray
    hbm_bandwidth_bytes_per_s: FloatArray
    vector_lanes: NDArray[np.int64]
    vector_cores: NDArray[np.int64]
    clock_hz: FloatArray

    @classmethod
    def from_configs(cls, configs: CoreConfigArray, index: NDArray[np.int64]) -> ChipColumns:
        """Columns of the designs ``index`` of ``configs``."""
        cores = configs.tensor_cores[index]
        macs = (cores * configs.array_rows[index] * configs.array_cols[index]).astype(np.float64)
        clock = configs.clock_hz[index].astype(np.float64)
        return cls(2.0 * macs * clock, cores.astype(np.float64),
                   configs.hbm_bandwidth_bytes_per_s[index].astype(np.float64),
                   configs.vector_lanes[index].astype(np.int64),
                   configs.vector_cores[index].astype(np.int64), clock)

    @classmethod
    def of(cls, accelerators: Sequence[Accelerator]) -> ChipColumns:
        """Columns of ``accelerators`` in their order."""
        def floats(values: list[float]) -> FloatArray:
            return np.array(values, dtype=np.float64)

        return cls(floats([a.peak_flop_per_s for a in accelerators]),
                   floats([a.tensor_cores for a in accelerators]),
                   floats([a.hbm_bandwidth_bytes_per_s for a in accelerators]),
                   np.array([a.vector_lanes for a in accelerators], dtype=np.int64),
                   np.array([a.vector_cores for a in accelerators], dtype=np.int64),
                   floats([a.clock_hz for a in accelerators]))


def _lane_times(elements: int, cpe: int, chip: ChipColumns) -> tuple[FloatArray, FloatArray]:
    single = batched.vector_cycles(elements, chip.vector_lanes, 1, cpe) / chip.clock_hz
    every = batched.vector_cycles(elements, chip.vector_lanes, chip.vector_cores, cpe) / chip.clock_hz
    return single.astype(np.float64), every.astype(np.float64)


def op_times(op: Operator, efficiency: KernelEfficiency, chip: ChipColumns,
             hbm_bytes: FloatArray, *, speedup: float = 1.0) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(compute_single_s, compute_all_s, memory_s) of ``op`` on each design of ``chip`` that
    declares ``efficiency`` (formulas in the module docstring).  The latency on one core / all
    cores is the larger of each compute time and ``memory_s``.

    Args:
        op: a matmul, fused attention or vector operator (not a collective).
        efficiency: the designs' declared efficiency.
        chip: the designs' columns.
        hbm_bytes: the operator's HBM bytes on each design.
        speedup: the GEMM runs with FP8 operands at this many times the bf16 peak (``chip``'s
            peak already includes it); selects an FP8 kernel table (:mod:`archplace.cost.measured_gemm`).

    Raises:
        ValueError: a collective, or an operator kind the vector model does not know.
    """
    memory_s = hbm_bytes / (chip.hbm_bandwidth_bytes_per_s * efficiency.hbm)
    core_peak = chip.peak_flop_per_s / chip.tensor_cores
    if op.kind is OpKind.MATMUL:
        b, m, k, n = op.batch, op.m, op.k, op.n
        flop = 2.0 * b * m * k * n
        every = flop / (chip.peak_flop_per_s * gemm_efficiency(b, m, n, efficiency))
        single = flop / (core_peak * gemm_efficiency(b, m, n, efficiency, waves=False))
        if (efficiency.kernel_tables or efficiency.kernel_floor_s > 0.0) and min(b, m, k, n) > 0:
            every, memory_s = measured_gemm.gemm_times(op, efficiency, chip, memory_s, speedup)
            single = np.maximum(single, every)
        fused = int(op.fused_elements or 0)
        if fused > 0:
            lane_single, lane_all = _lane_times(fused, SIMPLE_CYCLES_PER_ELEMENT, chip)
            single, every = np.maximum(single, lane_single), np.maximum(every, lane_all)
        return single, every, memory_s
    if op.kind is OpKind.ATTENTION:
        if efficiency.attention_kernel is not None:  # the measured table: seconds on all SMs
            every = np.full(len(chip.peak_flop_per_s), kernel_time_s(op, efficiency.attention_kernel))
            # measured in short benchmark runs, taken at the chip's boost clock (no source logs
            # its clock): stretched to the sustained clock like the fractions below
            every = every * clock.attention_scale(efficiency, chip.clock_hz)
            return every * chip.tensor_cores, every, memory_s
        fraction = efficiency.attention_bwd if is_backward(op) else efficiency.attention_fwd
        flop = attention_flop(op)
        single, every = flop / (core_peak * fraction), flop / (chip.peak_flop_per_s * fraction)
        if efficiency.sustained_clock_hz > 0.0:  # the sustained clock (archplace.cost.clock)
            scale = clock.attention_scale(efficiency, chip.clock_hz)
            single, every = single * scale, every * scale
        return single, every, memory_s
    if op.kind is OpKind.COLLECTIVE:
        raise ValueError("collectives are costed on the cluster's links, not here")
    single, every = _lane_times(op.elements, cycles_per_element(op.kind, op.target), chip)
    if efficiency.kernel_tables or efficiency.kernel_floor_s > 0.0:
        memory_s = measured_gemm.streaming_times(op, efficiency, memory_s, hbm_bytes)
    return single, every, memory_s


def attention_compulsory_bytes(op: Operator) -> float:
    """HBM bytes a fused attention operator must move at least: every input and output once
    (Dao et al. 2022, Theorem 2 with an SRAM that holds a whole row block: one pass)."""
    return float(hbm_traffic_bytes(op, np.array([np.inf]), computed_fraction(op))[0])


def estimate(op: Operator, acc: Accelerator, cycle: OpEstimate, *, speedup: float = 1.0) -> OpEstimate:
    """:class:`OpEstimate` of ``op`` on ``acc``, whose ``efficiency`` must be declared.

    Args:
        op: any operator but a collective.
        acc: a chip with ``acc.efficiency``.
        cycle: the cycle model's estimate of ``op`` (its HBM bytes and energy are kept; for a
            fused attention operator the IO-aware traffic of :mod:`archplace.cost.attention`).
        speedup: the peak is this many times the bf16 one (an FP8 GEMM,
            :mod:`archplace.cost.precision`), at the same declared fractions.

    Raises:
        ValueError: ``acc`` declares no efficiency, or as :func:`op_times`.
    """
    if acc.efficiency is None:
        raise ValueError(f"accelerator {acc.name!r} declares no efficiency")
    hbm, energy = cycle.hbm_bytes, cycle.energy_j
    if op.kind is OpKind.ATTENTION:
        hbm = attention_compulsory_bytes(op)
    chip = ChipColumns.of([acc])
    if speedup != 1.0:
        chip = replace(chip, peak_flop_per_s=chip.peak_flop_per_s * speedup)
    single, every, memory = op_times(op, acc.efficiency, chip, np.array([hbm]), speedup=speedup)
    s, a, mem = float(single[0]), float(every[0]), float(memory[0])
    return OpEstimate(max(s, mem), max(a, mem), s, a, mem, 0.0, hbm, energy,
                      compute_or_memory(s, mem), compute_or_memory(a, mem))


def estimate_many(op: Operator, efficiency: KernelEfficiency, chip: ChipColumns,
                  hbm_bytes: FloatArray, energy_j: FloatArray) -> ManyEstimates:
    """:func:`estimate` of ``op`` on the designs of ``chip``, which all declare ``efficiency``.

    Args:
        op: any operator but a collective.
        efficiency: the designs' declared efficiency.
        chip: their columns.
        hbm_bytes, energy_j: the cycle model's HBM bytes and energy of ``op`` on each design.

    Raises:
        ValueError: as :func:`op_times`.
    """
    count = len(chip.peak_flop_per_s)
    if op.kind is OpKind.MATMUL and min(op.batch, op.m, op.k, op.n) <= 0:
        zeros = np.zeros(count)
        return ManyEstimates(zeros, zeros, zeros, zeros, zeros)
    if op.kind is OpKind.ATTENTION:
        hbm_bytes = np.full(count, attention_compulsory_bytes(op))
    single, every, memory = op_times(op, efficiency, chip, np.asarray(hbm_bytes, dtype=np.float64))
    return ManyEstimates(np.maximum(single, memory), np.maximum(every, memory), memory,
                     np.asarray(hbm_bytes, dtype=np.float64), np.asarray(energy_j, dtype=np.float64))
