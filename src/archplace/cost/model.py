"""Per-operator cost: the CostModel interface and its two implementations.

Every operator gets two latencies (docs/model.md, Per-operator cost and Layer
time): on ONE core of its type, and on ALL cores of its type at once.
Anything with ``latency(op, acc) -> OpLatency`` is a :class:`CostModel`; the
scheduler and the search take any of them:

* :class:`~archplace.cost.systolic.SystolicCostModel` -- cycle-exact systolic
  arrays, buffer-aware HBM traffic, vector cores, collectives, energy;
* :class:`RooflineCostModel` -- the roofline bound of each operator (Williams,
  Waterman and Patterson, CACM 2009): ``max(FLOP / peak, bytes / bandwidth)``,
  with no fill, drain, padding or re-reads.  A quick lower bound and a baseline
  to compare against.

Both also give :meth:`estimate` (:class:`OpEstimate`: latency, traffic, bound,
energy), which :mod:`archplace.cost.estimate` uses for per-layer reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from archplace.cost.attention import (
    BACKWARD_VECTOR_CYCLES,
    FORWARD_VECTOR_CYCLES,
    attention_flop,
    is_backward,
    with_ring,
)
from archplace.cost.systolic import ManyEstimates, SystolicCostModel, op_key
from archplace.cost.types import (
    ZERO_ESTIMATE,
    ZERO_LATENCY,
    Bound,
    OpEstimate,
    OpLatency,
    collective_estimate,
    compute_or_memory,
)
from archplace.cost.vector import cycles_per_element, vector_hbm_bytes
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.hw.power import HBM_PATH_ENERGY_J_PER_BYTE, MAC_ENERGY_J, VECTOR_OP_ENERGY_J
from archplace.workload.attention_blocks import op_area
from archplace.workload.graph import Operator, OpKind

__all__ = [
    "ZERO_ESTIMATE", "ZERO_LATENCY", "Bound", "CostModel", "EstimatingCostModel", "ManyEstimates",
    "OpEstimate", "OpLatency", "RooflineCostModel", "SystolicCostModel", "array_flop", "op_key",
]


def array_flop(ops: Iterable[Operator]) -> float:
    """FLOP the systolic arrays perform for ``ops``: 2 per multiply-accumulate of every matmul,
    ``2 * batch * m * k * n``; element-wise, reduction and fused epilogue work runs on the vector
    cores and is not counted.

    This is the numerator of MFU: the peak it is divided by,
    :attr:`~archplace.hw.accelerator.Accelerator.peak_flop_per_s`, counts the arrays' MACs
    only (2 FLOP per MAC per cycle), as in PaLM's definition of MFU (Chowdhery et al., 2022,
    appendix B: the matmul FLOP of the model). Counting the vector FLOP against it gave MFU above
    1 on chips whose vector cores outrun their arrays (a 1x1 array: 100.9 %, and an embedding
    layer with no matmul at all: 1401 %).
    """
    return float(sum(2 * op.batch * op.m * op.k * op.n if op.kind is OpKind.MATMUL else
                     attention_flop(op) if op.kind is OpKind.ATTENTION else 0.0 for op in ops))


@runtime_checkable
class CostModel(Protocol):
    """Anything that gives an operator's latency on an accelerator."""

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Latency of ``op`` on one core and on all cores of its type of ``acc``."""
        ...


@runtime_checkable
class EstimatingCostModel(CostModel, Protocol):
    """A :class:`CostModel` that also reports traffic, bound and energy."""

    def estimate(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """Latency, HBM bytes, bound and energy of ``op`` on ``acc``."""
        ...


class RooflineCostModel:
    """Roofline latency of every operator (module docstring); implements :class:`CostModel`.

    * matmul: ``2·batch·m·k·n`` FLOP at ``2·rows·cols·clock_hz`` per core (single) or the
      chip's peak (all), a fused epilogue at one element per lane per cycle;
    * vector op: ``elements · cycles_per_element`` lane operations at ``lanes·clock_hz``
      per core;
    * both bounded below by ``(bytes_read + bytes_written) / hbm_bandwidth``;
    * collective: as :class:`SystolicCostModel` (needs ``cluster`` for groups > 1);
    * fused attention under context parallelism: plus its exposed ring communication
      (:func:`archplace.cost.attention.with_ring`, needs ``cluster``).

    Energy counts the same MAC, lane and HBM-path energies as the systolic model
    (no operand-feed energy).
    """

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Roofline latency of ``op`` on one core and on all cores of ``acc``.

        Raises:
            ConfigError: a collective over several devices without a cluster.
            ValueError: an operator kind the model does not know.
        """
        return self.estimate(op, acc).latency

    def estimate(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """Roofline :class:`OpEstimate` of ``op`` on ``acc`` (errors as :meth:`latency`)."""
        hbm_bytes = float(op.bytes_read + op.bytes_written)
        if op.kind not in (OpKind.MATMUL, OpKind.COLLECTIVE):
            hbm_bytes = vector_hbm_bytes(op.target, op.bytes_read, op.bytes_written)
        memory_s = hbm_bytes / acc.hbm_bandwidth_bytes_per_s
        if op.kind is OpKind.COLLECTIVE:
            return self._collective(op, hbm_bytes)
        if op.kind is OpKind.ATTENTION:  # its GEMMs at the arrays' peak, its softmax on the lanes
            area, _ = op_area(op)
            macs = attention_flop(op) / 2.0
            fused = float(op.batch * area * (BACKWARD_VECTOR_CYCLES if is_backward(op)
                                             else FORWARD_VECTOR_CYCLES))
            per_core = acc.array_rows * acc.array_cols * acc.clock_hz
            lane_rate = acc.vector_lanes * acc.clock_hz
            single = macs / per_core + fused / lane_rate
            every = macs / (per_core * acc.tensor_cores) + fused / (lane_rate * acc.vector_cores)
            energy = macs * MAC_ENERGY_J + fused * VECTOR_OP_ENERGY_J
        elif op.kind is OpKind.MATMUL:
            macs = float(max(op.batch, 0) * max(op.m, 0) * max(op.k, 0) * max(op.n, 0))
            if macs == 0:
                return ZERO_ESTIMATE
            fused = float(getattr(op, "fused_elements", 0) or 0)
            per_core = acc.array_rows * acc.array_cols * acc.clock_hz
            lane_rate = acc.vector_lanes * acc.clock_hz
            single = max(macs / per_core, fused / lane_rate)
            every = max(macs / (per_core * acc.tensor_cores), fused / (lane_rate * acc.vector_cores))
            energy = macs * MAC_ENERGY_J + fused * VECTOR_OP_ENERGY_J
        else:
            ops = float(max(op.elements, 0) * cycles_per_element(op.kind, op.target))
            if ops == 0:
                return ZERO_ESTIMATE
            single = ops / (acc.vector_lanes * acc.clock_hz)
            every = single / acc.vector_cores
            energy = ops * VECTOR_OP_ENERGY_J
        energy += hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE
        result = OpEstimate(max(single, memory_s), max(every, memory_s), single, every, memory_s, 0.0,
                            hbm_bytes, energy, compute_or_memory(single, memory_s),
                            compute_or_memory(every, memory_s))
        return with_ring(op, result, self.cluster) if op.kind is OpKind.ATTENTION else result

    def _collective(self, op: Operator, hbm_bytes: float) -> OpEstimate:
        return collective_estimate(op, self.cluster, hbm_bytes * HBM_PATH_ENERGY_J_PER_BYTE,
                                   "RooflineCostModel")
