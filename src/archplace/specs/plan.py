"""The parallel plans of a run: :class:`PlanSpace` (the options ``plan`` searches) and
:class:`Plan` (one fixed plan, as ``evaluate`` scores it).

Both hold plain values; :mod:`archplace.app` turns them into the placement engine's inputs.
Errors name the field as it is spelled in a plan file (``micro_batches``, ``plan.tp``).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from archplace import limits
from archplace.cost.precision import PRECISIONS, Precision
from archplace.errors import ConfigError
from archplace.placement.plan import (
    MICRO_BATCHES,
    ZERO_STAGES,
    GradReduceDtype,
    Optimizer,
    PipelineSchedule,
    RankOrder,
    Recompute,
    check_zero_stage,
)
from archplace.specs._fields import as_dict, check_keys, flag, flags, member, members, sequence, store, wholes
from archplace.specs.options import option

SEARCHED_CHUNKS = (2, 4)
"""Model chunks per device tried with the interleaved schedule."""

TOP_K = 5
"""Plans a plan search returns unless told: the same in Python (``top_k``), in plan files and on
the command line (``--top``)."""


_GRAD_HELP = "Gradient buffer and DP reduction dtype: fp32 (Megatron-LM's bf16 recipe) | bf16"
_OPTIMIZER_HELP = "Optimizer: adam (18 B/param) | sgd"
_PRECISION_HELP = ("Precision of the linear layers' GEMMs: bf16, or fp8 (Transformer Engine's FP8 recipe: "
                   "FP8 GEMM operands with delayed scaling, on chips with FP8 tensor cores)")
_RANK_ORDER_HELP = ("How the parallel groups are laid over the device ranks, fastest-varying first: "
                    "tp-cp-ep-pp-dp (pipeline neighbours close, replicas outermost) or tp-cp-ep-dp-pp "
                    "(Megatron-Core's default: replicas close, pipeline outermost)")


def _zero_stage(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) not in ZERO_STAGES:
        raise ConfigError(f"{field} must be 0, 1, 2 or 3, got {limits.shown(value)}")
    return int(value)


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


def parse_stages(text: str) -> tuple[tuple[int, int], ...]:
    """``"0-12,13-25,26-49"`` -> ((0, 12), (13, 25), (26, 49)).

    Raises:
        ConfigError: unparsable text (the count, contiguity and the last layer are checked by
            the plan).
    """
    out = []
    for part in text.split(","):
        try:
            first, last = (int(x) for x in part.strip().split("-"))
        except ValueError:
            raise ConfigError(f"stages: expected FIRST-LAST ranges separated by commas, got {part!r}",
                              fields=("stages",)) from None
        out.append((first, last))
    return tuple(out)


@dataclass(frozen=True)
class PlanSpace:
    """The options ``plan`` searches (tuples: the values to try), and how it scores them.

    Attributes:
        tps: TP widths; None for every power of two up to the devices (at most 64) that
            divides the model's heads, KV heads and FFN size.
        micro_batches: samples per micro-batch (default :data:`MICRO_BATCHES`, 1, 2, 4, 8).
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

    tps: tuple[int, ...] | None = option(None, tries="tp", default_shown="all valid")
    micro_batches: tuple[int, ...] = option(MICRO_BATCHES, tries="micro_batch")
    recomputes: tuple[Recompute, ...] = option(tuple(Recompute), tries="recompute")
    schedules: tuple[PipelineSchedule, ...] = option(tuple(PipelineSchedule), tries="schedule")
    chunks: tuple[int, ...] = option(SEARCHED_CHUNKS, tries="chunks")
    sp: bool = option(True, help="Never use sequence parallelism (tried with every TP width > 1 "
                                 "unless given)")
    zero_stages: tuple[int, ...] = option(
        ZERO_STAGES, tries="zero_stage", parse=parse_zero_stages, default_shown="all",
        help="ZeRO stages to try: a comma list of 0-3 or 'all' (3 = FSDP)")
    dp_overlap: tuple[bool, ...] = option(
        (False, True), tries="dp_overlap", cli=False,
        help="DP gradient reduction exposed (false) and/or bucketed over the last backward pass "
             "(true): both are tried unless a plan file says otherwise")
    grad_reduce_dtype: GradReduceDtype = option(GradReduceDtype.FP32, help=_GRAD_HELP)
    optimizer: Optimizer = option(Optimizer.ADAM, help=_OPTIMIZER_HELP)
    top_k: int = option(TOP_K, flag="--top", help="Plans to show")
    precisions: tuple[Precision, ...] = option(
        PRECISIONS, tries="precision", help=_PRECISION_HELP + "; the plans of each are ranked together")
    cps: tuple[int, ...] | None = option(None, tries="cp", default_shown="automatic")
    eps: tuple[int, ...] | None = option(None, tries="ep", default_shown="automatic")
    rank_order: RankOrder = option(RankOrder.TP_CP_EP_PP_DP, help=_RANK_ORDER_HELP)
    etps: tuple[int, ...] | None = option(None, tries="etp", default_shown="automatic: 1 and the TP width")
    dp_replicates: tuple[int, ...] = option((1,), tries="dp_replicate")

    def __post_init__(self) -> None:
        store(self, "rank_order", member(RankOrder, self.rank_order, "rank_order"))
        store(self, "dp_replicates", degrees(self.dp_replicates, "dp_replicates"))
        if self.tps is not None:
            store(self, "tps", wholes(self.tps, "tps", "tp", 1, limits.MAX_DEVICES))
        store(self, "micro_batches", wholes(self.micro_batches, "micro_batches", "micro_batch", 1,
                                            limits.MAX_MICRO_BATCH))
        store(self, "recomputes", members(Recompute, self.recomputes, "recomputes"))
        store(self, "schedules", members(PipelineSchedule, self.schedules, "schedules"))
        store(self, "chunks", wholes(self.chunks, "chunks", "chunks", 2, limits.MAX_DEVICES))
        flag(self.sp, "sp")
        store(self, "zero_stages", tuple(dict.fromkeys(
            _zero_stage(s, "zero_stages: zero_stage") for s in sequence(self.zero_stages, "zero_stages"))))
        store(self, "dp_overlap", flags(self.dp_overlap, "dp_overlap"))
        store(self, "grad_reduce_dtype", member(GradReduceDtype, self.grad_reduce_dtype, "grad_reduce_dtype"))
        store(self, "optimizer", member(Optimizer, self.optimizer, "optimizer"))
        limits.whole("top_k", self.top_k, 1, limits.MAX_TOP)
        store(self, "precisions", members(Precision, self.precisions, "precisions"))
        for name in ("cps", "eps", "etps"):
            if getattr(self, name) is not None:
                store(self, name, degrees(getattr(self, name), name))

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


