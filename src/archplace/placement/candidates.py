"""The candidates of the exact plan search (:mod:`archplace.placement.search`): families of
layer costs, schedule variants, found optima, the per-family state and blocks of candidates,
and the in-flight counts and interleaved splits a candidate is scored with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from archplace.placement.memory import interleaved_in_flight_chunks
from archplace.placement.plan import CostKey, GradSync, LayerCost, PipelineSchedule, Recompute
from archplace.placement.tables import FloatArray, SegmentTables
from archplace.placement.zero import reduces_every_micro_batch
from archplace.workload.key import Keyed

SLACK = 1e-9
"""Relative slack of every prune: bounds and objectives are floating-point sums."""

IntOrArray = TypeVar("IntOrArray", int, npt.NDArray[np.int64])

TIE_RTOL = 1e-12
"""Front points of one candidate within this relative distance are ties (split by stages)."""


@dataclass(frozen=True, slots=True)
class CostFamily(Keyed):
    """One table of layer costs: the layers of a cost key (tp, micro_batch, sp, cp, ep, etp)
    under a recompute policy. The key is held as given (its degrees are read through it), so
    the micro-batch and the degrees travel from the plan grid to the DP in one shape.

    Attributes:
        key: the cost key of the layers (:class:`~archplace.placement.plan.CostKey`).
        recompute: the recompute policy.
        layers: the layer costs at that key, in chain order.
    """

    key: CostKey
    recompute: Recompute
    layers: Sequence[LayerCost]

    def expert_group(self, d: IntOrArray) -> IntOrArray:
        """Ranks of the expert-data-parallel group with d replicas: tp * cp * d / (etp * ep)
        (:mod:`archplace.placement.layout`; d an int or an array of them)."""
        return self.tp * self.cp * d // (self.etp * self.ep)

    def expert_degree_fits(self, d: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether etp * ep divides tp * cp * d, for every d of an array."""
        return (self.tp * self.cp * d) % (self.etp * self.ep) == 0


@dataclass(frozen=True, slots=True)
class Variant:
    """Schedule, chunks and the objective options of a block of candidates (``grad_sync``: the
    search's ``TrainingSetup.grad_sync``, which all its variants share)."""

    schedule: PipelineSchedule
    chunks: int
    zero_stage: int
    overlap: bool
    grad_sync: GradSync = GradSync.AUTO

    @property
    def reduces_every_micro_batch(self) -> bool:
        """Whether every micro-batch reduces the gradients (:mod:`archplace.placement.zero`)."""
        return reduces_every_micro_batch(self.zero_stage, self.grad_sync)

    @property
    def per_candidate(self) -> bool:
        """Whether the front must be enumerated per (p, d): with overlap, ZeRO-2/3, or stages 0
        and 1 reducing every micro-batch (then the segment times depend on d)."""
        return self.overlap or self.zero_stage >= 2 or self.reduces_every_micro_batch


class Candidate(NamedTuple):
    """One candidate of the search: everything but the stage split.

    Attributes:
        family: index of its :class:`CostFamily` in the search's families.
        variant: its schedule, chunks, ZeRO stage and DP overlap.
        p: pipeline depth.
        d: data-parallel degree.
        m: micro-batches per pipeline per iteration.
    """

    family: int
    variant: Variant
    p: int
    d: int
    m: int


@dataclass(slots=True)
class Found:
    """A candidate's exact optimum: its objective, its rank among equal objectives and the
    front points attaining it."""

    value: float
    rank: tuple[object, ...]
    candidate: Candidate
    points: list[tuple[float, float]]


def per_candidate(state: FamilyState, variant: Variant) -> bool:
    """Whether the front of (max T, max Y) must be enumerated per (p, d): the variant's rule,
    and always for chains with routed experts, whose tail is a function of two parameter counts
    (dense and expert), not of their sum."""
    return variant.per_candidate or state.experts


@dataclass(slots=True)
class FamilyState:
    family: CostFamily
    tables: SegmentTables | None = None
    fronts: dict[tuple[object, ...], list[tuple[float, float]]] = field(default_factory=dict)
    infeasible_at: dict[tuple[object, ...], int] = field(default_factory=dict)
    canonical: dict[tuple[int, int], int] = field(default_factory=dict)
    interleaved: dict[tuple[int, int, int, int, int], list[tuple[tuple[int, int], ...]]] = field(
        default_factory=dict)
    layer_base_max: float = 0.0
    layer_base_sum: float = 0.0
    layer_params_max: float = 0.0
    params_sum: float = 0.0
    table_bytes: int = 0
    experts: bool = False
    dense_max: float = 0.0
    dense_sum: float = 0.0
    expert_max: float = 0.0
    expert_sum: float = 0.0
    boundary_min: float = 0.0


@dataclass(slots=True)
class CandidateBlock:
    """The candidates of one family and variant, sorted by their current bounds (None until
    the level-0 bounds are computed); ``grid`` numbers the distinct (p, d, m) arrays."""

    family: int
    variant: Variant
    p: npt.NDArray[np.int64]
    d: npt.NDArray[np.int64]
    m: npt.NDArray[np.int64]
    bound: FloatArray | None
    refined: bool = False
    next: int = 0
    grid: int = -1


def in_flight_per_position(schedule: PipelineSchedule, p: int, m: int, chunks: int) -> list[int]:
    """In-flight count of every segment position: 1F1B min(p - j, m), GPipe m, interleaved the
    chunk-micro-batches of the segment's device."""
    if schedule is PipelineSchedule.INTERLEAVED:
        per_device = [interleaved_in_flight_chunks(j, p, m, chunks) for j in range(p)]
        return [per_device[c % p] for c in range(p * chunks)]
    if schedule is PipelineSchedule.GPIPE:
        return [m] * p
    return [min(p - j, m) for j in range(p)]


def interleaved_splits(n: int, segments: int) -> list[tuple[tuple[int, int], ...]]:
    """The splits of a chain of ``n`` layers into ``segments`` = p v chunks that the interleaved
    schedule is planned with: Megatron-LM's (the blocks divided evenly over the chunks,
    ``--num-layers-per-virtual-pipeline-stage``, which must divide the layers per stage; the
    embedding with the first chunk and the head with the last), i.e. n - 2 divisible by the
    chunks, or, for chains without an embedding and a head, n divisible by the chunks and every
    chunk equal. Ascending; empty when neither divides.

    Restricting interleaving to these keeps the search exact with the exact per-device memory
    (:func:`archplace.placement.memory.interleaved_device_memory`), which couples a device's
    non-adjacent chunks and so does not decompose over a split as the DP needs.
    """
    out = set()
    if n % segments == 0:
        q = n // segments
        out.add(tuple((c * q, c * q + q - 1) for c in range(segments)))
    if n - 2 >= segments and (n - 2) % segments == 0:
        q = (n - 2) // segments
        out.add(tuple((0 if c == 0 else 1 + c * q, n - 1 if c == segments - 1 else c * q + q)
                      for c in range(segments)))
    return sorted(out)
