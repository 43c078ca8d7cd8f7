"""How the traced model's kernels run: the attention implementation and kernel fusion.

These choices change both the time of a layer and the activations it saves, so they are part
of every workload (graph extraction, its cache key, and every command that traces a model).
"""

from __future__ import annotations

import enum
from typing import TypeVar

from archplace.base.errors import ConfigError


class Attention(enum.StrEnum):
    """Attention implementation a layer is traced and costed with.

    EAGER: Hugging Face's explicit code: the s x s scores, mask, softmax (fp32) and dropout as
        separate memory-bound operators, each saving its output for the backward pass (how
        PHAZE traced models).
    SDPA: one fused attention operator per direction, IO-aware like FlashAttention but
        computing every score block: PyTorch's scaled_dot_product_attention given an explicit
        attention mask (a padding or document mask), which its memory-efficient kernel applies
        element by element instead of skipping blocks. Without a mask, PyTorch on A100/H100
        dispatches ``is_causal=True`` to its FlashAttention-2 backend: choose FLASH for that.
    FLASH: FlashAttention-2 (Dao 2023): one fused operator per direction, causal blocks
        skipped, scores recomputed in the backward pass, only the output and the log-sum-exp
        saved. The default for training.
    """

    EAGER = "eager"
    SDPA = "sdpa"
    FLASH = "flash"


class Kernels(enum.StrEnum):
    """Element-wise kernel fusion.

    FUSED: as Megatron-LM trains: bias+GeLU, bias+dropout+add, fused layer norm / RMSNorm,
        masked softmax and fused cross-entropy, each one kernel that saves only what its
        backward needs. The default for training.
    UNFUSED: the Hugging Face model code's operators one by one, as traced.
    """

    FUSED = "fused"
    UNFUSED = "unfused"


_E = TypeVar("_E", Attention, Kernels)


def parse_attention(value: Attention | str) -> Attention:
    """``value`` as an :class:`Attention` (a member or its name, any case).

    Raises:
        ConfigError: naming the choices.
    """
    return _parse(Attention, value, "attention")


def parse_kernels(value: Kernels | str) -> Kernels:
    """``value`` as a :class:`Kernels` (a member or its name, any case).

    Raises:
        ConfigError: naming the choices.
    """
    return _parse(Kernels, value, "kernels")


def _parse(enum_type: type[_E], value: object, field: str) -> _E:
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        for member in enum_type:
            if member.value == value.strip().lower():
                return member
    choices = ", ".join(m.value for m in enum_type)
    raise ConfigError(f"{field} must be one of {choices}, got {value!r}")
