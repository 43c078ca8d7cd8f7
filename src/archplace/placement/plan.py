"""Value objects of the placement stage: the cost key, the fixed side of a problem
(:class:`TrainingSetup`) and a parallel plan (:class:`Plan`). The options' choices live in
:mod:`archplace.placement.choices` and layer costs in :mod:`archplace.placement.layer_cost`;
both are re-exported here."""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Any, NamedTuple

from archplace.cost.precision import Precision
from archplace.errors import ConfigError
from archplace.hw.cluster import Cluster
from archplace.placement.choices import (
    MICRO_BATCHES,
    RECOMPUTE_ORDER,
    SCHEDULE_ORDER,
    ZERO_STAGES,
    GradReduceDtype,
    Optimizer,
    PipelineSchedule,
    RankOrder,
    Recompute,
    check_zero_stage,
)
from archplace.placement.interference import NO_INTERFERENCE, Interference
from archplace.placement.layer_cost import LayerCost

__all__ = ["MICRO_BATCHES", "RECOMPUTE_ORDER", "SCHEDULE_ORDER", "ZERO_STAGES", "CostKey", "GradReduceDtype",
           "LayerCost", "Optimizer", "PipelineSchedule", "Plan", "RankOrder", "Recompute", "TrainingSetup",
           "check_replicate", "check_zero_stage"]


def _positive_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ConfigError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


def check_replicate(replicate: object, *, dp: int, owner: str = "plan") -> int:
    """``replicate`` as an int, the hybrid-sharding replicas of a plan with ``dp`` data-parallel
    ranks.

    Raises:
        ConfigError: not a positive integer dividing dp.
    """
    if isinstance(replicate, bool) or not isinstance(replicate, numbers.Integral) or int(replicate) < 1:
        raise ConfigError(f"{owner}: dp_replicate must be a positive integer, got {replicate!r}")
    if dp % int(replicate):
        raise ConfigError(f"{owner}: dp_replicate = {replicate} must divide dp = {dp} (the data-parallel "
                          f"ranks are split into dp_replicate replicas of dp/dp_replicate shards)")
    return int(replicate)


