"""GEMM and streaming-kernel times of a known chip from its measured kernel tables (issue #24,
items 1 and 4), for :func:`archplace.cost.efficiency.op_times`.

**GEMM outside the tables** (and on a chip without a GEMM table for the dtype): the tile/wave
model of :mod:`archplace.cost.efficiency` with k and split-k, HBM streaming and a floor.  For
each of the preset's tiles ``tm x tn`` (clipped to a skinny dimension), ``T =
b·⌈m/tm⌉·⌈n/tn⌉`` output tiles run in ``W = ⌈T / sms⌉`` waves of one thread block per SM; each
tile's main loop runs over k at ``peak · gemm_sustained / sms`` FLOP/s per SM.  When the tiles
leave SMs idle (``T < sms``) the library splits k across ``s`` thread blocks per tile (split-k,
the reduction of the partial tiles is not charged)::

    s         = min(⌊sms / T⌋, max(1, k / K_SLICE))                (1 when T >= sms)
    compute_s = min over tiles of  W · 2·tm·tn·(k / s) / (peak · gemm_sustained / sms)
    model_s   = max(compute_s, traced bytes / (bw · hbm), kernel_floor_s)

For ``T >= sms`` this is the quantized model ``flop / (peak · gemm_efficiency)`` exactly.  Each
term is non-decreasing in b, m, n and k (padded sizes, tiles and waves grow, ``s`` shrinks with T
and ``k / s`` grows with k), so ``model_s`` is.  ``K_SLICE`` (:data:`K_SLICE`) is an assumption.

**GEMM with a table**: ``min(max(model_s, L), U)`` with ``L, U`` the table surface's bounds
(:meth:`archplace.cost.kernel_tables.GemmSurface.bounds_s`): the interpolated measurement inside
the table's box, the measured throughput of the nearest shape above it, the model (never slower
than the nearest measured shape) below it.  An FP8 GEMM (``speedup`` > 1) takes
the chip's FP8 table; without one, its bf16 table's bounds divided by ``speedup`` (the FP8 GEMM
sustains the bf16 fraction of its doubled peak: the presets' ``fp8_speedup`` assumption), never
below the floor.  An FP8 table may be a sibling chip's (the same die with faster HBM: the
h100-80gb preset prices FP8 GEMMs from an H200's table), so a GEMM priced from one never
takes less than streaming its operands and result once, one byte an element, at this chip's
datasheet HBM bandwidth (:func:`fp8_streaming_floor_s`).  The GEMM's memory time is reported
as its streaming time capped at that latency: the measured kernel time already includes its
memory traffic.  With a declared
sustained clock the table's time is stretched to it (:func:`archplace.cost.clock.sustained_gemm_s`).

**Streaming kernels** (element-wise, norms, softmax, reductions, embeddings): the chip's
measured bandwidth curve for the kernel class
(:meth:`archplace.cost.kernel_tables.BandwidthCurve.time_s` over the operator's HBM bytes), or
without one ``max(hbm_bytes / (bw · hbm), kernel_floor_s)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from archplace.cost import clock
from archplace.cost.kernel_tables import GemmSurface, chip_tables
from archplace.hw.accelerator import KernelEfficiency
from archplace.workload.graph import Operator, OpKind

if TYPE_CHECKING:
    from archplace.cost.efficiency import ChipColumns

FloatArray = NDArray[np.float64]

__all__ = ["K_SLICE", "clamped", "fp8_streaming_floor_s", "gemm_model_s", "gemm_times", "streaming_times"]

#: Smallest k a split-k slice runs (elements).  Assumption, not a measurement: a slice must at
#: least fill the main loop's software pipeline, a few stages of a 64-deep k block in NVIDIA's
#: tensor-core GEMM kernels; 4 x 64 = 256 elements of k.
K_SLICE = 256.0


def gemm_model_s(op: Operator, efficiency: KernelEfficiency, chip: ChipColumns, *,
                 compute_only: bool = False) -> FloatArray:
    """``model_s`` of the module docstring for each design of ``chip`` (seconds); with
    ``compute_only`` its ``compute_s`` alone.

    Args:
        op: a GEMM with positive sizes.
        efficiency: the designs' declared efficiency.
        chip: the designs' columns (the peak already at the FP8 rate for an FP8 GEMM).
    """
    from archplace.cost.efficiency import clipped_side

    b, m, k, n = op.batch, op.m, op.k, op.n
    sms = efficiency.sms
    per_sm = chip.peak_flop_per_s * efficiency.gemm_sustained / sms
    best = np.full(len(per_sm), np.inf)
    for rows, cols in efficiency.gemm_tiles:
        tm, tn = clipped_side(rows, m), clipped_side(cols, n)
        tiles = b * -(-m // tm) * -(-n // tn)
        waves = -(-tiles // sms)
        slices = 1.0 if tiles >= sms else min(float(sms // tiles), max(1.0, k / K_SLICE))
        best = np.minimum(best, waves * 2.0 * tm * tn * (k / slices) / per_sm)
    if compute_only:
        return best
    traced = op.bytes_read + op.bytes_written
    if traced <= 0:
        traced = 2.0 * b * (m * k + k * n + m * n)
    streaming = traced / (chip.hbm_bandwidth_bytes_per_s * efficiency.hbm)
    result: FloatArray = np.maximum(np.maximum(best, streaming), efficiency.kernel_floor_s)
    return result


def gemm_times(op: Operator, efficiency: KernelEfficiency, chip: ChipColumns, memory_s: FloatArray,
               speedup: float = 1.0) -> tuple[FloatArray, FloatArray]:
    """(all-cores compute seconds, memory seconds) of a GEMM on a chip with kernel tables
    (module docstring): their larger is the latency; memory seconds are ``memory_s`` capped at
    it, and where they reach it the compute seconds are the tile/wave time (memory-bound).

    Raises:
        ConfigError: a table of ``efficiency.kernel_tables`` cannot be read.
    """
    tables = chip_tables(efficiency.kernel_tables, efficiency.kernel_floor_s)
    model = gemm_model_s(op, efficiency, chip)
    tiles_s = gemm_model_s(op, efficiency, chip, compute_only=True)
    fp8 = speedup != 1.0
    fp8_table = fp8 and "fp8" in tables.gemm  # else an FP8 GEMM takes the bf16 table, sped up
    surface = tables.gemm.get("fp8" if fp8_table else "bf16")
    scale = 1.0 / speedup if fp8 and not fp8_table else 1.0
    measured = clamped(model, surface, op, efficiency.kernel_floor_s, scale)
    if fp8_table:  # perhaps a sibling chip's
        measured = np.maximum(measured, fp8_streaming_floor_s(op, chip))
    value = measured
    if surface is not None and max(efficiency.sustained_clock_hz,
                                   efficiency.sustained_clock_fp8_hz) > 0.0:  # archplace.cost.clock
        dtype = "fp8" if fp8_table else "bf16"
        value = clock.sustained_gemm_s(measured, tiles_s, memory_s,
                                       clock.gemm_table_scale(efficiency, dtype, chip.clock_hz, fp8=fp8))
    # max(compute, memory) is ``value``; a GEMM whose time does not exceed its streaming time
    # is reported memory-bound (its compute part the tile/wave time, at most ``value``)
    compute: FloatArray = np.where(value > memory_s, value, np.minimum(tiles_s, value))
    return compute, np.minimum(memory_s, measured)


def fp8_streaming_floor_s(op: Operator, chip: ChipColumns) -> FloatArray:
    """The FP8 GEMM's operands and result, one byte an element (a lower bound: the result is
    written in bf16), at the chip's datasheet HBM bandwidth (seconds per design): less than any
    kernel takes to stream them once from HBM, which a table
    measured on a chip of the same die with faster HBM (the h100-80gb preset prices FP8 GEMMs
    from an H200's table) must not undercut."""
    streamed = float(op.batch) * (op.m * op.k + op.k * op.n + op.m * op.n)
    floor: FloatArray = streamed / chip.hbm_bandwidth_bytes_per_s
    return floor


def clamped(model_s: FloatArray, surface: GemmSurface | None, op: Operator, floor_s: float,
            scale: float = 1.0) -> FloatArray:
    """``max(min(max(model_s, L·scale), U·scale), floor_s)`` with ``L, U`` the bounds of
    ``surface`` at ``op``'s shape; ``model_s`` itself without a surface."""
    if surface is None:
        return model_s
    lower, upper = surface.bounds_s(op.batch, op.m, op.n, op.k)
    value: FloatArray = np.maximum(np.minimum(np.maximum(model_s, lower * scale), upper * scale), floor_s)
    return value


def streaming_times(op: Operator, efficiency: KernelEfficiency, memory_s: FloatArray,
                    hbm_bytes: FloatArray) -> FloatArray:
    """Memory seconds of a streaming (vector) operator (module docstring); ``memory_s``
    unchanged for an operator that moves nothing.

    Raises:
        ConfigError: a table of ``efficiency.kernel_tables`` cannot be read.
    """
    if op.elements <= 0 or not np.any(hbm_bytes > 0):
        return memory_s
    model = np.maximum(memory_s, efficiency.kernel_floor_s)
    if not efficiency.kernel_tables or op.kind is OpKind.COLLECTIVE:
        return model
    curve = chip_tables(efficiency.kernel_tables, efficiency.kernel_floor_s).curve_for(op.kind.value)
    if curve is None:
        return model
    return curve.time_s(hbm_bytes, model)
