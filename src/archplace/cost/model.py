"""Per-operator latency: the CostModel interface and the first-fidelity systolic model.

Every operator gets two latencies (DESIGN.md, Per-operator cost and Per-layer
scheduling): on ONE core of its type, and on ALL cores of its type at once.

:class:`SystolicCostModel` (first fidelity):

* matmul: weight-stationary cycle counts of :mod:`archplace.cost.gemm` on the
  ``tensor_cores`` arrays of ``array_rows x array_cols``;
* other compute ops: :mod:`archplace.cost.vector` on the ``vector_cores`` cores of
  ``vector_lanes`` lanes;
* both bounded below by the time to move the op's bytes over HBM:
  ``latency_s = max(cycles / clock_hz, (bytes_read + bytes_written) / hbm_bandwidth)``.
  Every byte is assumed to come from (and go to) HBM once; the global buffer's
  reuse is not modelled yet (a later fidelity tiles the matmul for the buffer);
* an op with no work (a zero dimension, no elements, or a collective, whose time
  comes from the link model) costs 0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from archplace.cost.gemm import matmul_cycles_all_cores, matmul_cycles_single_core
from archplace.cost.vector import cycles_per_element, vector_cycles
from archplace.errors import ConfigError
from archplace.hardware.accelerator import Accelerator
from archplace.workload.graph import Operator, OpKind


@dataclass(frozen=True, slots=True)
class OpLatency:
    """Latency of one operator, in seconds.

    Attributes:
        single_core_s: on one core of its type.
        all_cores_s: on all cores of its type at once (nothing else runs meanwhile).

    Raises:
        ConfigError: a negative or non-finite latency.
    """

    single_core_s: float
    all_cores_s: float

    def __post_init__(self) -> None:
        for name in ("single_core_s", "all_cores_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"OpLatency: {name} must be finite and >= 0, got {value}")


ZERO_LATENCY = OpLatency(0.0, 0.0)


@runtime_checkable
class CostModel(Protocol):
    """Anything that gives an operator's latency on an accelerator."""

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Latency of ``op`` on one core and on all cores of its type of ``acc``."""
        ...


def memory_time_s(bytes_moved: float, hbm_bandwidth_bytes_per_s: float) -> float:
    """Seconds to move ``bytes_moved`` bytes over HBM."""
    return bytes_moved / hbm_bandwidth_bytes_per_s


def matmul_latency(
    batch: int, m: int, k: int, n: int, bytes_moved: float,
    tensor_cores: int, rows: int, cols: int, clock_hz: float, hbm_bandwidth_bytes_per_s: float,
) -> OpLatency:
    """Latency of the GEMM ``[batch, m, k] x [batch, k, n]`` moving ``bytes_moved`` HBM bytes.

    Single core: :func:`~archplace.cost.gemm.matmul_cycles_single_core`; all cores:
    :func:`~archplace.cost.gemm.matmul_cycles_all_cores`; each is
    ``max(cycles / clock_hz, bytes_moved / hbm_bandwidth)``.  0 when a dimension is 0.
    """
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return ZERO_LATENCY
    memory_s = memory_time_s(bytes_moved, hbm_bandwidth_bytes_per_s)
    single = matmul_cycles_single_core(batch, m, k, n, rows, cols)
    parallel = matmul_cycles_all_cores(batch, m, k, n, rows, cols, tensor_cores)
    return OpLatency(max(single / clock_hz, memory_s), max(parallel / clock_hz, memory_s))


def vector_latency(
    elements: int, cycles_per_elem: int, bytes_moved: float,
    vector_cores: int, lanes: int, clock_hz: float, hbm_bandwidth_bytes_per_s: float,
) -> OpLatency:
    """Latency of a vector op of ``elements`` output elements moving ``bytes_moved`` HBM bytes.

    ``max(⌈elements / (lanes · cores)⌉ · cycles_per_elem / clock_hz, bytes / bandwidth)`` with
    cores = 1 and cores = ``vector_cores``.  0 when there are no elements or no cycles per
    element (collectives).
    """
    if elements <= 0 or cycles_per_elem <= 0:
        return ZERO_LATENCY
    memory_s = memory_time_s(bytes_moved, hbm_bandwidth_bytes_per_s)
    single = vector_cycles(elements, lanes, 1, cycles_per_elem)
    parallel = vector_cycles(elements, lanes, vector_cores, cycles_per_elem)
    return OpLatency(max(single / clock_hz, memory_s), max(parallel / clock_hz, memory_s))


class SystolicCostModel:
    """First-fidelity :class:`CostModel` (formulas in the module docstring).

    Results are cached on the instance, keyed by the operator's dimensions, its
    cycles per element and bytes, and the accelerator fields that matter (core
    counts and sizes, clock, HBM bandwidth) -- so designs that differ only in
    buffer or HBM capacity share entries.

    Args:
        cache_size: entries per cache (matmul and vector); ``None`` = unbounded, 0 = off.
    """

    def __init__(self, cache_size: int | None = 1 << 16) -> None:
        self._matmul = functools.lru_cache(maxsize=cache_size)(matmul_latency)
        self._vector = functools.lru_cache(maxsize=cache_size)(vector_latency)

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Latency of ``op`` on ``acc``: one core of its type, and all of them.

        Raises:
            ValueError: an operator kind the model does not know (a bug upstream).
        """
        bytes_moved = float(op.bytes_read + op.bytes_written)
        if op.kind is OpKind.MATMUL:
            return self._matmul(
                op.batch, op.m, op.k, op.n, bytes_moved, acc.tensor_cores,
                acc.array_rows, acc.array_cols, acc.clock_hz, acc.hbm_bandwidth_bytes_per_s,
            )
        return self._vector(
            op.elements, cycles_per_element(op.kind, op.target), bytes_moved,
            acc.vector_cores, acc.vector_lanes, acc.clock_hz, acc.hbm_bandwidth_bytes_per_s,
        )

    def cache_info(self) -> dict[str, Any]:
        """Hit/miss statistics of the matmul and vector caches."""
        return {"matmul": self._matmul.cache_info(), "vector": self._vector.cache_info()}

    def cache_clear(self) -> None:
        """Empty both caches."""
        self._matmul.cache_clear()
        self._vector.cache_clear()
