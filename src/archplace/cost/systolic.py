"""The systolic-array cost model: latency, HBM traffic and energy of every operator.

Per operator kind (docs/model.md, Per-operator cost):

* matmul -- :mod:`archplace.cost.gemm`: cycles on one array and on all
  ``tensor_cores`` arrays (weight or output stationary), HBM traffic of a
  buffer-aware tiling, and the transfer compute cannot hide (WS: the first weight
  tile of each array; OS: the last output tile).  Bytes the traced operator
  reads or writes beyond its GEMM operands (a bias, a fused epilogue's other
  input) are added to the traffic.  A fused element-wise epilogue
  (``op.fused_elements``) runs on one vector core (single) or all vector cores
  (all) at ``SIMPLE_CYCLES_PER_ELEMENT`` and overlaps the matmul::

      compute_s = cycles / clock_hz + exposed_bytes / hbm_bandwidth
      latency_s = max(compute_s, epilogue_s, hbm_bytes / hbm_bandwidth)

* element-wise, reduction, softmax, norm, embedding -- :mod:`archplace.cost.vector`:
  ``⌈elements / (lanes · cores)⌉ · cycles_per_element / clock_hz``, bounded below by
  the op's HBM bytes over the bandwidth (``bytes_read + bytes_written``; only the
  written bytes for generators and fills, none for allocations).
* fused attention -- :mod:`archplace.cost.attention` (FlashAttention on the arrays, the
  vector cores and HBM; under context parallelism plus the exposed ring communication on the
  link of the model's cluster the CP group spans).
* collective -- :mod:`archplace.cost.collective` on the link of the model's
  cluster that a group of ``op.group`` consecutive ranks spans; ``op.target`` names
  the collective, the buffer is the larger of ``bytes_read`` and ``bytes_written``
  (the full buffer whichever side the operator reports).  A group of 1 costs 0.

Energy (constants and sources in :mod:`archplace.hw.power`): MACs x
``MAC_ENERGY_J`` + operand feed x ``LOCAL_SRAM_ENERGY_J_PER_BYTE`` + HBM bytes x
``HBM_PATH_ENERGY_J_PER_BYTE`` + vector-lane operations x ``VECTOR_OP_ENERGY_J``; a
collective is charged the HBM path of its bytes (link energy is not modelled).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.cost import attention, batched, efficiency, gemm
from archplace.cost.configs import CoreConfigArray
from archplace.cost.types import (
    ZERO_ESTIMATE,
    ManyEstimates,
    OpEstimate,
    OpLatency,
    collective_estimate,
    compute_or_memory,
)
from archplace.cost.vector import (
    SIMPLE_CYCLES_PER_ELEMENT,
    cycles_per_element,
    vector_cycles,
    vector_hbm_bytes,
)
from archplace.hw.accelerator import Accelerator, ArrayTiming, Dataflow
from archplace.hw.cluster import Cluster
from archplace.hw.power import (
    HBM_PATH_ENERGY_J_PER_BYTE,
    LOCAL_SRAM_ENERGY_J_PER_BYTE,
    MAC_ENERGY_J,
    VECTOR_OP_ENERGY_J,
)
from archplace.workload.graph import Operator, OpKind

FloatArray = NDArray[np.float64]


def op_key(op: Operator) -> tuple[Any, ...]:
    """What an operator's cost depends on (its dimensions, bytes, kind and target; for a fused
    attention operator also its masking, dtype, FLOP and phase, which set its declared efficiency)."""
    key = (op.kind, op.target, op.batch, op.m, op.k, op.n, op.elements, op.bytes_read,
           op.bytes_written, getattr(op, "group", 1), getattr(op, "fused_elements", 0),
           getattr(op, "causal", False), getattr(op, "skip_masked_blocks", False),
           getattr(op, "dtype_bytes", 0))
    if op.kind is OpKind.ATTENTION:
        return (*key, op.flop, op.phase, op.v_dim, op.cp, op.cp_stride, op.ring_bytes)
    return key


def matmul_estimate(
    batch: int, m: int, k: int, n: int, *, rows: int, cols: int, cores: int = 1,
    output_stationary: bool = False, clock_hz: float, buffer_bytes: float = math.inf,
    hbm_bandwidth_bytes_per_s: float = math.inf, bytes_per_element: int = 2,
    traced_bytes: float = 0.0, fused_elements: int = 0, vector_cores: int = 1, vector_lanes: int = 1,
    array_timing: ArrayTiming = ArrayTiming.OVERLAPPED, speedup: float = 1.0,
    output_bytes_per_element: int | None = None, traced_bytes_per_element: int | None = None,
) -> OpEstimate:
    """Estimate of the GEMM ``[batch, m, k] x [batch, k, n]`` (formulas in the module docstring).

    Args:
        batch, m, k, n: GEMM sizes (0 in any gives :data:`ZERO_ESTIMATE`).
        rows, cols, cores: array shape and number of arrays ("all cores" uses ``cores``).
        output_stationary: OS instead of WS dataflow.
        clock_hz: array clock.
        buffer_bytes: global buffer; ``math.inf`` = everything fits (compulsory traffic).
        hbm_bandwidth_bytes_per_s: ``math.inf`` = no memory time.
        bytes_per_element: operand width.
        traced_bytes: bytes the traced operator reads and writes; any excess over the GEMM
            operands (a bias, a fused epilogue's other inputs) is added to the traffic.
        fused_elements: element-wise epilogue work on the vector cores.
        vector_cores, vector_lanes: the vector side, for the epilogue.
        array_timing: the arrays' cycle model (:class:`ArrayTiming`, :mod:`archplace.cost.gemm`).
        speedup: the arrays run this many times more MACs per cycle (FP8 operands,
            :mod:`archplace.cost.precision`): the cycle counts are divided by it.
        output_bytes_per_element: width of the output written (default ``bytes_per_element``);
            the output's compulsory ``batch·m·n`` elements are charged at it.
        traced_bytes_per_element: the operand width of ``traced_bytes`` (default
            ``bytes_per_element``), for the excess over the GEMM operands.
    """
    b = batch
    if b <= 0 or m <= 0 or k <= 0 or n <= 0:
        return ZERO_ESTIMATE
    os_, e, clock, bw = output_stationary, bytes_per_element, clock_hz, hbm_bandwidth_bytes_per_s
    tasks = b * (gemm.tile_count(m, n, rows, cols) if os_ else gemm.fold_count(k, n, rows, cols))
    traffic = gemm.matmul_hbm_elements(b, m, k, n, rows, cols, gemm.buffer_elements(buffer_bytes, e))
    traced_e = e if traced_bytes_per_element is None else traced_bytes_per_element
    extra = max(0.0, traced_bytes - traced_e * b * (m * k + k * n + m * n))
    hbm_bytes = e * traffic + extra
    if output_bytes_per_element is not None and output_bytes_per_element != e:
        hbm_bytes += (output_bytes_per_element - e) * b * m * n
    memory_s = hbm_bytes / bw
    exposed_s = e * gemm.exposed_elements(m, k, n, rows, cols, os_) / bw
    rate = clock if speedup == 1.0 else clock * speedup
    compute_single = gemm.matmul_cycles(b, m, k, n, rows, cols, 1, os_, array_timing) / rate + exposed_s
    compute_all = (gemm.matmul_cycles(b, m, k, n, rows, cols, cores, os_, array_timing) / rate
                   + exposed_s * min(cores, tasks))
    compute_single = max(compute_single,
                         vector_cycles(fused_elements, vector_lanes, 1, SIMPLE_CYCLES_PER_ELEMENT) / clock)
    compute_all = max(compute_all, vector_cycles(fused_elements, vector_lanes, vector_cores,
                                                 SIMPLE_CYCLES_PER_ELEMENT) / clock)
    feed = gemm.matmul_feed_elements(b, m, k, n, rows, cols, os_)
    energy = (b * m * k * n * MAC_ENERGY_J + e * feed * LOCAL_SRAM_ENERGY_J_PER_BYTE
              + hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE
              + fused_elements * SIMPLE_CYCLES_PER_ELEMENT * VECTOR_OP_ENERGY_J)
    return OpEstimate(max(compute_single, memory_s), max(compute_all, memory_s), compute_single,
                      compute_all, memory_s, 0.0, hbm_bytes, energy,
                      compute_or_memory(compute_single, memory_s),
                      compute_or_memory(compute_all, memory_s))


class SystolicCostModel:
    """:class:`~archplace.cost.model.CostModel` of systolic arrays and vector cores (module docstring).

    Results are cached on the instance, keyed by the operator's dimensions and the
    accelerator fields its kind depends on -- designs that differ only in HBM
    capacity (or, for a vector op, in anything but the vector cores) share entries.

    Args:
        cluster: links for collective operators; without one, a collective over more
            than one device raises :class:`ConfigError`.
        cache_size: entries kept (the cache is emptied when full); 0 turns caching off.
    """

    def __init__(self, cluster: Cluster | None = None, cache_size: int = 1 << 18) -> None:
        self.cluster = cluster
        self._cache_size = cache_size
        self._cache: dict[tuple[Any, ...], OpEstimate] = {}
        self._many: dict[tuple[Any, ...], ManyEstimates] = {}
        self._hits = 0
        self._misses = 0

    # ----------------------------------------------------------------- one accelerator
    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Latency of ``op`` on one core and on all cores of its type of ``acc``.

        Raises:
            ConfigError: a collective over several devices without a cluster, or an
                unknown collective.
            ValueError: an operator kind the model does not know (a bug upstream).
        """
        return self.estimate(op, acc).latency

    def estimate(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """Latency, traffic, bound and energy of ``op`` on ``acc`` (errors as :meth:`latency`)."""
        key = (op_key(op), self._acc_key(op, acc))
        cached = self._cache.get(key)
        if cached is not None:
            self._hits += 1
            return cached
        self._misses += 1
        if acc.efficiency is not None and op.kind is not OpKind.COLLECTIVE:
            result = self._declared(op, acc)
        elif op.kind is OpKind.MATMUL:
            result = self._matmul(op, acc)
        elif op.kind is OpKind.COLLECTIVE:
            result = self._collective(op)
        elif op.kind is OpKind.ATTENTION:
            result = _attention_estimate(attention.attention_arrays(op, acc))
        else:
            result = self._vector(op, acc)
        if op.kind is OpKind.ATTENTION:
            result = attention.with_ring(op, result, self.cluster)
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[key] = result
        return result

    def _declared(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """A chip that declares its efficiency (:mod:`archplace.cost.efficiency`); the cycle
        model still gives a matmul's or vector op's HBM bytes and energy."""
        if op.kind is OpKind.ATTENTION:
            cycle = _attention_estimate(attention.attention_arrays(op, acc))
        elif op.kind is OpKind.MATMUL:
            cycle = self._matmul(op, acc)
        else:
            cycle = self._vector(op, acc)
        return efficiency.estimate(op, acc, cycle)

    @staticmethod
    def _acc_key(op: Operator, acc: Accelerator) -> tuple[Any, ...]:
        if acc.efficiency is not None and op.kind is not OpKind.COLLECTIVE:
            return (acc.efficiency, acc.tensor_cores, acc.array_rows, acc.array_cols,
                    acc.buffer_bytes, acc.hbm_bandwidth_bytes_per_s, acc.clock_hz,
                    acc.bytes_per_element, acc.dataflow, acc.vector_cores, acc.vector_lanes)
        if op.kind is OpKind.MATMUL:
            vec = (acc.vector_cores, acc.vector_lanes) if getattr(op, "fused_elements", 0) else ()
            return (acc.tensor_cores, acc.array_rows, acc.array_cols, acc.buffer_bytes,
                    acc.hbm_bandwidth_bytes_per_s, acc.clock_hz, acc.bytes_per_element,
                    acc.dataflow, acc.array_timing, *vec)
        if op.kind is OpKind.COLLECTIVE:
            return ()
        if op.kind is OpKind.ATTENTION:
            return (acc.tensor_cores, acc.array_rows, acc.array_cols, acc.buffer_bytes,
                    acc.hbm_bandwidth_bytes_per_s, acc.clock_hz, acc.dataflow, acc.vector_cores,
                    acc.vector_lanes, acc.array_timing)
        return (acc.vector_cores, acc.vector_lanes, acc.hbm_bandwidth_bytes_per_s, acc.clock_hz)

    def _matmul(self, op: Operator, acc: Accelerator) -> OpEstimate:
        return matmul_estimate(
            op.batch, op.m, op.k, op.n, rows=acc.array_rows, cols=acc.array_cols,
            cores=acc.tensor_cores, output_stationary=acc.dataflow is Dataflow.OS,
            clock_hz=acc.clock_hz, buffer_bytes=acc.buffer_bytes,
            hbm_bandwidth_bytes_per_s=acc.hbm_bandwidth_bytes_per_s,
            bytes_per_element=acc.bytes_per_element, traced_bytes=op.bytes_read + op.bytes_written,
            fused_elements=int(getattr(op, "fused_elements", 0) or 0),
            vector_cores=acc.vector_cores, vector_lanes=acc.vector_lanes, array_timing=acc.array_timing,
        )

    def _vector(self, op: Operator, acc: Accelerator) -> OpEstimate:
        cpe = cycles_per_element(op.kind, op.target)
        if op.elements <= 0 or cpe <= 0:
            return ZERO_ESTIMATE
        clock = acc.clock_hz
        hbm_bytes = vector_hbm_bytes(op.target, op.bytes_read, op.bytes_written)
        memory_s = hbm_bytes / acc.hbm_bandwidth_bytes_per_s
        single = vector_cycles(op.elements, acc.vector_lanes, 1, cpe) / clock
        every = vector_cycles(op.elements, acc.vector_lanes, acc.vector_cores, cpe) / clock
        energy = op.elements * cpe * VECTOR_OP_ENERGY_J + hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE
        return OpEstimate(max(single, memory_s), max(every, memory_s), single, every, memory_s, 0.0,
                          hbm_bytes, energy, compute_or_memory(single, memory_s),
                          compute_or_memory(every, memory_s))

    def _collective(self, op: Operator) -> OpEstimate:
        energy = float(op.bytes_read + op.bytes_written) * HBM_PATH_ENERGY_J_PER_BYTE
        return collective_estimate(op, self.cluster, energy, "SystolicCostModel")

    # ----------------------------------------------------------------- many accelerators
    def latency_many(self, op: Operator, configs: CoreConfigArray) -> tuple[FloatArray, FloatArray]:
        """(single_core_s, all_cores_s) of ``op`` on each of the N designs of ``configs``.

        Equal, design by design, to :meth:`latency`.  Errors as :meth:`latency`.
        """
        many = self.estimate_many(op, configs)
        return many.single_core_s, many.all_cores_s

    def estimate_many(self, op: Operator, configs: CoreConfigArray) -> ManyEstimates:
        """Latencies, memory time, HBM bytes and energy of ``op`` on each design of ``configs``.

        Equal, design by design, to :meth:`estimate`.  Cached by (operator, configs
        fingerprint).  Errors as :meth:`latency`.
        """
        key = (op_key(op), configs.fingerprint)
        cached = self._many.get(key)
        if cached is not None:
            self._hits += 1
            return cached
        self._misses += 1
        declared = configs.efficiencies
        if op.kind is OpKind.MATMUL:
            result = _matmul_many(op, configs)
        elif op.kind is OpKind.COLLECTIVE:
            one = self._collective(op)
            full = np.full(len(configs), 1.0)
            result = ManyEstimates(full * one.single_core_s, full * one.all_cores_s, full * 0.0,
                                   full * 0.0, full * one.energy_j)
        elif op.kind is OpKind.ATTENTION:
            arrays = attention.attention_many(op, configs)
            result = ManyEstimates(arrays["single_s"], arrays["all_s"], arrays["memory_s"],
                                   arrays["hbm_bytes"], arrays["energy_j"])
        else:
            result = _vector_many(op, configs)
        if declared and op.kind is not OpKind.COLLECTIVE:
            result = _with_declared(op, configs, result)
        if op.kind is OpKind.ATTENTION:
            result = attention.with_ring_many(op, result, self.cluster)
        if self._cache_size:
            if len(self._many) >= max(1, self._cache_size // 256):
                self._many.clear()
            self._many[key] = result
        return result

    def cache_info(self) -> dict[str, int]:
        """``{"hits", "misses", "size"}`` of the caches (scalar and vectorised together)."""
        return {"hits": self._hits, "misses": self._misses, "size": len(self._cache) + len(self._many)}

    def cache_clear(self) -> None:
        """Empty the caches and reset their statistics."""
        self._cache.clear()
        self._many.clear()
        self._hits = self._misses = 0


def _with_declared(op: Operator, configs: CoreConfigArray, cycle: ManyEstimates) -> ManyEstimates:
    """``cycle`` with the designs that declare an efficiency re-costed by
    :func:`archplace.cost.efficiency.estimate_many` (the cycle model's bytes and energy kept)."""
    names = [f.name for f in dataclasses.fields(ManyEstimates)]
    out = {name: np.array(getattr(cycle, name), dtype=np.float64) for name in names}
    for declared in dict.fromkeys(e for e in configs.efficiencies if e is not None):
        index = np.array([i for i, e in enumerate(configs.efficiencies) if e == declared], dtype=np.int64)
        chip = efficiency.ChipColumns.from_configs(configs, index)
        times = efficiency.estimate_many(op, declared, chip, out["hbm_bytes"][index],
                                         out["energy_j"][index])
        for name in names:
            out[name][index] = getattr(times, name)
    return ManyEstimates(**out)


def _attention_estimate(a: dict[str, float]) -> OpEstimate:
    """An :class:`OpEstimate` from :func:`archplace.cost.attention.attention_arrays`."""
    return OpEstimate(a["single_s"], a["all_s"], a["compute_single_s"], a["compute_all_s"],
                      a["memory_s"], 0.0, a["hbm_bytes"], a["energy_j"],
                      compute_or_memory(a["compute_single_s"], a["memory_s"]),
                      compute_or_memory(a["compute_all_s"], a["memory_s"]))


def _matmul_many(op: Operator, configs: CoreConfigArray) -> ManyEstimates:
    b, m, k, n = op.batch, op.m, op.k, op.n
    count = len(configs)
    if b <= 0 or m <= 0 or k <= 0 or n <= 0:
        zeros = np.zeros(count)
        return ManyEstimates(zeros, zeros, zeros, zeros, zeros)
    side = configs.tensor_side
    rows, cols, cores, os_ = side.array_rows, side.array_cols, side.tensor_cores, side.output_stationary
    e, clock, bw = side.bytes_per_element, side.clock_hz, side.hbm_bandwidth_bytes_per_s
    cap = batched.buffer_elements(side.buffer_bytes, e)
    traffic = batched.matmul_hbm_elements(b, m, k, n, rows, cols, cap)
    extra = np.maximum(0.0, op.bytes_read + op.bytes_written - e * (b * (m * k + k * n + m * n)))
    hbm_bytes = e * traffic + extra
    memory_s = hbm_bytes / bw
    exposed_s = e * batched.exposed_elements(m, k, n, rows, cols, os_) / bw
    single_cyc, all_cyc = batched.matmul_cycles(b, m, k, n, rows, cols, cores, os_, side.scalesim_timing)
    tasks = batched.task_count(b, m, k, n, rows, cols, os_)
    compute_single = single_cyc / clock + exposed_s
    compute_all = all_cyc / clock + exposed_s * np.minimum(cores, tasks)
    feed = batched.matmul_feed_elements(b, m, k, n, rows, cols, os_)
    energy = (b * m * k * n * MAC_ENERGY_J + e * feed * LOCAL_SRAM_ENERGY_J_PER_BYTE
              + hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE)
    inv = side.inverse
    compute_single_n, compute_all_n, memory_n = compute_single[inv], compute_all[inv], memory_s[inv]
    hbm_n, energy_n = hbm_bytes[inv], energy[inv]
    fused = int(getattr(op, "fused_elements", 0) or 0)
    if fused > 0:
        vside = configs.vector_side
        lanes, vclock = vside.vector_lanes, vside.clock_hz
        epi_single = batched.vector_cycles(fused, lanes, 1, SIMPLE_CYCLES_PER_ELEMENT) / vclock
        epi_all = batched.vector_cycles(fused, lanes, vside.vector_cores,
                                        SIMPLE_CYCLES_PER_ELEMENT) / vclock
        compute_single_n = np.maximum(compute_single_n, epi_single[vside.inverse])
        compute_all_n = np.maximum(compute_all_n, epi_all[vside.inverse])
        energy_n = energy_n + fused * SIMPLE_CYCLES_PER_ELEMENT * VECTOR_OP_ENERGY_J
    return ManyEstimates(np.maximum(compute_single_n, memory_n), np.maximum(compute_all_n, memory_n),
                         memory_n, hbm_n, energy_n)


def _vector_many(op: Operator, configs: CoreConfigArray) -> ManyEstimates:
    cpe = cycles_per_element(op.kind, op.target)
    count = len(configs)
    if op.elements <= 0 or cpe <= 0:
        zeros = np.zeros(count)
        return ManyEstimates(zeros, zeros, zeros, zeros, zeros)
    side = configs.vector_side
    lanes, cores = side.vector_lanes, side.vector_cores
    clock, bw = side.clock_hz, side.hbm_bandwidth_bytes_per_s
    hbm_bytes = vector_hbm_bytes(op.target, op.bytes_read, op.bytes_written)
    memory_s = hbm_bytes / bw
    single = batched.vector_cycles(op.elements, lanes, 1, cpe) / clock
    every = batched.vector_cycles(op.elements, lanes, cores, cpe) / clock
    inv = side.inverse
    energy = op.elements * cpe * VECTOR_OP_ENERGY_J + hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE
    return ManyEstimates(np.maximum(single, memory_s)[inv], np.maximum(every, memory_s)[inv],
                         memory_s[inv], np.full(count, hbm_bytes), np.full(count, energy))
