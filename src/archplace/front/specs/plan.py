"""The parallel plans of a run: :class:`PlanSpace` (the options ``plan`` searches) and
:class:`Plan` (one fixed plan, as ``evaluate`` scores it: the placement engine's own
:class:`archplace.placement.plan.Plan`, re-exported).

:mod:`archplace.front.app` turns a plan space into the placement engine's grid. Errors name the field
as it is spelled in a plan file (``micro_batch_sizes``, ``plan.tp``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import as_dict, check_declared, check_keys
from archplace.base.options import option
from archplace.cost.precision import PRECISIONS, Precision
from archplace.placement.plan import (
    GRAD_HELP,
    MICRO_BATCHES,
    OPTIMIZER_HELP,
    PRECISION_HELP,
    RANK_ORDER_HELP,
    ZERO_STAGES,
    GradReduceDtype,
    Optimizer,
    PipelineSchedule,
    Plan,
    RankOrder,
    Recompute,
    check_sp,
    check_zero_stage,
    parse_stages,
)

__all__ = ["SEARCHED_CHUNKS", "TOP_K", "Plan", "PlanSpace", "check_sp", "enum_choices",
           "fixed_zero_stage", "parse_stages", "parse_zero_stages"]

SEARCHED_CHUNKS = (2, 4)
"""Model chunks per device tried with the interleaved schedule."""

TOP_K = 5
"""Plans a plan search returns unless told: the same in Python (``top_k``), in plan files and on
the command line (``--top``)."""


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
class PlanSpace:
    """The options ``plan`` searches (tuples: the values to try), and how it scores them.

    Attributes:
        tps: TP widths; None for every power of two up to the devices (at most 64) that
            divides the model's heads, KV heads and FFN size.
        micro_batch_sizes: the micro-batch sizes to try, samples (default :data:`MICRO_BATCHES`,
            1, 2, 4, 8; files written before the rename say ``micro_batches``, still read).
        recomputes: activation recomputation policies (none, selective, full).
        schedules: pipeline schedules (gpipe, 1f1b, interleaved).
        chunks: model chunks per device tried with the interleaved schedule (each >= 2).
        sp: also try sequence parallelism (with every TP width > 1).
        zero_stages: ZeRO stages 0..3 (3 is FSDP).
        dp_overlap: DP gradient reduction exposed (False) and/or bucketed over the last
            backward pass (True).
        grad_reduce_dtype: gradient buffer and reduction dtype (fp32 | bf16), not searched.
        optimizer: adam | sgd, not searched.
        top_k: plans returned, best first (1..1,000; default :data:`TOP_K`, 5, as ``--top``).
        precisions: precisions of the linear layers' GEMMs to try: bf16 and/or fp8
            (Transformer Engine's FP8 recipe, :mod:`archplace.cost.precision`); default bf16.
        cps: context-parallel degrees to try (each 1..2**20: the sequence split over cp ranks,
            ring attention); None: the engine's automatic choice.
        eps: expert-parallel degrees to try (each 1..2**20: the routed experts sharded over ep
            ranks of the data-parallel group); None: the engine's automatic choice.
        etps: expert-tensor-parallel widths to try (each 1..2**20: every routed expert's weights
            split over etp ranks, Megatron-Core's ``expert_tensor_parallel_size``); None: the
            engine's automatic choice (1 and each TP width for an MoE model, 1 for a dense one).
        rank_order: how the parallel groups are laid over the ranks (one order, not searched):
            tp-cp-ep-pp-dp (default) or tp-cp-ep-dp-pp (Megatron-Core's;
            :class:`~archplace.placement.plan.RankOrder`).
        dp_replicates: hybrid-sharding (HSDP) replica counts to try (each 1..2**20; default 1
            only): ZeRO shards over dp * cp / r ranks of each of r replicas, which all-reduce
            their gradient shards once per iteration; each r > 1 with the ZeRO stages >= 1 and
            the DP degrees it divides.

    Raises:
        ConfigError: a value out of range or unknown, an empty list (the field named; for
            ``cps``, ``eps``, ``etps`` and ``dp_replicates`` also in the error's ``fields``).
    """

    TRIES: ClassVar[type] = Plan
    """The class whose fields this space's fields try (:attr:`archplace.base.options.Option.tries`)."""

    tps: tuple[int, ...] | None = option(None, tries="tp", default_shown="all valid")
    micro_batch_sizes: tuple[int, ...] = option(MICRO_BATCHES, tries="micro_batch",
                                                formerly=("micro_batches",))
    recomputes: tuple[Recompute, ...] = option(tuple(Recompute), tries="recompute")
    schedules: tuple[PipelineSchedule, ...] = option(tuple(PipelineSchedule), tries="schedule")
    chunks: tuple[int, ...] = option(SEARCHED_CHUNKS, tries="chunks", low=2)
    sp: bool = option(True, help="Never use sequence parallelism (tried with every TP width > 1 "
                                 "unless given)")
    zero_stages: tuple[int, ...] = option(
        ZERO_STAGES, tries="zero_stage", parse=parse_zero_stages, default_shown="all",
        help="ZeRO stages to try: a comma list of 0-3 or 'all' (3 = FSDP)")
    dp_overlap: tuple[bool, ...] = option(
        (False, True), tries="dp_overlap", cli=False,
        help="DP gradient reduction exposed (false) and/or bucketed over the last backward pass "
             "(true): both are tried unless a plan file says otherwise")
    grad_reduce_dtype: GradReduceDtype = option(GradReduceDtype.FP32, help=GRAD_HELP)
    optimizer: Optimizer = option(Optimizer.ADAM, help=OPTIMIZER_HELP)
    top_k: int = option(TOP_K, flag="--top", help="Plans to show", low=1, high=limits.MAX_TOP)
    precisions: tuple[Precision, ...] = option(
        PRECISIONS, tries="precision", help=PRECISION_HELP + "; the plans of each are ranked together")
    cps: tuple[int, ...] | None = option(None, tries="cp", default_shown="automatic")
    eps: tuple[int, ...] | None = option(None, tries="ep", default_shown="automatic")
    rank_order: RankOrder = option(RankOrder.TP_CP_EP_PP_DP, help=RANK_ORDER_HELP)
    etps: tuple[int, ...] | None = option(None, tries="etp", default_shown="automatic: 1 and the TP width")
    dp_replicates: tuple[int, ...] = option((1,), tries="dp_replicate")

    def __post_init__(self) -> None:
        check_declared(self)  # each field from its declaration (ranges: the plan field it tries)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: every field, enums as their names, tuples as lists."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanSpace:
        """Inverse of :meth:`to_dict`; a missing key takes its default.

        Raises:
            ConfigError: an unknown key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "plan space"))


def enum_choices(enum_type: Any, values: Iterable[str], option: str) -> tuple[Any, ...]:
    """``values`` as members of ``enum_type`` (by value), in order.

    Raises:
        ConfigError: an unknown value, naming ``option`` and the choices.
    """
    out = []
    for value in values:
        try:
            out.append(enum_type(value))
        except ValueError:
            choices = ", ".join(str(member.value) for member in enum_type)
            raise ConfigError(f"unknown {option} {value!r}; choose from: {choices}") from None
    return tuple(out)


def fixed_zero_stage(zero_stage: int | None, zero: bool) -> int:
    """The one ZeRO stage of a fixed plan: ``zero_stage``, or 1 for the older ``zero=True``.

    Raises:
        ConfigError: both given and disagreeing, or a stage outside 0..3.
    """
    if zero_stage is None:
        return 1 if zero else 0
    stage = check_zero_stage(zero_stage, "evaluate")
    if zero and stage != 1:
        raise ConfigError(f"zero (ZeRO stage 1) contradicts zero_stage={stage}: give one of them")
    return stage