@dataclass(frozen=True)
class Plan:
    """One fixed parallel plan, as ``evaluate`` scores it.

    Attributes:
        tp, pp, dp: tensor-, pipeline- and data-parallel degrees (1..2**20 each).
        micro_batch: samples per micro-batch (1..2**20).
        recompute: none | selective | full.
        schedule: gpipe | 1f1b | interleaved.
        chunks: model chunks per device: >= 2 with the interleaved schedule (which also needs
            pp >= 2), else 1.
        sp: sequence parallelism (needs tp > 1).
        zero_stage: ZeRO stage 0..3.
        dp_overlap: the DP gradient reduction runs bucketed over the last backward pass.
        grad_reduce_dtype: fp32 | bf16 gradient buffer and reduction.
        optimizer: adam | sgd.
        stages: ``(first_layer, last_layer)`` of each of the ``pp * chunks`` stages (embedding =
            layer 0, head = the last); None for Megatron-LM's even split of the blocks.
        precision: bf16 | fp8: the precision of the linear layers' GEMMs
            (:mod:`archplace.cost.precision`).
        cp: context-parallel degree (1..2**20): the sequence split over cp ranks.
        ep: expert-parallel degree (1..2**20): the routed experts sharded over ep ranks.
        rank_order: tp-cp-ep-pp-dp (default) | tp-cp-ep-dp-pp: how the parallel groups are laid
            over the ranks (:class:`~archplace.placement.plan.RankOrder`).
        etp: expert-tensor-parallel width (1..2**20): every routed expert's weights split over
            etp ranks (Megatron-Core's ``expert_tensor_parallel_size``).
        dp_replicate: hybrid sharding (HSDP; PyTorch FSDP's HYBRID_SHARD, TorchTitan's
            ``data_parallel_replicate_degree``): the dp ranks form dp_replicate replicas, ZeRO
            shards over the dp * cp / dp_replicate ranks of each, and the replicas all-reduce their
            gradient shards once per iteration (:mod:`archplace.placement.layout`). 1 (default):
            ZeRO over the whole DP x CP group. Must divide dp and needs zero_stage >= 1.

    Raises:
        ConfigError: a field out of range or unknown (named ``plan.FIELD``), sp with tp = 1,
            chunks inconsistent with the schedule, stages that are not ``pp * chunks`` pairs of
            layer indices.
    """

    tp: int = option(help="Tensor-parallel width")
    pp: int = option(help="Pipeline stages")
    dp: int = option(help="Data-parallel degree")
    micro_batch: int = option(help="Samples per micro-batch")
    recompute: Recompute = option(Recompute.NONE, help="Activation recomputation")
    schedule: PipelineSchedule = option(PipelineSchedule.ONE_F_ONE_B, help="Pipeline schedule")
    chunks: int = option(1, help="Model chunks per device (interleaved)")
    sp: bool = option(False, help="Sequence parallelism (needs tp > 1)")
    zero_stage: int = option(0, help="ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + parameters (FSDP)")
    dp_overlap: bool = option(False, help=(
        "Reduce gradients bucket by bucket during the last backward pass (only what is left after it "
        "is exposed); without it the whole reduction is exposed"))
    grad_reduce_dtype: GradReduceDtype = option(GradReduceDtype.FP32, help=_GRAD_HELP)
    optimizer: Optimizer = option(Optimizer.ADAM, help=_OPTIMIZER_HELP)
    stages: tuple[tuple[int, int], ...] | None = option(
        None, parse=parse_stages, default_shown="even split of the blocks",
        help="Layer ranges per stage, e.g. 0-12,13-25")
    precision: Precision = option(Precision.BF16, help=_PRECISION_HELP)
    cp: int = option(1, help="Context-parallel degree: each sample's sequence split over CP ranks (ring "
                             "attention)")
    ep: int = option(1, help="Expert-parallel degree: each MoE layer's routed experts sharded over EP "
                             "ranks of the DP group")
    rank_order: RankOrder = option(RankOrder.TP_CP_EP_PP_DP, help=_RANK_ORDER_HELP)
    etp: int = option(1, help="Expert-tensor-parallel width: each routed expert's weights split over ETP "
                              "ranks (Megatron-Core's expert_tensor_parallel_size; MoE models)")
    dp_replicate: int = option(1, help=(
        "Hybrid sharding (HSDP): DP replicas, each sharding the ZeRO state over dp*cp/dp_replicate "
        "ranks; they all-reduce gradients once per iteration (divides dp; needs zero_stage >= 1)"))

    def __post_init__(self) -> None:
        store(self, "rank_order", member(RankOrder, self.rank_order, "plan.rank_order"))
        for name in ("tp", "pp", "dp", "chunks", "cp", "ep", "etp", "dp_replicate"):
            limits.whole(f"plan.{name}", getattr(self, name), 1, limits.MAX_DEVICES)
        limits.whole("plan.micro_batch", self.micro_batch, 1, limits.MAX_MICRO_BATCH)
        store(self, "recompute", member(Recompute, self.recompute, "plan.recompute"))
        store(self, "schedule", member(PipelineSchedule, self.schedule, "plan.schedule"))
        store(self, "zero_stage", _zero_stage(self.zero_stage, "plan.zero_stage"))
        flag(self.sp, "plan.sp")
        flag(self.dp_overlap, "plan.dp_overlap")
        store(self, "grad_reduce_dtype", member(GradReduceDtype, self.grad_reduce_dtype,
                                                "plan.grad_reduce_dtype"))
        store(self, "optimizer", member(Optimizer, self.optimizer, "plan.optimizer"))
        store(self, "precision", member(Precision, self.precision, "plan.precision"))
        check_sp(self.sp, self.tp, "plan.")
        if self.dp % self.dp_replicate:
            raise ConfigError(f"plan.dp_replicate = {self.dp_replicate} must divide plan.dp = {self.dp}",
                              fields=("plan.dp_replicate",))
        if self.dp_replicate > 1 and self.zero_stage == 0:
            raise ConfigError(f"plan.dp_replicate = {self.dp_replicate} (hybrid sharding) needs "
                              f"plan.zero_stage >= 1: it replicates ZeRO shards",
                              fields=("plan.dp_replicate",))
        if self.schedule is PipelineSchedule.INTERLEAVED:
            if self.chunks < 2 or self.pp < 2:
                raise ConfigError(f"plan.schedule interleaved needs plan.chunks >= 2 and plan.pp >= 2, "
                                  f"got chunks={self.chunks}, pp={self.pp}")
        elif self.chunks != 1:
            raise ConfigError(f"plan.chunks={self.chunks} needs plan.schedule interleaved, "
                              f"not {self.schedule.value}")
        if self.stages is not None:
            store(self, "stages", _stage_ranges(self.stages, self.pp * self.chunks))

    def to_dict(self) -> dict[str, Any]:
        """JSON form: every field, enums as their names, stages as ``[[first, last], ...]``
        (None: the even split)."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Inverse of :meth:`to_dict`; also reads the ``"plan"`` object of ``plan --json`` (its
        ``stage_device`` is derived from the stages, so ignored).

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "plan", ignored=("stage_device",)))


def degrees(values: object, field: str) -> tuple[int, ...]:
    """A non-empty list of parallel degrees (whole numbers 1..2**20), once each, in order: the
    CP or EP degrees or expert-TP widths of ``field`` (``cps``, ``eps``, ``etps``; the element
    named without the ``s``).

    Raises:
        ConfigError: "``field``: cp must be a whole number from 1 to 1,048,576, got VALUE" (or
            not a list, or empty), with ``field`` in its ``fields``.
    """
    try:
        return wholes(values, field, field.rstrip("s"), 1, limits.MAX_DEVICES)
    except ConfigError as exc:
        raise ConfigError(str(exc), fields=(field,)) from None


def check_sp(sp: bool, tp: int, prefix: str = "") -> None:
    """Sequence parallelism splits the activations over the TP group (Korthikanti et al. 2022,
    section 4.2.2): with tp = 1 there is nothing to split, and Megatron-LM turns it off.

    Raises:
        ConfigError: ``sp`` with ``tp`` = 1 (``prefix`` + ``sp`` and ``tp`` named).
    """
    if sp and tp == 1:
        raise ConfigError(f"{prefix}sp needs {prefix}tp > 1: sequence parallelism splits activations "
                          "over the TP group", fields=(f"{prefix}sp", f"{prefix}tp"))


def _stage_ranges(stages: object, count: int) -> tuple[tuple[int, int], ...]:
    try:
        pairs = [tuple(pair) for pair in stages]  # type: ignore[attr-defined]
    except TypeError:
        pairs = []
    out = []
    for pair in pairs:
        if len(pair) != 2:
            break
        first, last = (limits.whole("plan.stages: layer", x, 0, limits.MAX_DEVICES) for x in pair)
        out.append((first, last))
    if len(out) != len(pairs) or not out:
        raise ConfigError(f"plan.stages must be [first_layer, last_layer] pairs, got {limits.shown(stages)}")
    if len(out) != count:
        raise ConfigError(f"plan.stages must give pp * chunks = {count} layer ranges, got {len(out)}")
    return tuple(out)


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
