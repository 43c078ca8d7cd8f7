"""What is trained, on which chip, on how many: :class:`ModelSpec`, :class:`HardwareSpec`,
:class:`ClusterSpec`.

Specs hold names and numbers only; :mod:`archplace.app` resolves them to the loaded model,
the accelerator and the cluster links. Each checks its fields when built and refuses a bad
one with a :class:`~archplace.errors.ConfigError` that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archplace import limits
from archplace.specs._fields import as_dict, check_keys, flag, member, store, text
from archplace.workload.options import Attention, Kernels


@dataclass(frozen=True)
class ModelSpec:
    """The model to train and how its graphs are traced.

    Attributes:
        model: a bundled model preset name or the path of a Hugging Face ``config.json``.
        seq_len: tokens per sample; None for the model's context length.
        attention: how attention runs (eager | sdpa | flash; a member or its name).
        kernels: element-wise kernels fused (Megatron-LM) or unfused (HF's operators).
        fuse: also fold every element-wise operator into the matmul producing its input.

    Raises:
        ConfigError: an empty model, ``seq_len`` outside 1..2**20, an unknown attention or
            kernels value, a ``fuse`` that is not a bool.
    """

    model: str
    seq_len: int | None = None
    attention: Attention = Attention.FLASH
    kernels: Kernels = Kernels.FUSED
    fuse: bool = False

    def __post_init__(self) -> None:
        text(self.model, "model", "a model preset name or the path of an HF config.json")
        limits.optional_whole("seq_len", self.seq_len, 1, limits.MAX_SEQ_LEN)
        store(self, "attention", member(Attention, self.attention, "attention"))
        store(self, "kernels", member(Kernels, self.kernels, "kernels"))
        flag(self.fuse, "fuse")

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"model", "seq_len", "attention", "kernels", "fuse"}``."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "model spec"))


@dataclass(frozen=True)
class HardwareSpec:
    """The chip, and the links between chips.

    Attributes:
        hardware: a bundled hardware preset name or the path of a hardware YAML file.
        cluster: the preset or YAML whose ``cluster`` section gives the links; None for
            ``hardware``'s own.

    Raises:
        ConfigError: an empty name.
    """

    hardware: str
    cluster: str | None = None

    def __post_init__(self) -> None:
        text(self.hardware, "hardware", "a hardware preset name or the path of a hardware YAML file")
        if self.cluster is not None:
            text(self.cluster, "cluster", "a hardware preset name or the path of a hardware YAML file")

    @property
    def links(self) -> str:
        """The preset or file whose cluster links are used."""
        return self.cluster if self.cluster is not None else self.hardware

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"hardware", "cluster"}``."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "hardware spec"))


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster and the work of one training iteration.

    Attributes:
        devices: accelerators in the cluster, 1..2**20.
        global_batch: samples per iteration, 1..2**30.

    Raises:
        ConfigError: a size out of range (:mod:`archplace.limits`).
    """

    devices: int
    global_batch: int

    def __post_init__(self) -> None:
        limits.whole("devices", self.devices, 1, limits.MAX_DEVICES)
        limits.whole("global_batch", self.global_batch, 1, limits.MAX_GLOBAL_BATCH)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"devices", "global_batch"}``."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, "cluster spec"))
