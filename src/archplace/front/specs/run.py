"""What is trained, on which chip, on how many: :class:`ModelSpec`, :class:`HardwareSpec`,
:class:`ClusterSpec`.

Specs hold names and numbers only; :mod:`archplace.front.app` resolves them to the loaded model,
the accelerator and the cluster links. Each checks its fields when built and refuses a bad
one with a :class:`~archplace.base.errors.ConfigError` that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from archplace.base import limits
from archplace.base.fields import FlatSpec, check_declared, text
from archplace.base.options import option
from archplace.workload.options import Tracing


@dataclass(frozen=True)
class _TrainedModel:
    """The first option group of a model spec: which model, and how long a sample is (a group of
    its own so that the model comes first, before the tracing options, in ``--help`` and files)."""

    model: str = option(help="Model preset or path of an HF config.json")
    seq_len: int | None = option(None, help="Tokens per sample", default_shown="model's context",
                                  low=1, high=limits.MAX_SEQ_LEN)


@dataclass(frozen=True)
class ModelSpec(FlatSpec, Tracing, _TrainedModel):
    """The model to train and how its graphs are traced: the model and the tracing options
    (:class:`~archplace.workload.options.Tracing`, declared once there, keyword-only).

    Attributes:
        model: a bundled model preset name or the path of a Hugging Face ``config.json``.
        seq_len: tokens per sample; None for the model's context length.
        attention, kernels, fuse, capacity_factor, expert_load_imbalance: as in
            :class:`~archplace.workload.options.Tracing`; a dense model takes only 1.0 for the
            last two (:func:`archplace.front.app.load_model` refuses another value).

    Raises:
        ConfigError: an empty model, ``seq_len`` outside 1..2**20, an unknown attention or
            kernels value, a ``fuse`` that is not a bool, a capacity factor or load imbalance
            that is not a finite number from 1 to 1024 (the field named).
    """

    OWNER: ClassVar[str] = "model spec"

    def __post_init__(self) -> None:
        text(self.model, "model", "a model preset name or the path of an HF config.json")
        check_declared(self, spec=ModelSpec)


@dataclass(frozen=True)
class HardwareSpec(FlatSpec):
    """The chip, and the links between chips.

    Attributes:
        hardware: a bundled hardware preset name or the path of a hardware YAML file.
        cluster: the preset or YAML whose ``cluster`` section gives the links; None for
            ``hardware``'s own.
        attention_kernel: the fused-attention kernel family whose measured table costs the
            attention operators (``flash2``, ``flash3``, ``cudnn``, ``triton-flash1``;
            :mod:`archplace.cost.attention_tables`); None: the chip's own.
        tp_comm_overlap: whether the framework hides the tensor-parallel collectives behind
            the GEMMs next to them (Transformer Engine's userbuffers overlap,
            :mod:`archplace.placement.tp_overlap`); None: the chip's own (off unless its file
            says otherwise).
        pp_comm_overlap: whether the framework overlaps the interleaved schedule's pipeline
            sends with the next chunk's computation (Megatron-Core's ``overlap_p2p_comm``);
            None: the chip's own (off unless its file says otherwise).
        ep_comm_overlap: whether the framework hides one micro-batch's expert-parallel
            all-to-alls behind another's computation (Megatron-Core's
            ``overlap_moe_expert_parallel_comm``, :mod:`archplace.placement.ep_overlap`);
            None: the chip's own (off unless its file says otherwise).

    Raises:
        ConfigError: an empty name, a ``tp_comm_overlap``, ``pp_comm_overlap`` or
            ``ep_comm_overlap`` that is not true or false.
    """

    OWNER: ClassVar[str] = "hardware spec"
    hardware: str = option(help="Hardware preset or YAML file (with cluster links)")
    cluster: str | None = option(None, default_shown="--hardware's own", help=(
        "Hardware or cluster preset, or YAML file, whose cluster section gives the links"))
    attention_kernel: str | None = option(None, metavar="FAMILY", default_shown="the chip's own: flash2 on "
                                          "a100-80gb and h100-80gb", help=(
        "Measured fused-attention kernel whose per-shape table costs attention on a known chip: "
        "flash2, flash3, cudnn or triton-flash1, where a table exists for the chip"))
    tp_comm_overlap: bool | None = option(None, default_shown="the chip's own: off", help=(
        "The framework hides the TP collectives behind the GEMMs next to them (Transformer Engine's "
        "userbuffers overlap, NeMo's tp_comm_overlap)"))
    pp_comm_overlap: bool | None = option(None, default_shown="the chip's own: off", help=(
        "An interleaved plan's pipeline sends overlap the next chunk's computation (Megatron-Core's "
        "overlap_p2p_comm)"))
    ep_comm_overlap: bool | None = option(None, default_shown="the chip's own: off", help=(
        "A mixture-of-experts plan hides one micro-batch's expert all-to-alls behind another "
        "micro-batch's computation (Megatron-Core's overlap_moe_expert_parallel_comm)"))

    def __post_init__(self) -> None:
        text(self.hardware, "hardware", "a hardware preset name or the path of a hardware YAML file")
        check_declared(self, spec=HardwareSpec)
        if self.attention_kernel is not None:
            text(self.attention_kernel, "attention_kernel", "an attention kernel family such as flash2")
        if self.cluster is not None:
            text(self.cluster, "cluster", "a hardware preset name or the path of a hardware YAML file")

    @property
    def links(self) -> str:
        """The preset or file whose cluster links are used."""
        return self.cluster if self.cluster is not None else self.hardware



@dataclass(frozen=True)
class ClusterSpec(FlatSpec):
    """The cluster and the work of one training iteration.

    Attributes:
        devices: accelerators in the cluster, 1..2**20.
        global_batch: samples per iteration, 1..2**30.

    Raises:
        ConfigError: a size out of range (:mod:`archplace.base.limits`).
    """

    OWNER: ClassVar[str] = "cluster spec"
    devices: int = option(help="Accelerators in the cluster", low=1, high=limits.MAX_DEVICES)
    global_batch: int = option(help="Samples per iteration", low=1, high=limits.MAX_GLOBAL_BATCH)

    def __post_init__(self) -> None:
        check_declared(self, spec=ClusterSpec)

