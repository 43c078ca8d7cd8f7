"""Value objects of the placement stage: the cost key, the fixed side of a problem
(:class:`TrainingSetup`) and a parallel plan (:class:`Plan`). The options' choices live in
:mod:`archplace.placement.choices` and layer costs in :mod:`archplace.placement.layer_cost`;
both are re-exported here."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import check_declared, check_keys, integral, plain, store
from archplace.base.options import bounds, option
from archplace.cost.precision import Precision
from archplace.hw.cluster import Cluster
from archplace.placement.choices import (
    MICRO_BATCHES,
    RECOMPUTE_ORDER,
    SCHEDULE_ORDER,
    ZERO_STAGES,
    GradReduceDtype,
    GradSync,
    Optimizer,
    PipelineSchedule,
    RankOrder,
    Recompute,
    check_zero_stage,
)
from archplace.placement.interference import NO_INTERFERENCE, Interference
from archplace.placement.layer_cost import LayerCost
from archplace.workload.key import CostKey

__all__ = ["MICRO_BATCHES", "RECOMPUTE_ORDER", "SCHEDULE_ORDER", "ZERO_STAGES", "CostKey", "GradReduceDtype",
           "GradSync", "LayerCost", "Optimizer", "PipelineSchedule", "Plan", "RankOrder", "Recompute",
           "TrainingSetup", "check_replicate", "check_sp", "check_zero_stage", "parse_stages"]


def _positive_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ConfigError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


def check_replicate(replicate: object, *, dp: int, owner: str = "plan") -> int:
    """``replicate`` as an int, the hybrid-sharding replicas of a plan with ``dp`` data-parallel
    ranks (errors name ``owner.dp_replicate``).

    Raises:
        ConfigError: not a positive integer dividing dp.
    """
    if isinstance(replicate, bool) or not isinstance(replicate, numbers.Integral) or int(replicate) < 1:
        raise ConfigError(f"{owner}.dp_replicate must be a positive integer, got {replicate!r}",
                          fields=(f"{owner}.dp_replicate",))
    if dp % int(replicate):
        raise ConfigError(f"{owner}.dp_replicate = {replicate} must divide {owner}.dp = {dp} (the "
                          f"data-parallel ranks are split into dp_replicate replicas of dp/dp_replicate "
                          f"shards)", fields=(f"{owner}.dp_replicate",))
    return int(replicate)


SETUP_FIELDS = ("optimizer", "grad_reduce_dtype", "rank_order", "dp_replicate", "grad_sync")
"""Fields of a :class:`Plan` that are also the :class:`TrainingSetup`'s, which prices them."""


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
        optimizer: optimizer whose state is kept (bytes per parameter, step traffic).
        grad_reduce_dtype: dtype of the gradient buffer and of the DP reduction
            (:class:`GradReduceDtype`; fp32 by default, as Megatron-LM's bf16 recipe).
        dp_must_divide_batch: when True, micro_batch * dp must divide the global batch and
            m = global_batch / (micro_batch * dp); when False any dp is allowed and the batch
            is padded up: m = ceil(global_batch / (micro_batch * dp)) micro-batches per
            pipeline (at least pp for the interleaved schedule) are run and
            the padding samples are wasted work (throughput and MFU count only global_batch).
        rank_order: how the TP, CP, EP, DP and PP groups are laid over the ranks
            (:class:`RankOrder`; "tp-cp-ep-pp-dp" by default, "tp-cp-ep-dp-pp" as Megatron-Core).
        interference: the compute capacity a collective hidden behind compute takes
            (:class:`~archplace.placement.interference.Interference`; default none: free overlap;
            :meth:`Interference.of` gives a known chip's).
        hbm_fraction: fraction of ``hbm_bandwidth_bytes_per_s`` the optimizer step's streaming
            kernel reaches, in (0, 1] (a known chip's ``efficiency.hbm``; default 1).
        pp_comm_overlap: the interleaved schedule's pipeline sends overlap the next chunk's
            computation (Megatron-Core's ``overlap_p2p_comm``; :mod:`archplace.placement.pipeline`);
            default False: they block. GPipe and 1F1B always block.
        dp_replicate: the hybrid-sharding replicas of every plan searched or scored
            (:attr:`Plan.dp_replicate`; like ``rank_order``, one value per search, the engine
            setting it on every plan it returns); 1 by default.
        grad_sync: when the DP gradient reduction runs (:attr:`Plan.grad_sync`; one value per
            search, set on every plan the engine returns); auto by default.

    Raises:
        ConfigError: a non-positive field, an unknown optimizer, rank order or gradient
            synchronisation, an
            ``hbm_fraction`` outside (0, 1].
    """

    cluster: Cluster
    global_batch: int
    seq_len: int
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    peak_flop_per_s: float
    optimizer: Optimizer = Optimizer.ADAM
    dp_must_divide_batch: bool = True
    grad_reduce_dtype: GradReduceDtype = GradReduceDtype.FP32
    rank_order: RankOrder = RankOrder.TP_CP_EP_PP_DP
    interference: Interference = NO_INTERFERENCE
    hbm_fraction: float = 1.0
    pp_comm_overlap: bool = False
    dp_replicate: int = 1
    grad_sync: GradSync = GradSync.AUTO

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
                     "peak_flop_per_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        object.__setattr__(self, "dp_replicate", _positive_int("setup", "dp_replicate", self.dp_replicate))
        if not 0.0 < self.hbm_fraction <= 1.0:
            raise ConfigError(f"hbm_fraction must be a fraction in (0, 1], got {self.hbm_fraction!r}")
        if not isinstance(self.interference, Interference):
            raise ConfigError(f"interference must be an Interference, got {self.interference!r}")
        try:
            object.__setattr__(self, "optimizer", Optimizer(self.optimizer))
        except ValueError:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose from: "
                              f"{', '.join(o.value for o in Optimizer)}") from None
        object.__setattr__(self, "dp_must_divide_batch", bool(self.dp_must_divide_batch))
        try:
            object.__setattr__(self, "grad_reduce_dtype", GradReduceDtype(self.grad_reduce_dtype))
        except ValueError:
            raise ConfigError(f"unknown grad_reduce_dtype {self.grad_reduce_dtype!r}; choose from: "
                              f"{', '.join(d.value for d in GradReduceDtype)}") from None
        try:
            object.__setattr__(self, "rank_order", RankOrder(self.rank_order))
        except ValueError:
            raise ConfigError(f"unknown rank_order {self.rank_order!r}; choose from: "
                              f"{', '.join(o.value for o in RankOrder)}") from None
        try:
            object.__setattr__(self, "grad_sync", GradSync(self.grad_sync))
        except ValueError:
            raise ConfigError(f"unknown grad_sync {self.grad_sync!r}; choose from: "
                              f"{', '.join(o.value for o in GradSync)}") from None

    def plan_options(self) -> dict[str, Any]:
        """The fields of a :class:`Plan` that the setup prices, by name: ``optimizer``,
        ``grad_reduce_dtype``, ``rank_order``, ``dp_replicate`` and ``grad_sync`` (the engine sets
        them on every plan it returns, and refuses a plan that disagrees)."""
        return {name: getattr(self, name) for name in SETUP_FIELDS}

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (buffer and reduction): 4 (fp32) or 2 (bf16)."""
        return self.grad_reduce_dtype.bytes

    @property
    def step_bandwidth_bytes_per_s(self) -> float:
        """HBM bandwidth the optimizer step streams at: datasheet x ``hbm_fraction``."""
        return self.hbm_bandwidth_bytes_per_s * self.hbm_fraction


RANK_ORDER_HELP = ("How the parallel groups are laid over the device ranks, fastest-varying first: "
                   "tp-cp-ep-pp-dp (pipeline neighbours close, replicas outermost) or tp-cp-ep-dp-pp "
                   "(Megatron-Core's default: replicas close, pipeline outermost)")
"""The help of :attr:`Plan.rank_order` and of a plan space's."""
GRAD_HELP = "Gradient buffer and DP reduction dtype: fp32 (Megatron-LM's bf16 recipe) | bf16"
OPTIMIZER_HELP = ("Optimizer: adam (fp32 master weights and moments, 18 B/param with bf16 weights and fp32 "
                  "gradients) | adam-bf16 (bf16 moments, 14 B/param: DeepSeek-V3, Megatron-Core's "
                  "precision-aware optimizer) | sgd")
GRAD_SYNC_HELP = ("When the DP gradient reduction runs: auto (ZeRO 0-1 once per iteration, 2-3 every "
                  "micro-batch, each framework's default), iteration (accumulate, reduce once: ZeRO 2-3 "
                  "hold unsharded gradients) or micro_batch (every micro-batch)")
"""The help of :attr:`Plan.grad_sync` and of a plan space's."""
PRECISION_HELP = ("Precision of the linear layers' GEMMs: bf16, or fp8 (Transformer Engine's FP8 recipe: "
                  "FP8 GEMM operands with delayed scaling, on chips with FP8 tensor cores)")
"""The help of :attr:`Plan.precision` (a plan space's precisions add how they are ranked)."""


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
            raise ConfigError(f"plan.stages: expected FIRST-LAST ranges separated by commas, got {part!r}",
                              fields=("plan.stages",)) from None
        out.append((first, last))
    return tuple(out)


def check_sp(sp: bool, tp: int, prefix: str = "") -> None:
    """Sequence parallelism splits the activations over the TP group (Korthikanti et al. 2022,
    section 4.2.2): with tp = 1 there is nothing to split, and Megatron-LM turns it off.

    Raises:
        ConfigError: ``sp`` with ``tp`` = 1 (``prefix`` + ``sp`` and ``tp`` named).
    """
    if sp and tp == 1:
        raise ConfigError(f"{prefix}sp needs {prefix}tp > 1: sequence parallelism splits activations "
                          "over the TP group", fields=(f"{prefix}sp", f"{prefix}tp"))


@dataclass(frozen=True, slots=True)
class Plan:
    """A parallel plan: what ``evaluate`` scores, what ``plan`` returns, and what the engine
    evaluates (one class from the command line and the plan files to the placement engine).

    A plan given by a user may leave ``stages`` None (Megatron-LM's even split of the blocks,
    resolved when the plan is evaluated); every plan the engine returns has them. ``optimizer``,
    ``grad_reduce_dtype``, ``rank_order``, ``dp_replicate`` and ``grad_sync`` are also the engine's
    :class:`TrainingSetup` (which prices them): the engine sets them from the setup on every plan
    it returns (:meth:`TrainingSetup.plan_options`) and refuses a plan that disagrees with it.

    Attributes:
        tp, pp, dp: tensor-, pipeline- and data-parallel degrees (1..2**20 each; pp = devices
            per pipeline).
        micro_batch: samples per micro-batch (1..2**20).
        recompute: activation recomputation policy: none | selective | full.
        schedule: pipeline schedule: gpipe | 1f1b | interleaved.
        chunks: model chunks per device (v): >= 2 with the interleaved schedule (which also needs
            pp >= 2), else 1.
        sp: sequence parallelism (Korthikanti et al. 2022, section 4.2.2; needs tp > 1); it
            changes the layer costs, which the caller builds for it.
        zero_stage: ZeRO stage over the dp replicas (Rajbhandari et al. 2020; see
            :mod:`archplace.placement.zero`): 0 none, 1 optimizer state, 2 + gradients, 3 +
            parameters (FSDP).
        dp_overlap: the DP gradient reduction runs bucket by bucket during the last
            micro-batch's backward pass (PyTorch DDP buckets, Li et al., VLDB 2020;
            Megatron-LM's ``--overlap-grad-reduce``); only what is left after the backward pass
            is exposed (:func:`archplace.placement.zero.bucketed_exposed_s`).
        grad_reduce_dtype: dtype of the gradient buffer and of the DP reduction (fp32 | bf16).
        optimizer: optimizer whose state is kept (adam | adam-bf16 | sgd).
        stages: ``(first_layer, last_layer)`` index pairs, inclusive, contiguous from layer 0
            (embedding = layer 0, head = the last). There are ``pp * chunks`` of them: with the
            interleaved schedule they are the model chunks, and chunk c runs on pipeline device
            ``c % pp`` (device j holds chunks j, j + pp, j + 2 pp, ...; Narayanan et al. 2021,
            section 2.2.2); otherwise range j is stage j. None: Megatron-LM's even split of the
            blocks (:func:`archplace.placement.workflow.evaluate` resolves it).
        precision: bf16, or fp8: the linear layers' GEMMs in FP8 as Transformer Engine's
            recipe runs them (:mod:`archplace.cost.precision`); it changes the layer costs,
            which the caller builds for it.
        cp: context-parallel degree (1..2**20): every sample's sequence is split over cp ranks,
            attention by ring attention; a pipeline stage occupies tp * cp devices.
        ep: expert-parallel degree (1..2**20): the routed experts of every MoE layer are sharded
            over ep ranks folded, with the expert-TP width etp, into a stage's tp * cp * dp ranks
            (etp * ep divides tp * cp * dp, as Megatron-Core requires); it does not change the
            device count.
        rank_order: how the parallel groups are laid over the ranks (:class:`RankOrder`):
            tp-cp-ep-pp-dp (default) | tp-cp-ep-dp-pp; it decides the links, which the engine
            prices through ``TrainingSetup.rank_order``.
        etp: expert-tensor-parallel width (1..2**20): every routed expert's weights are split
            over etp ranks (Megatron-Core's ``expert_tensor_parallel_size``; its expert groups
            fold etp * ep * edp = tp * cp * dp ranks of a stage); 1 for dense models. It changes
            the layer costs and the expert-data-parallel group the routed experts' gradients and
            ZeRO shards use (edp = tp * cp * dp / (etp * ep) ranks, :mod:`archplace.placement.layout`).
        dp_replicate: hybrid sharding (HSDP; PyTorch FSDP's HYBRID_SHARD, TorchTitan's
            ``data_parallel_replicate_degree``): the dp ranks (with CP, the dp * cp ranks) form
            dp_replicate replicas; ZeRO shards the model state over the dp * cp / dp_replicate
            ranks of each and the replicas all-reduce their gradient shards once per iteration
            (:mod:`archplace.placement.layout`, :mod:`archplace.placement.zero`); 1 (default):
            ZeRO over the whole DP x CP group. Divides dp and needs zero_stage >= 1.
        grad_sync: when the DP gradient reduction runs (:class:`GradSync`,
            :mod:`archplace.placement.zero`): auto (default; stages 0 and 1 once per iteration,
            as Megatron-LM, stages 2 and 3 every micro-batch, as DeepSpeed ZeRO-2 and PyTorch
            FSDP), iteration (gradients accumulated and reduced once; ZeRO-2/3 then hold them
            unsharded) or micro_batch (every micro-batch reduces, DDP without ``no_sync``).
        stage_layers: the layer names of every range of ``stages``, in chain order; set by the
            layer-DAG planner (:func:`archplace.placement.downset_dp.dag_plan`), whose ``stages``
            index a topological order of the DAG's layers. Empty for chain plans.

    Raises:
        ConfigError: a field out of range or unknown (named ``plan.FIELD``, also in the error's
            ``fields``), sp with tp = 1, dp_replicate not dividing dp or with zero_stage 0,
            chunks inconsistent with the schedule, stages that are not ``pp * chunks`` non-empty
            contiguous layer ranges from layer 0, or ``stage_layers`` that do not name every
            layer of the stages. (Whether the stages cover a given chain and the plan fits a
            cluster and batch is checked when it is evaluated.)
    """

    SPARSE: ClassVar[tuple[str, ...]] = ("dp_replicate", "grad_reduce_dtype", "optimizer", "grad_sync")
    """Fields :meth:`to_dict` writes only when not at their defaults (so that a plan's JSON form
    is unchanged by options added later)."""

    tp: int = option(help="Tensor-parallel width", low=1, high=limits.MAX_DEVICES)
    pp: int = option(help="Pipeline stages (devices per pipeline)", low=1, high=limits.MAX_DEVICES)
    dp: int = option(help="Data-parallel degree (pipeline replicas)", low=1, high=limits.MAX_DEVICES)
    micro_batch: int = option(help="Samples per micro-batch", low=1, high=limits.MAX_MICRO_BATCH)
    recompute: Recompute = option(Recompute.NONE, help=(
        "Activation recomputation: none, selective (the attention core) or full (the whole layer)"))
    schedule: PipelineSchedule = option(PipelineSchedule.ONE_F_ONE_B, help=(
        "Pipeline schedule: gpipe, 1f1b, interleaved (1F1B over several model chunks per device) or "
        "dualpipe (DeepSeek-V3's bidirectional schedule; evaluate only)"))
    chunks: int = option(1, help="Model chunks per device (interleaved)", low=1, high=limits.MAX_DEVICES)
    sp: bool = option(False, help="Sequence parallelism (needs tp > 1)")
    zero_stage: int = option(0, help="ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + parameters (FSDP)",
                             low=min(ZERO_STAGES), high=max(ZERO_STAGES))
    dp_overlap: bool = option(False, help=(
        "Reduce gradients bucket by bucket during the last backward pass (only what is left after it "
        "is exposed); without it the whole reduction is exposed"))
    grad_reduce_dtype: GradReduceDtype = option(GradReduceDtype.FP32, help=GRAD_HELP)
    optimizer: Optimizer = option(Optimizer.ADAM, help=OPTIMIZER_HELP)
    stages: tuple[tuple[int, int], ...] | None = option(
        None, parse=parse_stages, default_shown="even split of the blocks", low=0, high=limits.MAX_DEVICES,
        help=("Layer ranges [first, last] of the stages, in chain order (on the command line: "
              "0-12,13-25)"))
    precision: Precision = option(Precision.BF16, help=PRECISION_HELP)
    cp: int = option(1, help="Context-parallel degree: each sample's sequence split over CP ranks (ring "
                             "attention)", low=1, high=limits.MAX_DEVICES)
    ep: int = option(1, help="Expert-parallel degree: each MoE layer's routed experts sharded over EP "
                             "ranks of the DP group", low=1, high=limits.MAX_DEVICES)
    rank_order: RankOrder = option(RankOrder.TP_CP_EP_PP_DP, help=RANK_ORDER_HELP)
    etp: int = option(1, help="Expert-tensor-parallel width: each routed expert's weights split over ETP "
                              "ranks (Megatron-Core's expert_tensor_parallel_size; MoE models)",
                      low=1, high=limits.MAX_DEVICES)
    dp_replicate: int = option(1, help=(
        "Hybrid sharding (HSDP): DP replicas, each sharding the ZeRO state over dp*cp/dp_replicate "
        "ranks; they all-reduce gradients once per iteration (divides dp; needs zero_stage >= 1)"),
        low=1, high=limits.MAX_DEVICES)
    grad_sync: GradSync = option(GradSync.AUTO, help=GRAD_SYNC_HELP)
    stage_layers: tuple[tuple[str, ...], ...] = option((), engine=True, help=(
        "Layer names of every stage of a layer-DAG plan (set by the planner, not given)"))

    def __post_init__(self) -> None:
        check_declared(self, "plan.")  # each field from its declaration: type, range, choices
        check_sp(self.sp, self.tp, "plan.")
        check_replicate(self.dp_replicate, dp=self.dp)
        if self.dp_replicate > 1 and self.zero_stage == 0:
            raise ConfigError(f"plan.dp_replicate = {self.dp_replicate} (hybrid sharding) needs "
                              f"plan.zero_stage >= 1: it replicates ZeRO shards, and stage 0 shards nothing",
                              fields=("plan.dp_replicate",))
        if self.schedule is PipelineSchedule.INTERLEAVED:
            if self.chunks < 2 or self.pp < 2:
                raise ConfigError(f"plan.schedule interleaved needs plan.chunks >= 2 and plan.pp >= 2, "
                                  f"got chunks={self.chunks}, pp={self.pp}")
        elif self.chunks != 1:
            raise ConfigError(f"plan.chunks={self.chunks} needs plan.schedule interleaved, "
                              f"not {self.schedule.value}")
        if self.schedule is PipelineSchedule.DUALPIPE and (self.pp < 2 or self.pp % 2):
            raise ConfigError(f"plan.schedule dualpipe needs an even plan.pp >= 2 (each device holds "
                              f"stages j and pp - 1 - j), got pp={self.pp}", fields=("plan.pp",))
        if self.stages is not None:
            store(self, "stages", _stage_ranges(self.stages, self.pp * self.chunks))
        store(self, "stage_layers", _stage_names(self.stage_layers, self.stages))

    @property
    def devices(self) -> int:
        """Devices the plan occupies: tp * cp * pp * dp (ep and etp are folded into tp * cp * dp)."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """:attr:`stages` of a plan that has them (every plan the engine evaluates or returns).

        Raises:
            ConfigError: the stages are not set (None: the even split, not yet resolved).
        """
        if self.stages is None:
            raise ConfigError("plan.stages are not set: the even split is resolved when the plan is "
                              "evaluated (archplace.placement.workflow.evaluate)", fields=("plan.stages",))
        return self.stages

    def to_dict(self) -> dict[str, Any]:
        """JSON form. ``stages`` lists pp * chunks layer ranges in chain order (null: the even
        split) and ``stage_device`` the pipeline device of each (range c runs on device c % pp);
        ``grad_reduce_dtype``, ``optimizer``, ``dp_replicate`` and ``grad_sync`` appear when not
        their defaults, and a DAG plan adds ``stage_layers``, the layer names of every range."""
        out: dict[str, Any] = {
            "tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp, "pp": self.pp, "dp": self.dp,
            "micro_batch": self.micro_batch,
            "recompute": self.recompute.value, "schedule": self.schedule.value,
            "chunks": self.chunks, "sp": self.sp, "zero_stage": self.zero_stage,
            "dp_overlap": self.dp_overlap, "precision": self.precision.value,
            "rank_order": self.rank_order.value,
        }
        for name in self.SPARSE:
            value = getattr(self, name)
            if value != _DEFAULTS[name]:
                out[name] = plain(value)
        if self.stages is None:
            out["stages"] = None
        else:
            out["stages"] = [list(s) for s in self.stages]
            out["stage_device"] = [c % self.pp for c in range(len(self.stages))]
        if self.stage_layers:
            out["stage_layers"] = [list(names) for names in self.stage_layers]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Inverse of :meth:`to_dict`; a missing key takes its default (``stage_device`` is
        derived, so ignored): it reads a plan file's ``plan`` object and the ``plan`` of
        ``plan --json`` alike.

        Raises:
            ConfigError: not a mapping, an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "plan", ignored=("stage_device",)))


_DEFAULTS = {f.name: f.default for f in fields(Plan)}


def _stage_ranges(stages: object, count: int) -> tuple[tuple[int, int], ...]:
    try:
        pairs = [tuple(pair) for pair in stages]  # type: ignore[attr-defined]
    except TypeError:
        pairs = []
    out = []
    for pair in pairs:
        if len(pair) != 2:
            break
        first, last = (limits.whole("plan.stages: layer", integral(x), *bounds(Plan, "stages")) for x in pair)
        out.append((first, last))
    if len(out) != len(pairs) or not out:
        raise ConfigError(f"plan.stages must be [first_layer, last_layer] pairs, got {limits.shown(stages)}",
                          fields=("plan.stages",))
    if len(out) != count:
        raise ConfigError(f"plan.stages must give pp * chunks = {count} layer ranges, got {len(out)}",
                          fields=("plan.stages",))
    expected = 0
    for j, (first, last) in enumerate(out):
        if first != expected:
            raise ConfigError(f"plan.stages: stage {j} starts at layer {first}, expected {expected} "
                              f"(stages must be contiguous from layer 0)", fields=("plan.stages",))
        if last < first:
            raise ConfigError(f"plan.stages: stage {j} is empty (layers {first}..{last})",
                              fields=("plan.stages",))
        expected = last + 1
    return tuple(out)


def _stage_names(stage_layers: object,
                 stages: tuple[tuple[int, int], ...] | None) -> tuple[tuple[str, ...], ...]:
    if not stage_layers:
        return ()
    try:
        names = tuple(tuple(str(name) for name in stage) for stage in stage_layers)  # type: ignore[attr-defined]
    except TypeError:
        raise ConfigError(f"plan.stage_layers must be lists of layer names, got {limits.shown(stage_layers)}",
                          fields=("plan.stage_layers",)) from None
    sizes = [last - first + 1 for first, last in stages or ()]
    if [len(stage) for stage in names] != sizes:
        raise ConfigError(f"plan.stage_layers must name the {sizes} layers of the stages, "
                          f"got {[len(stage) for stage in names]} names", fields=("plan.stage_layers",))
    return names
