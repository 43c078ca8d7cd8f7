"""How the traced model's kernels run: the attention implementation, kernel fusion and the
routing of mixture-of-experts tokens, declared once as the option group :class:`Tracing`.

These choices change both the time of a layer and the activations it saves, so they are part
of every workload (graph extraction, its cache key, and every command that traces a model).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, TypeVar

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.options import option


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


class RecomputeModule(enum.StrEnum):
    """A part of a block that selective recomputation may rerun (Megatron-Core's
    ``--recompute-modules``, ``TransformerConfig.recompute_modules``, with
    ``--recompute-granularity selective``; NVIDIA/Megatron-LM ``megatron/core/transformer/
    transformer_config.py``; the names and the two kinds of checkpoint as documented there).

    Checkpointed (the module keeps only its inputs; its forward reruns before its backward):

    CORE_ATTN: the attention core. Under eager attention the sequence x sequence tensors
        (scores, softmax, attention dropout), Korthikanti et al. 2022, sec. 5; a fused
        attention kernel (flash, sdpa) saves none, so this frees nothing and reruns nothing
        there. Megatron-Core's default.
    MLP: a dense block's MLP (the block's child module whose class name holds ``MLP``, or
        named ``mlp`` without routed experts).
    MOE: a mixture-of-experts block's whole MoE layer: router, token dispatch and combine
        (the expert-parallel all-to-alls again), routed and shared experts.
    SHARED_EXPERTS: the MoE layer's shared experts (DeepSeek-V3, Qwen2-MoE).

    Output-discarding (checkpointed, and the module's output freed once its reader has run;
    Megatron-Core's ``CheckpointWithoutOutput``):

    MOE_ACT: the routed experts' gated activation (SwiGLU): the input of the second grouped
        GEMM is freed.
    LAYERNORM: the block's two norms before attention and before the MLP
        (``input_layernorm`` and ``pre_mlp_layernorm``): their outputs are freed.
    MLA_UP_PROJ: multi-head latent attention's up projections and rotary embedding (DeepSeek-V3
        technical report, sec. 3.2.3, "recomputation of RMSNorm and MLA up-projection"): the
        queries, keys and values they make for the attention kernel are freed.

    A module a block does not have is skipped (a dense block has no MOE), as Megatron-Core does.
    """

    CORE_ATTN = "core_attn"
    MLP = "mlp"
    MOE = "moe"
    SHARED_EXPERTS = "shared_experts"
    MOE_ACT = "moe_act"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"

    @property
    def discards_output(self) -> bool:
        """Whether the module's output is freed too (output-discarding checkpoint)."""
        return self in (RecomputeModule.MOE_ACT, RecomputeModule.LAYERNORM, RecomputeModule.MLA_UP_PROJ)


class ExpertWeighting(enum.StrEnum):
    """Where a mixture-of-experts layer applies each routed copy's routing weight
    (:mod:`archplace.workload.experts_op`).

    OUTPUT: to the expert's output at the combine, as Hugging Face's MoE blocks do
    (``routed output * routing weight``, summed over the k copies); its backward reads the
    expert outputs, so they are kept for the backward pass, one ``[T k, h]`` tensor a layer.
    ACTIVATION: to the gated activation before the down projection, as Megatron-Core's grouped
    experts do (NVIDIA/Megatron-LM @ d98e8a64dd, ``megatron/core/transformer/moe/experts.py``:
    ``permuted_probs`` passed to the fused MLP as the "Scaled activation", and
    ``weighted_bias_swiglu_impl`` in the unfused path); the combine is a plain sum, and the
    expert outputs are not kept (the activation, ``[T k, I]``, is, for the weight's gradient).
    """

    OUTPUT = "output"
    ACTIVATION = "activation"


