"""The plan options' choices: recompute policies, pipeline schedules, optimizers, gradient
dtypes and synchronisation, rank orders, the ZeRO stages and the default micro-batch sizes,
with their tie-break orders."""

from __future__ import annotations

import enum
import numbers

from archplace.base.errors import ConfigError


class Recompute(enum.StrEnum):
    """Activation recomputation policy (Korthikanti et al. 2022, sections 4.1 and 5).

    NONE keeps every activation the backward pass needs; SELECTIVE reruns the traced recompute
    modules (:class:`~archplace.workload.options.RecomputeModule`, Megatron-Core's
    ``--recompute-modules``; by default the attention core: scores, softmax, attention dropout)
    and drops what they save; FULL keeps only each layer's input and reruns the layer's forward
    pass before its backward pass.
    """

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class PipelineSchedule(enum.StrEnum):
    """Pipeline schedule (Narayanan et al., SC 2021, section 2.2).

    GPIPE runs every forward pass before any backward pass (Huang et al. 2019); ONE_F_ONE_B is
    PipeDream-Flush (one forward, one backward in the steady state); INTERLEAVED is 1F1B over v
    model chunks per device; DUALPIPE is DeepSeek-V3's bidirectional schedule (each device
    holds stages j and pp - 1 - j and overlaps one micro-batch's forward chunk with another's
    backward chunk: :mod:`archplace.placement.dualpipe`).
    """

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    DUALPIPE = "dualpipe"


class Optimizer(enum.StrEnum):
    """Optimizer whose state the devices keep (see :mod:`archplace.placement.memory`).

    ADAM: AdamW with fp32 master weights and fp32 first and second moments (12 B a parameter).
    ADAM_BF16: AdamW with fp32 master weights and bf16 moments (8 B a parameter): DeepSeek-V3's
        "low-precision optimizer states" (DeepSeek-V3 technical report, arXiv:2412.19437, sec.
        3.3.3: "we adopt the BF16 data format instead of FP32 to track the first and second
        moments in the AdamW optimizer"), Megatron-Core's precision-aware optimizer with
        ``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`` (NVIDIA/Megatron-LM @ d98e8a64dd,
        ``megatron/training/arguments.py``).
    SGD: SGD with momentum, fp32 master weights and momentum (8 B a parameter).
    """

    ADAM = "adam"
    ADAM_BF16 = "adam-bf16"
    SGD = "sgd"


class GradReduceDtype(enum.StrEnum):
    """Data type of the gradient buffer and of the DP gradient reduction.

    FP32 is Megatron-LM's bf16 recipe: its argument parser forces
    ``accumulate_allreduce_grads_in_fp32 = True`` when ``--bf16`` is given ("bfloat16 requires
    gradient accumulation and all-reduce to be done in fp32", ``megatron/training/arguments.py``),
    so the main-grads buffer and the all-reduce / reduce-scatter are fp32 (4 B per parameter).
    BF16 is the opt-out (``--grad-reduce-in-bf16`` in recent Megatron-LM): a bf16 buffer and
    reduction, 2 B per parameter.
    """

    FP32 = "fp32"
    BF16 = "bf16"

    @property
    def bytes(self) -> int:
        """Bytes per element: 4 (fp32) or 2 (bf16)."""
        return 4 if self is GradReduceDtype.FP32 else 2


class GradSync(enum.StrEnum):
    """When the data-parallel gradient reduction runs (:mod:`archplace.placement.zero`).

    AUTO is each ZeRO stage's framework default. Stages 0 and 1 accumulate the gradients locally
    and reduce them once per iteration, during the last micro-batch's backward pass
    (Megatron-LM's DDP and distributed optimizer: ``megatron/core/pipeline_parallel/schedules.py``
    runs every micro-batch but the last inside ``config.no_sync_func``, "Run computation for last
    microbatch out of context handler (want to synchronize gradients)", NVIDIA/Megatron-LM @
    d98e8a64dd). Stages 2 and 3 reduce every micro-batch: DeepSpeed's ZeRO-2 reduces each
    micro-batch's gradients into their partitions (``reduce_ready_partitions_and_remove_grads``
    runs when ``self.partition_gradients or self.is_gradient_accumulation_boundary``, and
    ``engine.no_sync`` asserts "no_sync context manager is incompatible with gradient
    partitioning logic of ZeRO stage 2/3", microsoft/DeepSpeed @ 38327e07f6), and PyTorch FSDP
    reduce-scatters every backward pass unless ``no_sync()`` (FSDP2:
    ``set_requires_gradient_sync(False)``) is used.

    ITERATION accumulates the gradients over the micro-batches and reduces them once: at stages 2
    and 3 the accumulated gradients are then held unsharded (FSDP's ``no_sync``: "FSDP will
    accumulate the full model gradients (instead of gradient shards) until the eventual sync",
    ``torch/distributed/fsdp/fully_sharded_data_parallel.py``, pytorch/pytorch @ 005df1d67c).
    MICRO_BATCH reduces every micro-batch's gradients (stages 0 and 1: DDP without ``no_sync``).
    At stages 0 and 1 ITERATION is AUTO; at stages 2 and 3 MICRO_BATCH is.
    """

    AUTO = "auto"
    ITERATION = "iteration"
    MICRO_BATCH = "micro_batch"


class RankOrder(enum.StrEnum):
    """Order in which the parallel dimensions are laid over the device ranks, fastest-varying
    first (Megatron-Core's ``order`` argument of ``initialize_model_parallel``, built by its
    ``RankGenerator`` in ``megatron/core/parallel_state.py``).

    TP_CP_EP_PP_DP ("tp-cp-ep-pp-dp", archplace's default, its layout before context and expert
    parallelism): pipeline neighbours are tp * cp ranks apart and the replicas outermost.
    TP_CP_EP_DP_PP ("tp-cp-ep-dp-pp", Megatron-Core's default): the data-parallel replicas sit
    inside a pipeline stage's block of tp * cp * dp consecutive ranks and pipeline neighbours are
    tp * cp * dp ranks apart. TP, CP and EP groups are the same in both orders; the order decides
    the links of the pipeline sends and of the DP x CP and expert-data-parallel reductions
    (:mod:`archplace.placement.layout`).
    """

    TP_CP_EP_PP_DP = "tp-cp-ep-pp-dp"
    TP_CP_EP_DP_PP = "tp-cp-ep-dp-pp"


MICRO_BATCHES = (1, 2, 4, 8)
"""Micro-batch sizes ``plan`` and ``search`` try unless told otherwise (the one definition)."""

ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO stages (Rajbhandari et al., SC 2020, Fig. 1): 0 none, 1 optimizer state (P_os), 2 +
gradients (P_os+g), 3 + parameters (P_os+g+p; PyTorch FSDP's FULL_SHARD, Zhao et al., VLDB
2023)."""


def check_zero_stage(value: object, owner: str = "plan") -> int:
    """``value`` as a ZeRO stage 0..3.

    Raises:
        ConfigError: not an integer in 0..3 (bools are refused).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) not in ZERO_STAGES:
        raise ConfigError(f"{owner}: zero_stage must be 0, 1, 2 or 3, got {value!r}")
    return int(value)


RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
"""Tie-break order of recompute policies (less recomputation first)."""

SEARCHED_SCHEDULES = (PipelineSchedule.GPIPE, PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED)
"""The schedules the plan search tries by default (DualPipe is priced for given plans only)."""

SCHEDULE_ORDER = (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED, PipelineSchedule.GPIPE,
                  PipelineSchedule.DUALPIPE)
"""Tie-break order of schedules (1F1B first: it needs no more memory than GPipe at the same time)."""
