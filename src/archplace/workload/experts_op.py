"""Mixture-of-experts layers for tracing: the experts as grouped GEMM operators.

Hugging Face's MoE blocks (Mixtral, Qwen3-MoE, DeepSeek-V3 ...) compute their router and top-k
gating with ordinary tensor operators, then call an experts module whose eager forward
dispatches tokens with data-dependent indexing (``nonzero``, ``where``, ``index_add_``) that
cannot be traced on the meta device. The experts module looks its forward up by
``config._experts_implementation`` in ``transformers.integrations.moe.ExpertsInterface``;
:func:`register` adds an implementation named :data:`IMPLEMENTATION` that runs, for T tokens of
width h routed to k of E experts (S = T·k routed tokens):

1. dispatch: every token copied once per chosen expert, ``[S, h]`` (the permutation of a real
   grouped-GEMM kernel; its backward is the sum over the k copies);
2. ``archplace::grouped_mm`` of the routed tokens with the experts' gate/up weights
   ``[E, N, h]`` -> ``[S, N]``; the gating activation (SwiGLU) as ordinary element-wise ops;
   ``archplace::grouped_mm`` with the down weights ``[E, h, I]`` -> ``[S, h]``;
3. combine: each copy scaled by its routing weight and the k copies summed, ``[T, h]``.

That is Hugging Face's order (the weight applied to the expert's output). Megatron-Core applies
it to the gated activation before the down projection and sums the outputs
(:class:`~archplace.workload.options.ExpertWeighting`): :data:`IMPLEMENTATION_WEIGHTED_ACTIVATION`
runs that order, so its backward does not read the ``[S, h]`` outputs.

Routing is assumed balanced, every expert receiving ``ceil(S / E)`` tokens: capacity factor 1.0,
the ideal of GShard (Lepikhin et al. 2021, sec. 2.2) and Switch Transformer (Fedus et al. 2022,
sec. 2.2), where no token is dropped and no expert padded. A grouped GEMM is then the batched
matmul ``[E, S/E, K] x [E, K, N]`` (``Operator`` batch = E, m = tokens per expert), 2·S·K·N FLOP;
its backward is two such operators, ``archplace::grouped_mm_dgrad`` (data gradient,
``[E, S/E, N] x [E, N, K]``) and ``archplace::grouped_mm_wgrad`` (weight gradient,
``[E, N, S/E] x [E, S/E, K]``), 2·S·K·N FLOP each, as a dense matmul's. Autograd saves the
routed tokens and the expert intermediates the operators read, so they are counted as
activations. Only meta tensors are ever passed.

Registration is idempotent and happens on first use (torch's operator registry and
transformers' experts table are process-wide).
"""

from __future__ import annotations

import math
from typing import Any

IMPLEMENTATION = "archplace_grouped"
"""Name of the experts implementation registered with transformers (the routing weight applied
to the outputs, Hugging Face's order)."""

IMPLEMENTATION_WEIGHTED_ACTIVATION = "archplace_grouped_weighted_activation"
"""The same with the routing weight applied to the gated activation (Megatron-Core's order)."""

FORWARD_OP = "grouped_mm"
DGRAD_OP = "grouped_mm_dgrad"
WGRAD_OP = "grouped_mm_wgrad"
OPS = frozenset({FORWARD_OP, DGRAD_OP, WGRAD_OP})
"""Aten names (``op_name``) of the grouped-GEMM operators."""