class Loss(enum.StrEnum):
    """How the language-model loss (softmax cross-entropy over the vocabulary) runs
    (:func:`archplace.workload.kernels.loss_kernels`; the passes and their bytes per logit in
    :mod:`archplace.workload.loss_traffic`).

    MEGATRON: Megatron-LM's vocabulary-parallel cross-entropy as written, unfused: the logits
        upcast to float32 and the loss worked in that one buffer, pass by pass (maximum,
        in-place subtraction, ``exp``, sum, division), the softmax kept for the backward pass (4
        bytes per logit), which scales it in place and casts it back (NVIDIA/Megatron-LM @
        core_v0.8.0 ``megatron/core/tensor_parallel/cross_entropy.py``; the 2021-22 Megatron-LM
        called it on ``output.float()``). Megatron-Core's default (``cross_entropy_loss_fusion``
        off), and archplace's, as the other tracing defaults follow Megatron-LM.
    MEGATRON_FUSED: the same steps as four compiled functions (``cross_entropy_loss_fusion``
        with the native implementation, ``megatron/core/fusions/fused_cross_entropy.py``):
        fewer passes, the same float32 buffer kept.
    TE: Transformer Engine's fused cross-entropy (Megatron-Core's ``cross_entropy_fusion_impl:
        te``): two Triton kernels on the 16-bit logits, the gradient written over them (2 bytes
        per logit kept), scaled in place in the backward pass.
    FP32: the logits upcast and PyTorch's cross-entropy run on the float32 copy, out of place:
        the cast, the float32 log-softmax (kept), a full-size float32 gradient of the
        log-probabilities, the log-softmax backward (a second float32 tensor) and the cast back,
        each its own kernel. Hugging Face's training loss (transformers ``loss/loss_utils.py``,
        ``ForCausalLMLoss``: ``logits = logits.float()`` "to avoid potential precision issues",
        then ``nn.functional.cross_entropy``) and TorchTitan's (``pred.float()``) run so.
    FUSED: one fused cross-entropy kernel on the 16-bit logits, nothing kept in float32
        (flash-attn's ``flash_attn.losses.cross_entropy.CrossEntropyLoss``, llm-foundry's default
        ``loss_fn: fused_crossentropy``, mosaicml/llm-foundry v0.3.0
        ``llmfoundry/models/mpt/modeling_mpt.py``).
    """

    MEGATRON = "megatron"
    MEGATRON_FUSED = "megatron-fused"
    TE = "te"
    FP32 = "fp32"
    FUSED = "fused"

    @property
    def upcast(self) -> bool:
        """Whether the loss runs on a float32 copy of the logits (traced as an upcast)."""
        return self in (Loss.MEGATRON, Loss.MEGATRON_FUSED, Loss.FP32)


DEFAULT_RECOMPUTE_MODULES = (RecomputeModule.CORE_ATTN,)
"""Megatron-Core's default ``recompute_modules``."""


def split_names(value: str) -> tuple[str, ...]:
    """A comma-separated list of names (``"layernorm,moe_act"``) as a tuple of the names,
    stripped; the command line's form of a list field."""
    return tuple(part.strip() for part in str(value).split(","))


