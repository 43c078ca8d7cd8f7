"""The answer of a plan search: its plans, best first (:func:`archplace.plan`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import ConfigError
from archplace.placement.plan import Plan
from archplace.placement.result import PlanResult, StageMemory


@dataclass(frozen=True)
class PlanReport:
    """The best plans of a model on a cluster, best first (fastest; ties as
    :func:`archplace.placement.solver.plan_search` breaks them).

    The figures of the best plan are read directly: ``report.plan``, ``report.mfu``,
    ``report.iteration_time_s``, ...; ``report.ranked`` holds every plan asked for, and
    iterating a report (or ``len``) goes over them.

    Attributes:
        ranked: one or more plan results, best first.

    Raises:
        ConfigError: no plan, or a member that is not a :class:`PlanResult`.
    """

    ranked: tuple[PlanResult, ...]

    def __post_init__(self) -> None:
        ranked = tuple(self.ranked)
        if not ranked:
            raise ConfigError("ranked: a plan report needs at least one plan")
        for i, result in enumerate(ranked):
            if not isinstance(result, PlanResult):
                raise ConfigError(f"ranked[{i}]: expected a PlanResult, got {type(result).__name__}")
        object.__setattr__(self, "ranked", ranked)

    @classmethod
    def of(cls, results: Sequence[PlanResult]) -> PlanReport:
        """The report of plan results already ranked best first."""
        return cls(tuple(results))

    @property
    def best(self) -> PlanResult:
        """The best plan's result."""
        return self.ranked[0]

    @property
    def plan(self) -> Plan:
        """The best plan."""
        return self.best.plan

    @property
    def iteration_time_s(self) -> float:
        """The best plan's iteration time, seconds."""
        return self.best.iteration_time_s

    @property
    def throughput_samples_per_s(self) -> float:
        """The best plan's samples/s."""
        return self.best.throughput_samples_per_s

    @property
    def tokens_per_s(self) -> float:
        """The best plan's tokens/s."""
        return self.best.tokens_per_s

    @property
    def mfu(self) -> float:
        """The best plan's model FLOP utilisation, a fraction in [0, 1]."""
        return self.best.mfu

    @property
    def hfu(self) -> float:
        """The best plan's hardware FLOP utilisation, a fraction in [0, 1]."""
        return self.best.hfu

    @property
    def memory(self) -> tuple[StageMemory, ...]:
        """The best plan's memory per pipeline device, bytes."""
        return self.best.memory

    def __iter__(self) -> Iterator[PlanResult]:
        return iter(self.ranked)

    def __len__(self) -> int:
        return len(self.ranked)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"plans": [PlanResult.to_dict(), ...]}``, best first."""
        return {"plans": [result.to_dict() for result in self.ranked]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanReport:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or invalid field.
        """
        plans = data.get("plans") if isinstance(data, dict) else None
        if not isinstance(plans, list):
            raise ConfigError("invalid plan report: plans must be a list of plan results")
        return cls(tuple(PlanResult.from_dict(item) for item in plans))