class CostKey(NamedTuple):
    """The layer costs of one TP width, micro-batch size, SP flag, CP degree, EP degree and
    expert-TP width.

    A plain ``(tp, micro_batch, sp)`` tuple equals ``CostKey(tp, micro_batch, sp)`` only when
    built through this class (the defaults fill cp = ep = etp = 1); build keys with it.

    Attributes:
        tp: tensor-parallel width.
        micro_batch: samples per micro-batch.
        sp: sequence parallelism (Korthikanti et al. 2022, section 4.2.2).
        cp: context-parallel degree: the sequence split over cp ranks (ring attention).
        ep: expert-parallel degree: the experts of every MoE layer sharded over ep ranks.
        etp: expert-tensor-parallel width: every routed expert's weights split over etp ranks
            (Megatron-Core's ``expert_tensor_parallel_size``); 1 for dense models.
    """

    tp: int
    micro_batch: int
    sp: bool
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @classmethod
    def of(cls, key: tuple[Any, ...]) -> CostKey:
        """``key`` as a CostKey: a ``(tp, micro_batch, sp)``, ``(tp, micro_batch, sp, cp, ep)`` or
        ``(tp, micro_batch, sp, cp, ep, etp)`` tuple of integers.

        Raises:
            ConfigError: another length or a non-integer degree.
        """
        if isinstance(key, cls):
            return key
        try:
            if len(key) not in (3, 5, 6):
                raise ValueError
            tp, micro_batch, sp, *rest = key
            return cls(operator.index(tp), operator.index(micro_batch), bool(sp),
                       *(operator.index(x) for x in rest))
        except (TypeError, ValueError):
            raise ConfigError(f"costs keys must be (tp, micro_batch, sp[, cp, ep[, etp]]), "
                              f"got {key!r}") from None



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
            pipeline (rounded up to a multiple of pp for the interleaved schedule) are run and
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

    Raises:
        ConfigError: a non-positive field, an unknown optimizer or rank order, an
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

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (buffer and reduction): 4 (fp32) or 2 (bf16)."""
        return self.grad_reduce_dtype.bytes

    @property
    def step_bandwidth_bytes_per_s(self) -> float:
        """HBM bandwidth the optimizer step streams at: datasheet x ``hbm_fraction``."""
        return self.hbm_bandwidth_bytes_per_s * self.hbm_fraction


@dataclass(frozen=True, slots=True)
class Plan:
    """A parallel plan.

    Attributes:
        tp, pp, dp: tensor-, pipeline- and data-parallel degrees (pp = devices per pipeline).
        micro_batch: samples per micro-batch.
        recompute: activation recomputation policy.
        stages: ``(first_layer, last_layer)`` index pairs, inclusive, contiguous, covering the
            chain in order. There are ``pp * chunks`` of them: with the interleaved schedule
            they are the model chunks, and chunk c runs on pipeline device ``c % pp`` (device j
            holds chunks j, j + pp, j + 2 pp, ...; Narayanan et al. 2021, section 2.2.2);
            otherwise chunks = 1 and range j is stage j.
        schedule: pipeline schedule.
        chunks: model chunks per device (v); >= 2 with INTERLEAVED, else 1.
        sp: sequence parallelism (Korthikanti et al. 2022, section 4.2.2); it changes the layer
            costs, which the caller builds for it, and is recorded here.
        zero_stage: ZeRO stage over the dp replicas (Rajbhandari et al. 2020; see
            :mod:`archplace.placement.zero`): 0 none, 1 optimizer state, 2 + gradients, 3 +
            parameters (FSDP). ``from_dict`` reads the older ``"zero": true`` as stage 1.
        dp_overlap: the DP gradient reduction runs bucket by bucket during the last
            micro-batch's backward pass (PyTorch DDP buckets, Li et al., VLDB 2020;
            Megatron-LM's ``--overlap-grad-reduce``); only what is left after the backward pass
            is exposed (:func:`archplace.placement.zero.bucketed_exposed_s`).
        stage_layers: optional layer names of every range of ``stages``, in chain order; set by
            the layer-DAG planner (:func:`archplace.placement.downset_dp.dag_plan`), whose ``stages``
            index a topological order of the DAG's layers, so that the plan names its layers.
            Empty for chain plans.
        precision: bf16, or fp8: the linear layers' GEMMs in FP8 as Transformer Engine's
            recipe runs them (:mod:`archplace.cost.precision`); it changes the layer costs,
            which the caller builds for it, and is recorded here.
        cp: context-parallel degree: every sample's sequence is split over cp ranks, attention
            by ring attention; a pipeline stage occupies tp * cp devices.
        ep: expert-parallel degree: the routed experts of every MoE layer are sharded over ep
            ranks folded, with the expert-TP width etp, into a stage's tp * cp * dp ranks (etp * ep
            divides tp * cp * dp, as Megatron-Core requires); it does not change the device count.
        rank_order: how the parallel groups are laid over the ranks (:class:`RankOrder`; a
            member or its value); it decides the links, which the caller prices through
            ``TrainingSetup.rank_order``, and is recorded here (the engine sets it to the
            setup's order on every plan it returns).
        etp: expert-tensor-parallel width: every routed expert's weights are split over etp
            ranks (Megatron-Core's ``expert_tensor_parallel_size``; its expert groups fold
            etp * ep * edp = tp * cp * dp ranks of a stage); 1 for dense models. It changes the
            layer costs, which the caller builds for it, and the expert-data-parallel group the
            routed experts' gradients and ZeRO shards use (edp = tp * cp * dp / (etp * ep) ranks,
            :mod:`archplace.placement.layout`).
        dp_replicate: hybrid sharding (HSDP): the dp ranks (with CP, the dp * cp ranks) are split
            into dp_replicate replicas; ZeRO shards the model state over the dp * cp / dp_replicate
            ranks of each replica and the replicas all-reduce their gradient shards once per
            iteration (:mod:`archplace.placement.layout`, :mod:`archplace.placement.zero`); 1
            (default): ZeRO over the whole DP x CP group. Needs zero_stage >= 1 and divides dp.

    Raises:
        ConfigError: a degree, micro-batch or chunk count that is not a positive integer, an
            unknown recompute policy, schedule, precision or rank order, chunks inconsistent with the schedule
            (interleaving also needs pp >= 2), ``len(stages) != pp * chunks``, or stages that do
            not start at layer 0, are empty or are not contiguous, or ``stage_layers`` that do
            not give one name per layer of every range. (Whether the stages cover a
            given chain and the plan fits a cluster and batch is checked by ``evaluate_plan``.)
    """

    tp: int
    pp: int
    dp: int
    micro_batch: int
    recompute: Recompute
    stages: tuple[tuple[int, int], ...]
    schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    chunks: int = 1
    sp: bool = False
    zero_stage: int = 0
    dp_overlap: bool = False
    stage_layers: tuple[tuple[str, ...], ...] = ()
    precision: Precision = Precision.BF16
    cp: int = 1
    ep: int = 1
    rank_order: RankOrder = RankOrder.TP_CP_EP_PP_DP
    etp: int = 1
    dp_replicate: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch", "chunks", "cp", "ep", "etp"):
            object.__setattr__(self, name, _positive_int("plan", name, getattr(self, name)))
        object.__setattr__(self, "dp_replicate", check_replicate(self.dp_replicate, dp=self.dp))
        try:
            object.__setattr__(self, "rank_order", RankOrder(self.rank_order))
        except ValueError:
            raise ConfigError(f"plan: unknown rank_order {self.rank_order!r}; choose from: "
                              f"{', '.join(o.value for o in RankOrder)}") from None
        try:
            object.__setattr__(self, "precision", Precision(self.precision))
        except ValueError:
            raise ConfigError(f"plan: unknown precision {self.precision!r}; choose from: "
                              f"{', '.join(p.value for p in Precision)}") from None
        try:
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        except ValueError:
            raise ConfigError(f"plan: unknown recompute policy {self.recompute!r}") from None
        try:
            object.__setattr__(self, "schedule", PipelineSchedule(self.schedule))
        except ValueError:
            raise ConfigError(f"plan: unknown pipeline schedule {self.schedule!r}") from None
        object.__setattr__(self, "zero_stage", check_zero_stage(self.zero_stage))
        if self.dp_replicate > 1 and self.zero_stage == 0:
            raise ConfigError(f"plan: dp_replicate = {self.dp_replicate} (hybrid sharding) needs zero_stage "
                              f">= 1: it replicates ZeRO shards, and stage 0 shards nothing")
        for name in ("sp", "dp_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"plan: {name} must be a bool, got {getattr(self, name)!r}")
        if self.schedule is PipelineSchedule.INTERLEAVED:
            if self.chunks < 2 or self.pp < 2:
                raise ConfigError(f"plan: the interleaved schedule needs chunks >= 2 and pp >= 2, "
                                  f"got chunks={self.chunks}, pp={self.pp}")
        elif self.chunks != 1:
            raise ConfigError(f"plan: chunks={self.chunks} needs the interleaved schedule, "
                              f"not {self.schedule.value}")
        try:
            stages = tuple((int(first), int(last)) for first, last in self.stages)
        except (TypeError, ValueError):
            raise ConfigError(f"plan: stages must be (first_layer, last_layer) pairs, "
                              f"got {self.stages!r}") from None
        object.__setattr__(self, "stages", stages)
        if len(stages) != self.pp * self.chunks:
            raise ConfigError(f"plan: pp={self.pp} and chunks={self.chunks} need "
                              f"{self.pp * self.chunks} stages but {len(stages)} stages are given")
        expected = 0
        for j, (first, last) in enumerate(stages):
            if first != expected:
                raise ConfigError(f"plan: stage {j} starts at layer {first}, expected {expected} "
                                  f"(stages must be contiguous from layer 0)")
            if last < first:
                raise ConfigError(f"plan: stage {j} is empty (layers {first}..{last})")
            expected = last + 1
        if self.stage_layers:
            try:
                names = tuple(tuple(str(name) for name in stage) for stage in self.stage_layers)
            except TypeError:
                raise ConfigError(f"plan: stage_layers must be lists of layer names, "
                                  f"got {self.stage_layers!r}") from None
            object.__setattr__(self, "stage_layers", names)
            sizes = [last - first + 1 for first, last in stages]
            if [len(stage) for stage in names] != sizes:
                raise ConfigError(f"plan: stage_layers must name the {sizes} layers of the stages, "
                                  f"got {[len(stage) for stage in names]} names")
        else:
            object.__setattr__(self, "stage_layers", ())

    @property
    def devices(self) -> int:
        """Devices the plan occupies: tp * cp * pp * dp (ep and etp are folded into tp * cp * dp)."""
        return self.tp * self.cp * self.pp * self.dp

    def to_dict(self) -> dict[str, Any]:
        """JSON form. ``stages`` lists pp * chunks layer ranges in chain order and
        ``stage_device`` the pipeline device of each (range c runs on device c % pp); a DAG
        plan adds ``stage_layers``, the layer names of every range."""
        out: dict[str, Any] = {
            "tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp, "pp": self.pp, "dp": self.dp,
            "micro_batch": self.micro_batch,
            "recompute": self.recompute.value, "schedule": self.schedule.value,
            "chunks": self.chunks, "sp": self.sp, "zero_stage": self.zero_stage,
            "dp_overlap": self.dp_overlap, "precision": self.precision.value,
            "rank_order": self.rank_order.value,
            **({"dp_replicate": self.dp_replicate} if self.dp_replicate > 1 else {}),
            "stages": [list(s) for s in self.stages],
            "stage_device": [c % self.pp for c in range(len(self.stages))],
        }
        if self.stage_layers:
            out["stage_layers"] = [list(names) for names in self.stage_layers]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Inverse of :meth:`to_dict` (``stage_device`` is derived, so ignored; a missing
        ``precision`` is bf16, a missing ``cp``, ``ep``, ``etp`` or ``dp_replicate`` 1, a missing
        ``rank_order`` tp-cp-ep-pp-dp).

        Raises:
            ConfigError: a missing or invalid field.
        """
        stage = data.get("zero_stage", 1 if data.get("zero", False) is True else 0)
        try:
            return cls(tp=int(data["tp"]), pp=int(data["pp"]), dp=int(data["dp"]),
                       micro_batch=int(data["micro_batch"]), recompute=Recompute(data["recompute"]),
                       stages=tuple((int(a), int(b)) for a, b in data["stages"]),
                       schedule=PipelineSchedule(data.get("schedule", "1f1b")),
                       chunks=int(data.get("chunks", 1)), sp=bool(data.get("sp", False)),
                       zero_stage=stage, dp_overlap=bool(data.get("dp_overlap", False)),
                       stage_layers=tuple(tuple(names) for names in data.get("stage_layers", ())),
                       precision=Precision(data.get("precision", Precision.BF16.value)),
                       cp=int(data.get("cp", 1)), ep=int(data.get("ep", 1)),
                       rank_order=data.get("rank_order", RankOrder.TP_CP_EP_PP_DP.value),
                       etp=int(data.get("etp", 1)), dp_replicate=int(data.get("dp_replicate", 1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid plan {data!r}: {exc}") from None
