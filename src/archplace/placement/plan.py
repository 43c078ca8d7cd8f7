"""Value objects of the placement stage: layer costs in, plans and their scores out."""

from __future__ import annotations

import enum
import math
import numbers
import operator
from dataclasses import dataclass, field
from typing import Any

from archplace.errors import ConfigError
from archplace.hardware.cluster import Cluster


class Recompute(enum.StrEnum):
    """Activation recomputation policy (Korthikanti et al. 2022)."""

    NONE = "none"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Everything placement needs of one layer, for one design, micro-batch size and TP width.

    Times are per micro-batch, in seconds; bytes per micro-batch.

    Attributes:
        name: layer name (``embedding``, ``block.3``, ``head``).
        fwd_s, bwd_s: makespan of the layer's forward / backward graph on one device.
        params: parameters held by the layer (per TP rank).
        activation_bytes: bytes saved for backward without recomputation.
        input_bytes: bytes of the layer input (all that full recompute keeps).
        boundary_bytes: bytes of the output tensor sent to the next layer.
        working_bytes: transient working set of running the layer.
        fwd_flop, bwd_flop: model FLOP of the layer (for MFU; recompute not counted).

    Raises:
        ConfigError: a negative or non-finite figure, or non-integer ``params``.
    """

    name: str
    fwd_s: float
    bwd_s: float
    params: int
    activation_bytes: float
    input_bytes: float
    boundary_bytes: float
    working_bytes: float
    fwd_flop: float
    bwd_flop: float

    def __post_init__(self) -> None:
        # NumPy scalars are accepted and stored as Python int / float.
        try:
            if isinstance(self.params, bool):
                raise TypeError
            params = operator.index(self.params)
        except TypeError:
            params = -1
        if params < 0:
            raise ConfigError(f"layer {self.name!r}: params must be an integer >= 0, "
                              f"got {self.params!r}")
        object.__setattr__(self, "params", params)
        for name in ("fwd_s", "bwd_s", "activation_bytes", "input_bytes", "boundary_bytes",
                     "working_bytes", "fwd_flop", "bwd_flop"):
            value = getattr(self, name)
            number = (float(value) if isinstance(value, numbers.Real)
                      and not isinstance(value, bool) else math.nan)
            if not (math.isfinite(number) and number >= 0):
                raise ConfigError(f"layer {self.name!r}: {name} must be a finite number >= 0, "
                                  f"got {value!r}")
            object.__setattr__(self, name, number)


@dataclass(frozen=True, slots=True)
class TrainingSetup:
    """The fixed side of a placement problem.

    Attributes:
        cluster: devices and links.
        global_batch: samples per iteration.
        seq_len: tokens per sample (for tokens/s).
        hbm_bytes: memory capacity of one device.
        hbm_bandwidth_bytes_per_s: device memory bandwidth (bounds the optimizer step).
        peak_flop_per_s: device peak (for MFU).

    Raises:
        ConfigError: a non-positive field.
    """

    cluster: Cluster
    global_batch: int
    seq_len: int
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    peak_flop_per_s: float

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
                     "peak_flop_per_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Plan:
    """A parallel plan.

    Attributes:
        tp, pp, dp: tensor-, pipeline- and data-parallel degrees.
        micro_batch: samples per micro-batch.
        recompute: activation recomputation policy.
        stages: ``(first_layer, last_layer)`` index pairs, inclusive, contiguous, covering the chain.

    Raises:
        ConfigError: a degree or micro-batch that is not a positive integer, an unknown
            recompute policy, ``pp != len(stages)``, or stages that do not start at layer 0,
            are empty or are not contiguous. (Whether the stages cover a given chain and
            the plan fits a given cluster and batch is checked by ``evaluate_plan``.)
    """

    tp: int
    pp: int
    dp: int
    micro_batch: int
    recompute: Recompute
    stages: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"plan: {name} must be a positive integer, got {value!r}")
        try:
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        except ValueError:
            raise ConfigError(f"plan: unknown recompute policy {self.recompute!r}") from None
        try:
            stages = tuple((int(first), int(last)) for first, last in self.stages)
        except (TypeError, ValueError):
            raise ConfigError(f"plan: stages must be (first_layer, last_layer) pairs, "
                              f"got {self.stages!r}") from None
        object.__setattr__(self, "stages", stages)
        if len(stages) != self.pp:
            raise ConfigError(f"plan: pp={self.pp} but {len(stages)} stages are given")
        expected = 0
        for j, (first, last) in enumerate(stages):
            if first != expected:
                raise ConfigError(f"plan: stage {j} starts at layer {first}, expected {expected} "
                                  f"(stages must be contiguous from layer 0)")
            if last < first:
                raise ConfigError(f"plan: stage {j} is empty (layers {first}..{last})")
            expected = last + 1

    @property
    def devices(self) -> int:
        """Devices the plan occupies: tp * pp * dp."""
        return self.tp * self.pp * self.dp

    def to_dict(self) -> dict[str, Any]:
        """JSON form (issue #2 schema)."""
        return {
            "tp": self.tp, "pp": self.pp, "dp": self.dp, "micro_batch": self.micro_batch,
            "recompute": self.recompute.value, "stages": [list(s) for s in self.stages],
        }


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Memory of one device of a pipeline stage, in bytes."""

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    working: float

    @property
    def total(self) -> float:
        """Sum of all parts."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.working

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"stage": self.stage, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "working": self.working, "total": self.total}


@dataclass(frozen=True, slots=True)
class PlanResult:
    """A plan with its score.

    Attributes:
        plan: the plan.
        iteration_time_s: time of one training iteration (global batch).
        throughput_samples_per_s: global batch / iteration time.
        tokens_per_s: throughput * seq_len.
        mfu: model FLOP per iteration / (iteration time * plan devices * peak FLOP/s).
        breakdown_s: parts of the iteration time (compute, bubble, recompute, pp_comm, dp_comm, optimizer).
        memory: per-stage memory of one device.
    """

    plan: Plan
    iteration_time_s: float
    throughput_samples_per_s: float
    tokens_per_s: float
    mfu: float
    breakdown_s: dict[str, float] = field(default_factory=dict)
    memory: tuple[StageMemory, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "plan": self.plan.to_dict(),
            "iteration_time_s": self.iteration_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "breakdown_s": dict(self.breakdown_s),
            "memory_per_device_bytes": [m.to_dict() for m in self.memory],
        }
