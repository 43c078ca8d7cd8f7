"""The plan grid the placement engine searches (:class:`PlanGrid`) and its JSON identity.

Every option of the grid is one typed field of :class:`PlanGrid`; its JSON form (what a result
store keeps of a search's plan space, :func:`grid_identity`) and the inverse
(:func:`grid_from_identity`) are derived from those fields, so that a new field is stored and
read back without anyone writing it twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import Enum
from functools import cache
from typing import Any, get_type_hints

from archplace.cost.precision import PRECISIONS, Precision
from archplace.placement.plan import (
    MICRO_BATCHES,
    ZERO_STAGES,
    CostKey,
    GradReduceDtype,
    PipelineSchedule,
    Recompute,
)
from archplace.workload.options import Attention, Kernels


@dataclass(frozen=True)
class PlanGrid:
    """The resolved options the placement engine searches (each a tuple of the values to try),
    built by :mod:`archplace.front.app` from a :class:`archplace.front.specs.PlanSpace` and the model's
    tracing options (and by the search from its request).

    ``tps`` None means every valid power-of-two width up to the cluster size (at most 64).
    ``zero_stages``: ZeRO stages 0..3 to try (:mod:`archplace.placement.zero`). ``dp_overlap``:
    False exposes the whole DP gradient reduction, True runs it bucket by bucket during the last
    micro-batch's backward pass. ``grad_reduce_dtype`` is not searched: the gradient buffer
    and reduction dtype (fp32 as Megatron-LM's bf16 recipe, or bf16); :func:`plan` scores
    with it.
    ``fuse`` is not searched: True also folds every layer's element-wise operators into the
    matmul producing their input (a matmul epilogue, as a compiler would), False does not.
    ``attention`` and ``kernels`` (not searched either):
    how attention and the element-wise kernels run (:class:`~archplace.workload.options.Attention`,
    :class:`~archplace.workload.options.Kernels`).
    ``precisions``: bf16 and/or fp8 (:mod:`archplace.cost.precision`), each a separate set of
    layer costs; the plans of all of them are ranked together (ties: bf16 first).
    ``cps``: context-parallel degrees to try; None means :func:`valid_cp_degrees` (1 and the
    powers of two dividing the sequence into 2 cp chunks of at least
    :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank). ``eps``: expert-parallel degrees; None
    means :func:`valid_ep_degrees` (powers of two dividing the routed experts of an MoE model,
    1 for a dense one). ``etps``: expert-tensor-parallel widths; None means
    :func:`valid_etp_degrees` of every TP width (1 and tp for an MoE model whose experts' FFN
    width tp divides, 1 for a dense one).
    Each (tp, micro-batch, sp, cp, ep, etp) is a set of layer costs; the engine takes
    tp * cp * pp * dp devices with etp * ep dividing tp * cp * dp. A mixture-of-experts model at
    tp > 1 is costed with sequence parallelism only (:func:`check_moe_sp`).
    ``capacity_factor`` and ``expert_load_imbalance`` (not searched): how the MoE layers' routed
    tokens are padded or skewed (:class:`archplace.workload.extract.ExtractOptions`; 1.0 each:
    dropless and balanced).
    ``dp_replicates``: hybrid-sharding replica counts to try (:attr:`Plan.dp_replicate`; 1: ZeRO
    over the whole DP x CP group); each r > 1 with the ZeRO stages >= 1 and the DP degrees it
    divides (:func:`~archplace.placement.solver.plan_search`).
    """

    tps: tuple[int, ...] | None = None
    micro_batch_sizes: tuple[int, ...] = MICRO_BATCHES
    sps: tuple[bool, ...] = (False, True)
    recomputes: tuple[Recompute, ...] = tuple(Recompute)
    schedules: tuple[PipelineSchedule, ...] = tuple(PipelineSchedule)
    chunks: tuple[int, ...] = (2, 4)
    zero_stages: tuple[int, ...] = ZERO_STAGES
    dp_overlap: tuple[bool, ...] = (False, True)
    fuse: bool = False
    attention: Attention = Attention.FLASH
    kernels: Kernels = Kernels.FUSED
    grad_reduce_dtype: GradReduceDtype = GradReduceDtype.FP32
    precisions: tuple[Precision, ...] = PRECISIONS
    cps: tuple[int, ...] | None = None
    eps: tuple[int, ...] | None = None
    capacity_factor: float = 1.0
    expert_load_imbalance: float = 1.0
    etps: tuple[int, ...] | None = None
    dp_replicates: tuple[int, ...] = (1,)


DEFAULT_GRID = PlanGrid()
"""Every option at its default."""

KEYED = {"tps": "tp", "micro_batch_sizes": "micro_batch", "sps": "sp", "cps": "cp", "eps": "ep",
         "etps": "etp"}
"""Grid fields carried by the cost keys of a stored request (grid field -> :class:`CostKey`
field): they are read back from the keys, not stored twice."""

ALWAYS_STORED = ("recomputes", "schedules", "chunks", "zero_stages", "dp_overlap", "grad_reduce_dtype",
                 "fuse", "attention", "kernels")
"""Grid fields every stored request has held since the store's schema 2. Any other field is
stored only when it differs from its default, so that a request made before the field existed
keeps its key (:func:`archplace.dse.store.request_key`) and its search still resumes."""


def _as_json(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_as_json(item) for item in value]
    return value


def grid_identity(grid: PlanGrid) -> dict[str, Any]:
    """The fields of ``grid`` that a stored request keeps, as JSON values (enums as their
    values, tuples as lists): every field but those of :data:`KEYED`; the fields outside
    :data:`ALWAYS_STORED` only when they differ from their defaults."""
    out: dict[str, Any] = {}
    for field in fields(PlanGrid):
        value = getattr(grid, field.name)
        if field.name not in KEYED and (field.name in ALWAYS_STORED or value != field.default):
            out[field.name] = _as_json(value)
    return out


@cache
def _readers() -> dict[str, Any]:
    from pydantic import TypeAdapter  # imported only when a stored request is read back

    hints = get_type_hints(PlanGrid)
    return {field.name: TypeAdapter(hints[field.name]) for field in fields(PlanGrid)}


def grid_of(values: dict[str, Any]) -> PlanGrid:
    """The grid whose fields are the entries of ``values`` that name one (a field absent takes its
    default), each read by its type hint (pydantic, lax: an enum from its value, a tuple from a
    list), so that a caller hands its options over by name.

    Raises:
        ValueError: a value that does not read as its field's type.
    """
    readers = _readers()
    return PlanGrid(**{field.name: readers[field.name].validate_python(values[field.name])
                       for field in fields(PlanGrid) if field.name in values})


def grid_from_identity(stored: dict[str, Any], keys: list[CostKey]) -> PlanGrid:
    """Inverse of :func:`grid_identity`: the grid of a stored request whose cost keys are
    ``keys`` (the :data:`KEYED` fields are the sorted distinct values of the keys); a field the
    request does not hold takes its default.

    Raises:
        ValueError: a value of the wrong type (JSON read strictly: no string for a number, no
            number for a flag) or an unknown member of an enum.
    """
    readers = _readers()
    values: dict[str, Any] = {}
    for field in fields(PlanGrid):
        if field.name in KEYED:
            values[field.name] = tuple(sorted({getattr(key, KEYED[field.name]) for key in keys}))
        elif field.name in stored:
            text = json.dumps(stored[field.name])
            values[field.name] = readers[field.name].validate_json(text, strict=True)
    return PlanGrid(**values)
