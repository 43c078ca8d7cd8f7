"""The plan grid the placement engine searches (:class:`PlanGrid`) and its JSON identity.

Every option of the grid is one typed field of :class:`PlanGrid`; its JSON form (what a result
store keeps of a search's plan space, :func:`grid_identity`) and the inverse
(:func:`grid_from_identity`) are derived from those fields, so that a new field is stored and
read back without anyone writing it twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from enum import Enum
from functools import cache
from typing import Any, ClassVar, get_type_hints

from archplace.base.errors import ConfigError
from archplace.base.options import option
from archplace.cost.precision import PRECISIONS, Precision
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.plan import (
    GRAD_HELP,
    GRAD_SYNC_HELP,
    MICRO_BATCHES,
    PRECISION_HELP,
    ZERO_STAGES,
    CostKey,
    GradReduceDtype,
    GradSync,
    PipelineSchedule,
    Plan,
    Recompute,
    check_zero_stage,
)
from archplace.workload.options import Tracing

SEARCHED_CHUNKS = (2, 4)
"""Model chunks per device tried with the interleaved schedule."""


def parse_zero_stages(value: str | int | Iterable[int | str] | None,
                      default: tuple[int, ...] = ZERO_STAGES) -> tuple[int, ...]:
    """ZeRO stages to search: None -> ``default``; ``"all"`` -> 0, 1, 2, 3; ``"0,1,3"``, an int
    or an iterable of ints / digit strings -> those stages, in the order given, once each.

    Raises:
        ConfigError: a stage outside 0..3 or an unparsable value.
    """
    if value is None:
        return default
    if isinstance(value, str):
        if value.strip() == "all":
            return ZERO_STAGES
        items: list[int | str] = [part.strip() for part in value.split(",")]
    elif isinstance(value, int):
        items = [value]
    else:
        try:
            items = list(value)
        except TypeError:
            raise ConfigError(f"zero_stages must be 0, 1, 2, 3, all or a list of them, "
                              f"got {value!r}") from None
    out = []
    for item in items:
        if isinstance(item, str):
            if not item.strip().isdigit():
                raise ConfigError(f"zero_stage must be 0, 1, 2, 3 or all, got {item!r}")
            item = int(item)
        out.append(check_zero_stage(item, "zero_stages"))
    if not out:
        raise ConfigError("at least one ZeRO stage is needed")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class PlanChoices:
    """The plan options a plan search tries, each a tuple of the values to try: declared once,
    here, for the plan space of ``plan`` (:class:`archplace.front.specs.PlanSpace`) and the
    engine's grid (:class:`PlanGrid`), which both are these choices and more. Each field
    ``tries`` the :class:`~archplace.placement.plan.Plan` field of its name in the singular: its
    type, range and help are that field's (:mod:`archplace.base.options`).

    Attributes:
        tps: TP widths; None for every power of two up to the devices (at most 64) that
            divides the model's heads, KV heads and FFN size.
        micro_batch_sizes: the micro-batch sizes to try, samples (default :data:`MICRO_BATCHES`,
            1, 2, 4, 8; files written before the rename say ``micro_batches``, still read).
        recomputes: activation recomputation policies (none, selective, full).
        schedules: pipeline schedules (gpipe, 1f1b, interleaved; dualpipe is refused by the
            search, :func:`archplace.placement.solver.plan_search`).
        chunks: model chunks per device tried with the interleaved schedule (each >= 2;
            default :data:`SEARCHED_CHUNKS`).
        zero_stages: ZeRO stages 0..3 (3 is FSDP; :mod:`archplace.placement.zero`).
        dp_overlap: DP gradient reduction exposed (False) and/or bucketed over the last
            micro-batch's backward pass (True).
        grad_reduce_dtype: gradient buffer and reduction dtype (fp32, as Megatron-LM's bf16
            recipe, or bf16), not searched: every plan is scored with it.
        grad_sync: when the DP gradient reduction runs (auto, iteration or micro_batch;
            :class:`~archplace.placement.choices.GradSync`), not searched: every plan is scored
            with it.
        precisions: precisions of the linear layers' GEMMs to try: bf16 and/or fp8
            (Transformer Engine's FP8 recipe, :mod:`archplace.cost.precision`), each a separate
            set of layer costs; the plans of all of them are ranked together (ties: bf16 first).
        cps: context-parallel degrees to try (each 1..2**20: the sequence split over cp ranks,
            ring attention); None: :func:`~archplace.placement.workflow.valid_cp_degrees` (1 and
            the powers of two dividing the sequence into 2 cp chunks of at least
            ``MIN_TOKENS_PER_CP_RANK`` tokens per rank).
        eps: expert-parallel degrees to try (each 1..2**20: the routed experts sharded over ep
            ranks of the data-parallel group); None: the powers of two dividing the routed
            experts of an MoE model, 1 for a dense one.
        etps: expert-tensor-parallel widths to try (each 1..2**20: every routed expert's weights
            split over etp ranks, Megatron-Core's ``expert_tensor_parallel_size``); None: 1 and
            each TP width for an MoE model whose experts' FFN width it divides, 1 for a dense one.
        dp_replicates: hybrid-sharding (HSDP) replica counts to try (each 1..2**20; default 1
            only): ZeRO shards over dp * cp / r ranks of each of r replicas, which all-reduce
            their gradient shards once per iteration; each r > 1 with the ZeRO stages >= 1 and
            the DP degrees it divides (:func:`~archplace.placement.solver.plan_search`).

    Each (tp, micro-batch, sp, cp, ep, etp) is one set of layer costs (a
    :class:`~archplace.workload.key.CostKey`); the engine takes tp * cp * pp * dp devices with
    etp * ep dividing tp * cp * dp.
    """

    TRIES: ClassVar[type] = Plan
    """The class whose fields these fields try (:attr:`archplace.base.options.Option.tries`)."""

    tps: tuple[int, ...] | None = option(None, tries="tp", default_shown="all valid")
    micro_batch_sizes: tuple[int, ...] = option(MICRO_BATCHES, tries="micro_batch",
                                                formerly=("micro_batches",))
    recomputes: tuple[Recompute, ...] = option(tuple(Recompute), tries="recompute")
    schedules: tuple[PipelineSchedule, ...] = option(SEARCHED_SCHEDULES, tries="schedule")
    chunks: tuple[int, ...] = option(SEARCHED_CHUNKS, tries="chunks", low=2)
    zero_stages: tuple[int, ...] = option(
        ZERO_STAGES, tries="zero_stage", parse=parse_zero_stages, default_shown="all",
        help="ZeRO stages to try: a comma list of 0-3 or 'all' (3 = FSDP)")
    dp_overlap: tuple[bool, ...] = option(
        (False, True), tries="dp_overlap", cli=False,
        help="DP gradient reduction exposed (false) and/or bucketed over the last backward pass "
             "(true): both are tried unless a plan file says otherwise")
    grad_reduce_dtype: GradReduceDtype = option(GradReduceDtype.FP32, help=GRAD_HELP)
    grad_sync: GradSync = option(GradSync.AUTO, help=GRAD_SYNC_HELP)
    precisions: tuple[Precision, ...] = option(
        PRECISIONS, tries="precision", help=PRECISION_HELP + "; the plans of each are ranked together")
    cps: tuple[int, ...] | None = option(None, tries="cp", default_shown="automatic")
    eps: tuple[int, ...] | None = option(None, tries="ep", default_shown="automatic")
    etps: tuple[int, ...] | None = option(None, tries="etp", default_shown="automatic: 1 and the TP width")
    dp_replicates: tuple[int, ...] = option((1,), tries="dp_replicate")

@dataclass(frozen=True)
class PlanGrid(Tracing, PlanChoices):
    """The resolved options the placement engine searches: the plan choices
    (:class:`PlanChoices`, taken from a :class:`archplace.front.specs.PlanSpace` by
    :mod:`archplace.front.app`, or from a search's request), how the model's layers are traced
    and costed (:class:`~archplace.workload.options.Tracing`: attention, kernels, fuse,
    capacity_factor, expert_load_imbalance; not searched, from the model spec or the search
    spec) and these.

    Attributes:
        sps: the sequence-parallel settings tried (True only with TP widths > 1).

    A mixture-of-experts model at tp > 1 is costed with sequence parallelism only
    (:func:`~archplace.placement.workflow.check_moe_sp`).
    """

    sps: tuple[bool, ...] = (False, True)


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
