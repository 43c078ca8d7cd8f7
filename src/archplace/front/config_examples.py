"""Commented starting files printed by ``archplace config --example NAME``.

:data:`EXAMPLES` maps each name to its text; a new kind of run file adds one entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from archplace.base.errors import ConfigError
from archplace.front.specs.search import EXAMPLE as SEARCH

PLAN = """\
# A plan run: archplace plan --config plan.yaml
# What to train, on which chip, on how many, and which parallel plans to try.
# Options given on the command line override these fields (e.g. --devices 128).
# Leave a field out for its default.

# --- the model
model: llama2-7b          # a model preset (archplace models) or the path of an HF config.json
seq_len: null             # tokens per sample; null: the model's context length
attention: flash          # eager | sdpa | flash
kernels: fused            # fused (Megatron-LM's fused kernels) | unfused (HF's operators one by one)
fuse: false               # also fold element-wise operators into the matmul producing their input
capacity_factor: 1.0      # MoE models: expert capacity over the balanced share; 1.0 dropless (>= 1)
expert_load_imbalance: 1.0  # MoE models: busiest EP rank's tokens over the mean (>= 1)
recompute_modules: [core_attn]  # what selective recompute reruns: core_attn, mlp, moe, shared_experts,
                          # moe_act, layernorm, mla_up_proj (Megatron-Core's --recompute-modules)
expert_weighting: output  # MoE routing weight on the experts' output (HF) or on their activation
                          # (Megatron-Core's, before the down projection)
loss: megatron            # cross-entropy: megatron (Megatron-LM's, logits upcast), megatron-fused
                          # (compiled), te (Transformer Engine's), fp32 (HF's) or fused (llm-foundry)
swiglu_fp8_input: false   # keep SwiGLU inputs in FP8 for backward (Megatron-Core's
                          # --activation-func-fp8-input-store; DeepSeek-V3)

# --- the chip and its links
hardware: a100-80gb       # a hardware preset (archplace hardware) or a hardware YAML file
cluster: null             # preset or YAML whose cluster links are used; null: the hardware's own
attention_kernel: null    # measured attention kernel table: flash2 | flash3 | cudnn | triton-flash1;
                          # null: the chip's own (flash2 on a100-80gb and h100-80gb)
tp_comm_overlap: null     # the framework hides the TP collectives behind the GEMMs next to them
                          # (Transformer Engine's userbuffers); null: the chip's own (off)
pp_comm_overlap: null     # interleaved plans' pipeline sends overlap the next chunk's computation
                          # (Megatron-Core's overlap_p2p_comm); null: the chip's own (off)
ep_comm_overlap: null     # MoE plans hide one micro-batch's expert all-to-alls behind another's
                          # computation (Megatron-Core's overlap_moe_expert_parallel_comm); null: off

# --- the cluster and one training iteration
devices: 64               # accelerators
global_batch: 512         # samples per iteration

# --- the plans to search
tps: null                 # TP widths; null: every power of two up to 64 that splits the model
micro_batch_sizes: [1, 2, 4, 8]
recomputes: [none, selective, full]
schedules: [gpipe, 1f1b, interleaved]
chunks: [2, 4]            # model chunks per device tried with the interleaved schedule
sp: true                  # also try sequence parallelism (TP width > 1)
zero_stages: [0, 1, 2, 3] # 3 is FSDP
dp_overlap: [false, true] # DP gradient reduction exposed, or bucketed over the last backward pass
grad_reduce_dtype: fp32   # gradient buffer and reduction: fp32 (Megatron-LM's bf16 recipe) | bf16
grad_sync: auto           # gradient reduction: auto (each ZeRO stage's) | iteration | micro_batch
precisions: [bf16]        # GEMM precisions to try: bf16 | fp8 (Transformer Engine's FP8 recipe)
cps: null                 # context-parallel degrees (sequence split, ring attention); null: automatic
eps: null                 # expert-parallel degrees (experts sharded over DP ranks); null: automatic
etps: null                # expert-TP widths (each expert split over etp ranks); null: 1 and tp (MoE)
rank_order: tp-cp-ep-pp-dp  # how the groups are laid over the ranks; tp-cp-ep-dp-pp: Megatron-Core's
optimizer: adam           # adam | adam-bf16 (bf16 moments) | sgd
top_k: 5                  # plans to show, best first
"""

EXAMPLES: Mapping[str, str] = MappingProxyType({"plan": PLAN, "search": SEARCH})
"""Example run files by name."""


def example(name: str) -> str:
    """The commented example run file ``name``.

    Raises:
        ConfigError: an unknown name (the known ones listed).
    """
    try:
        return EXAMPLES[name]
    except KeyError:
        raise ConfigError(f"unknown example {name!r}; choose from: {', '.join(sorted(EXAMPLES))}") from None
