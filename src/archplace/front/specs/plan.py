"""The parallel plans of a run: :class:`PlanSpace` (the options ``plan`` searches) and
:class:`Plan` (one fixed plan, as ``evaluate`` scores it: the placement engine's own
:class:`archplace.placement.plan.Plan`, re-exported).

:mod:`archplace.front.app` turns a plan space into the placement engine's grid. Errors name the field
as it is spelled in a plan file (``micro_batch_sizes``, ``plan.tp``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import as_dict, check_declared, check_keys
from archplace.base.options import option
from archplace.placement.grid import SEARCHED_CHUNKS, PlanChoices, parse_zero_stages
from archplace.placement.plan import (
    OPTIMIZER_HELP,
    RANK_ORDER_HELP,
    Optimizer,
    Plan,
    RankOrder,
    check_sp,
    check_zero_stage,
    parse_stages,
)

__all__ = ["SEARCHED_CHUNKS", "TOP_K", "Plan", "PlanChoices", "PlanSpace", "check_sp", "enum_choices",
           "fixed_zero_stage", "parse_stages", "parse_zero_stages"]

TOP_K = 5
"""Plans a plan search returns unless told: the same in Python (``top_k``), in plan files and on
the command line (``--top``)."""


@dataclass(frozen=True)
class PlanSpace(PlanChoices):
    """The options ``plan`` searches, and how it scores them: the plan choices
    (:class:`~archplace.placement.grid.PlanChoices`, declared once there for this space and the
    engine's grid: ``tps``, ``micro_batch_sizes``, ``recomputes``, ``schedules``, ``chunks``,
    ``zero_stages``, ``dp_overlap``, ``grad_reduce_dtype``, ``precisions``, ``cps``, ``eps``,
    ``etps``, ``dp_replicates``) and these.

    Attributes:
        sp: also try sequence parallelism (with every TP width > 1).
        optimizer: adam | adam-bf16 | sgd, not searched.
        top_k: plans returned, best first (1..1,000; default :data:`TOP_K`, 5, as ``--top``).
        rank_order: how the parallel groups are laid over the ranks (one order, not searched):
            tp-cp-ep-pp-dp (default) or tp-cp-ep-dp-pp (Megatron-Core's;
            :class:`~archplace.placement.plan.RankOrder`).

    Raises:
        ConfigError: a value out of range or unknown, an empty list (the field named; for
            ``cps``, ``eps``, ``etps`` and ``dp_replicates`` also in the error's ``fields``).
    """

    sp: bool = option(True, help="Never use sequence parallelism (tried with every TP width > 1 "
                                 "unless given)")
    optimizer: Optimizer = option(Optimizer.ADAM, help=OPTIMIZER_HELP)
    top_k: int = option(TOP_K, flag="--top", help="Plans to show", low=1, high=limits.MAX_TOP)
    rank_order: RankOrder = option(RankOrder.TP_CP_EP_PP_DP, help=RANK_ORDER_HELP)

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