def _define() -> None:
    import torch

    if all(hasattr(torch.ops.archplace, name) for name in OPS):
        return

    @torch.library.custom_op(f"archplace::{FORWARD_OP}", mutates_args=(),
                             schema="(Tensor x, Tensor w) -> Tensor")
    def grouped_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("archplace::grouped_mm only traces meta tensors")

    @grouped_mm.register_fake
    def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], w.shape[1]))

    @torch.library.custom_op(f"archplace::{DGRAD_OP}", mutates_args=(),
                             schema="(Tensor grad_out, Tensor w) -> Tensor")
    def grouped_mm_dgrad(grad_out: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("archplace::grouped_mm_dgrad only traces meta tensors")

    @grouped_mm_dgrad.register_fake
    def _(grad_out: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return grad_out.new_empty((grad_out.shape[0], w.shape[2]))

    @torch.library.custom_op(f"archplace::{WGRAD_OP}", mutates_args=(),
                             schema="(Tensor grad_out, Tensor x, int experts) -> Tensor")
    def grouped_mm_wgrad(grad_out: torch.Tensor, x: torch.Tensor, experts: int) -> torch.Tensor:
        raise NotImplementedError("archplace::grouped_mm_wgrad only traces meta tensors")

    @grouped_mm_wgrad.register_fake
    def _(grad_out: torch.Tensor, x: torch.Tensor, experts: int) -> torch.Tensor:
        return x.new_empty((experts, grad_out.shape[1], x.shape[1]))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, w = inputs
        ctx.save_for_backward(x, w)

    def backward(ctx: Any, grad_out: Any) -> tuple[Any, Any]:
        x, w = ctx.saved_tensors
        dx = torch.ops.archplace.grouped_mm_dgrad(grad_out, w)
        dw = torch.ops.archplace.grouped_mm_wgrad(grad_out, x, int(w.shape[0]))
        return dx, dw

    grouped_mm.register_autograd(backward, setup_context=setup_context)


def tokens_per_expert(routed: int, experts: int) -> int:
    """Rows each expert's GEMM gets under balanced routing: ``ceil(routed / experts)``."""
    return math.ceil(routed / experts)


def grouped_dims(node: Any, name: str) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of a grouped-GEMM node as the batched matmul of the module docstring:
    batch = experts, m = tokens per expert for the forward and data gradient, the output width
    for the weight gradient."""
    if name == WGRAD_OP:
        grad_out, x, experts = node.args
        s, n_out = (int(d) for d in grad_out.meta["val"].shape)
        k_in = int(x.meta["val"].shape[1])
        return int(experts), n_out, tokens_per_expert(s, int(experts)), k_in
    x, w = node.args
    s, k_in = (int(d) for d in x.meta["val"].shape)
    e, rows, cols = (int(d) for d in w.meta["val"].shape)
    n_out = rows if name == FORWARD_OP else cols
    return e, tokens_per_expert(s, e), k_in, n_out


def _experts(module: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any,
             weight_activation: bool) -> Any:
    """``[T, h]`` from ``[T, h]`` tokens and their ``[T, k]`` experts and routing weights, the
    weights applied to the outputs or (``weight_activation``) to the gated activation (module
    docstring)."""
    import torch

    if getattr(module, "has_bias", False) or getattr(module, "is_transposed", False) \
            or getattr(module, "has_post_expert_norm", False):
        raise NotImplementedError("experts with biases, transposed weights or a post-expert norm "
                                  "are not traced yet")
    tokens, hidden = hidden_states.shape
    k = int(top_k_index.shape[-1])
    routed = hidden_states.unsqueeze(1).expand(tokens, k, hidden).reshape(tokens * k, hidden)
    if module.has_gate:
        inner = module._apply_gate(torch.ops.archplace.grouped_mm(routed, module.gate_up_proj))
    else:
        inner = module.act_fn(torch.ops.archplace.grouped_mm(routed, module.up_proj))
    if weight_activation:
        inner = inner * top_k_weights.reshape(tokens * k, 1).to(inner.dtype)
        out = torch.ops.archplace.grouped_mm(inner, module.down_proj)
        return out.view(tokens, k, hidden).sum(dim=1).to(hidden_states.dtype)
    out = torch.ops.archplace.grouped_mm(inner, module.down_proj)
    weighted = out.view(tokens, k, hidden) * top_k_weights.unsqueeze(-1)
    return weighted.sum(dim=1).to(hidden_states.dtype)


def _experts_forward(module: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """transformers experts-interface function, Hugging Face's order (module docstring)."""
    return _experts(module, hidden_states, top_k_index, top_k_weights, weight_activation=False)


def _experts_weighted_activation(module: Any, hidden_states: Any, top_k_index: Any,
                                 top_k_weights: Any) -> Any:
    """transformers experts-interface function, Megatron-Core's order (module docstring)."""
    return _experts(module, hidden_states, top_k_index, top_k_weights, weight_activation=True)


SHARED_MODULES = frozenset({"shared_expert", "shared_experts"})
"""Names of the shared-expert submodules of Hugging Face's MoE blocks (Qwen2-MoE, DeepSeek-V3)."""


def module_path(node: Any) -> str:
    """Dotted path of the innermost module a forward node of a traced graph ran in ('' if none)."""
    stack = node.meta.get("nn_module_stack") or {}
    return str(list(stack.values())[-1][0]) if stack else ""


def routed_nodes(calls: Any, name_of: Any) -> frozenset[Any]:
    """The forward nodes of the routed region of every mixture-of-experts block among ``calls``
    (fx call nodes): every node run by a module that holds an experts module (the parent of the
    module whose forward runs :data:`FORWARD_OP`: Mixtral's ``block_sparse_moe``/``mlp``,
    DeepSeek-V3's ``mlp``) -- router, top-k, token copies, grouped GEMMs, weighted sum, a shared
    expert's scalar gate -- except the shared experts' MLPs (:data:`SHARED_MODULES`); empty for
    a dense model. ``name_of`` gives a node's aten name."""
    forward = [n for n in calls if not n.meta.get("autograd_backward")]
    blocks = {module_path(n).rpartition(".")[0] for n in forward if name_of(n) == FORWARD_OP}
    blocks.discard("")
    found = []
    for n in forward:
        path = module_path(n)
        block = next((b for b in blocks if path == b or path.startswith(b + ".")), None)
        if block is not None and not SHARED_MODULES & set(path[len(block) + 1:].split(".")):
            found.append(n)
    return frozenset(found)


def register(weight_activation: bool = False) -> str:
    """Define the operators and register the implementations with transformers (idempotent).

    Returns:
        The implementation name to set as ``config._experts_implementation``: the routing weight
        applied to the outputs, or (``weight_activation``) to the gated activation.
    """
    from transformers.integrations.moe import ExpertsInterface

    _define()
    ExpertsInterface.register(IMPLEMENTATION, _experts_forward)
    ExpertsInterface.register(IMPLEMENTATION_WEIGHTED_ACTIVATION, _experts_weighted_activation)
    return IMPLEMENTATION_WEIGHTED_ACTIVATION if weight_activation else IMPLEMENTATION


__all__ = ["FORWARD_OP", "DGRAD_OP", "WGRAD_OP", "IMPLEMENTATION", "IMPLEMENTATION_WEIGHTED_ACTIVATION",
           "OPS", "SHARED_MODULES", "grouped_dims", "module_path", "register", "routed_nodes",
           "tokens_per_expert"]