@dataclass(frozen=True, kw_only=True)
class Tracing:
    """How a model's layers are traced and costed: one option group, declared here once, that
    every spec and record of tracing options is (by inheritance, the same dataclass fields): the
    model spec and the search spec of the front door
    (:class:`archplace.front.specs.ModelSpec`, :class:`archplace.front.specs.search.SearchSpec`),
    the engine's plan grid (:class:`archplace.placement.grid.PlanGrid`) and what is traced for
    one cost key (:class:`archplace.workload.extract.ExtractOptions`). Its fields are keyword-only,
    so that a class holding the group keeps its own positional fields.

    Attributes:
        attention: how attention runs (:class:`Attention`; default flash).
        kernels: element-wise kernels fused (Megatron-LM) or unfused (:class:`Kernels`).
        fuse: also fold every element-wise operator into the matmul producing its input (a
            matmul epilogue, as a compiler would).
        capacity_factor: expert capacity of the MoE layers over the balanced share of routed
            tokens (1..1024); 1.0: dropless, no padding (Megatron-Core's and DeepSeek-V3's
            default); above 1 every expert is padded to it (GShard, Switch Transformer).
        expert_load_imbalance: tokens the busiest expert-parallel rank receives over the mean
            (1..1024) with dropless routing; 1.0: balanced.
        recompute_modules: what selective recomputation reruns (:class:`RecomputeModule`, once
            each; default core_attn, Megatron-Core's); used only by a plan whose recompute is
            selective.
        expert_weighting: where an MoE layer applies the routing weights (:class:`ExpertWeighting`;
            default output, Hugging Face's).
        loss: how the cross-entropy over the vocabulary runs (:class:`Loss`; default
            megatron, Megatron-LM's as written).
        swiglu_fp8_input: keep the SwiGLU inputs for the backward pass in FP8, one byte an element
            (Megatron-Core's ``--activation-func-fp8-input-store``, DeepSeek-V3's FP8-cached SwiGLU
            input; :func:`archplace.workload.fp8_saved.swiglu_inputs`); default off.

    The ranges are checked by the front door's specs (:func:`archplace.base.fields.check_declared`);
    :class:`~archplace.workload.extract.ExtractOptions` checks what the engine needs.
    """

    attention: Attention = option(Attention.FLASH, help=(
        "Attention as it is run: flash (FlashAttention-2), sdpa (fused, every score block computed, "
        "as with an explicit mask) or eager (HF's explicit scores and softmax)"))
    kernels: Kernels = option(Kernels.FUSED, help=(
        "Element-wise kernels: fused (Megatron-LM's fused bias+GeLU, bias+dropout+add, norms, "
        "softmax) or unfused (HF's operators one by one)"))
    fuse: bool = option(False, help="Cost layers with element-wise ops fused into the matmul producing "
                                    "their input")
    capacity_factor: float = option(1.0, help=(
        "Mixture-of-experts models: expert capacity over the balanced share of routed tokens; 1.0 "
        "dropless, no padding (Megatron-Core's default), above 1 every expert padded to it (GShard, "
        "Switch Transformer)"), low=1.0, high=limits.MAX_MOE_FACTOR)
    expert_load_imbalance: float = option(1.0, help=(
        "Mixture-of-experts models: tokens the busiest expert-parallel rank receives over the mean, "
        "dropless routing; 1.0 balanced"), low=1.0, high=limits.MAX_MOE_FACTOR)
    recompute_modules: tuple[RecomputeModule, ...] = option(DEFAULT_RECOMPUTE_MODULES, help=(
        "What selective recompute reruns, comma-separated (Megatron-Core's --recompute-modules): "
        "core_attn, mlp, moe, shared_experts, moe_act, layernorm, mla_up_proj"),
        parse=split_names, metavar="MODULES")
    expert_weighting: ExpertWeighting = option(ExpertWeighting.OUTPUT, help=(
        "Mixture-of-experts models: where the routing weight is applied: output (at the combine, "
        "Hugging Face's; the expert outputs are kept for the backward pass) or activation (before "
        "the down projection, Megatron-Core's)"))
    loss: Loss = option(Loss.MEGATRON, help=(
        "Cross-entropy over the vocabulary: megatron (Megatron-LM's, the logits upcast and the "
        "loss worked in that float32 buffer pass by pass), megatron-fused (the same, compiled: "
        "Megatron-Core's cross_entropy_loss_fusion), te (Transformer Engine's fused kernels on "
        "the 16-bit logits: cross_entropy_fusion_impl te), fp32 (upcast, PyTorch's cross-entropy out of "
        "place: Hugging Face's, TorchTitan's) or fused (one kernel on the 16-bit logits: "
        "flash-attn's, as llm-foundry runs it)"))
    swiglu_fp8_input: bool = option(False, help=(
        "Keep the SwiGLU inputs for the backward pass in FP8, one byte an element (Megatron-Core's "
        "--activation-func-fp8-input-store; DeepSeek-V3's FP8-cached SwiGLU input)"))

    @property
    def moe_options(self) -> dict[str, float]:
        """``capacity_factor`` and ``expert_load_imbalance`` by name (keywords of the engine)."""
        return {"capacity_factor": self.capacity_factor, "expert_load_imbalance": self.expert_load_imbalance}


def tracing_of(holder: object) -> dict[str, Any]:
    """The tracing options of ``holder`` (any object with :class:`Tracing`'s fields: a model
    spec, a plan grid, ...) by field name, to make another holder from it."""
    return {field.name: getattr(holder, field.name) for field in dataclasses.fields(Tracing)}


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
