"""Value objects of the cost model: latencies, bounds and per-operator estimates."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError

FloatArray = NDArray[np.float64]


class Bound(enum.StrEnum):
    """What limits an operator's latency."""

    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"


def _check_times(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{owner}: {name} must be finite and >= 0, got {value}")


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
        _check_times("OpLatency", single_core_s=self.single_core_s, all_cores_s=self.all_cores_s)


ZERO_LATENCY = OpLatency(0.0, 0.0)


@dataclass(frozen=True, slots=True)
class OpEstimate:
    """Everything the cost model knows about one operator on one accelerator.

    Attributes:
        single_core_s, all_cores_s: latency on one core / all cores of its type, seconds.
        compute_single_s, compute_all_s: the compute part (cycles / clock plus the
            transfer compute cannot hide), seconds.
        memory_s: HBM bytes / HBM bandwidth, seconds (the same in both modes).
        communication_s: link time of a collective, seconds (0 for other operators).
        hbm_bytes: bytes moved between HBM and the chip.
        energy_j: dynamic energy of the operator, joules (static power is charged per
            second of layer time by the caller).
        bound_single, bound_all: what limits each latency.

    Raises:
        ConfigError: a negative or non-finite time, bytes or energy.
    """

    single_core_s: float
    all_cores_s: float
    compute_single_s: float
    compute_all_s: float
    memory_s: float
    communication_s: float
    hbm_bytes: float
    energy_j: float
    bound_single: Bound
    bound_all: Bound

    def __post_init__(self) -> None:
        _check_times("OpEstimate", single_core_s=self.single_core_s, all_cores_s=self.all_cores_s,
                     compute_single_s=self.compute_single_s, compute_all_s=self.compute_all_s,
                     memory_s=self.memory_s, communication_s=self.communication_s,
                     hbm_bytes=self.hbm_bytes, energy_j=self.energy_j)

    @property
    def latency(self) -> OpLatency:
        """The two latencies as an :class:`OpLatency`."""
        return OpLatency(self.single_core_s, self.all_cores_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (SI units; bounds as text)."""
        return {
            "single_core_s": self.single_core_s, "all_cores_s": self.all_cores_s,
            "compute_single_s": self.compute_single_s, "compute_all_s": self.compute_all_s,
            "memory_s": self.memory_s, "communication_s": self.communication_s,
            "hbm_bytes": self.hbm_bytes, "energy_j": self.energy_j,
            "bound_single": self.bound_single.value, "bound_all": self.bound_all.value,
        }


ZERO_ESTIMATE = OpEstimate(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, Bound.COMPUTE, Bound.COMPUTE)


def compute_or_memory(compute_s: float, memory_s: float) -> Bound:
    """``COMPUTE`` when compute takes at least as long as memory, else ``MEMORY``."""
    return Bound.COMPUTE if compute_s >= memory_s else Bound.MEMORY


def collective_estimate(op: Any, cluster: Any, energy_j: float, model: str) -> OpEstimate:
    """Estimate of a ``COLLECTIVE`` operator: α–β time on the link its group spans
    (:func:`archplace.cost.collective.cluster_collective_time_s`), communication-bound.

    Args:
        op: the operator (``op.target`` names the collective, ``op.group`` its devices, the
            larger of its read/written bytes the buffer).
        cluster: the links, or None (then only single-device groups are allowed).
        energy_j: the operator's energy, as the calling cost model counts it.
        model: name of the calling cost model, for the error message.

    Raises:
        ConfigError: a group of more than one device and no cluster.
    """
    from archplace.base.errors import ConfigError
    from archplace.cost.collective import cluster_collective_time_s, collective_kind

    group = int(op.group or 1)
    buffer = float(max(op.bytes_read, op.bytes_written))
    if group <= 1 or buffer <= 0:
        return OpEstimate(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, Bound.COMMUNICATION, Bound.COMMUNICATION)
    if cluster is None:
        raise ConfigError(f"operator {op.name}: a collective over {group} devices needs the "
                          f"cluster's links ({model}(cluster=...))")
    seconds = cluster_collective_time_s(cluster, collective_kind(op.target), buffer, group)
    return OpEstimate(seconds, seconds, 0.0, 0.0, 0.0, seconds, 0.0, energy_j,
                      Bound.COMMUNICATION, Bound.COMMUNICATION)


@dataclass(frozen=True, slots=True)
class ManyEstimates:
    """Estimates of one operator on N accelerators (arrays of length N, units of :class:`OpEstimate`)."""

    single_core_s: FloatArray
    all_cores_s: FloatArray
    memory_s: FloatArray
    hbm_bytes: FloatArray
    energy_j: FloatArray
