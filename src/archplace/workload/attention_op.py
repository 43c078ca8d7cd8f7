"""A fused attention operator for tracing: one aten node forward, one backward.

Hugging Face models look their attention core up by ``config._attn_implementation`` in
``transformers.AttentionInterface``.  :func:`register` adds an implementation named
:data:`IMPLEMENTATION` that calls the custom torch operator ``archplace::attention``
(FlashAttention's interface, Dao 2023: inputs Q, K, V; outputs O and the fp32 log-sum-exp of
every score row), whose autograd formula is one ``archplace::attention_backward`` node that
reads only Q, K, V, O, the log-sum-exp and dO (Dao et al. 2022, Algorithm 4).  Traced on
the meta device, the forward graph then holds one attention node instead of the explicit
s x s scores, mask, softmax and dropout, and the backward graph one node, so the activations
the layer saves are exactly what FlashAttention keeps: no s x s tensor.  The attention mask is
not materialised either (FlashAttention applies the causal pattern by index): the mask
function registered alongside returns None.

Shapes (HF layout): Q ``[b, a, s_q, d]``, K and V ``[b, a_kv, s_kv, d]`` with ``a_kv`` dividing
``a`` (grouped-query attention is handled inside, as FlashAttention-2 does, without repeating
K and V); O ``[b, s_q, a, d_v]`` (the layout FlashAttention returns, which the output projection
reads without a copy; d_v = V's head dim, which is d except in DeepSeek's multi-head latent
attention, where V is narrower than Q and K); log-sum-exp ``[b, a, s_q]`` fp32.  Only meta
tensors are ever passed.

Registration is idempotent and happens on first use (torch's operator registry and
transformers' attention tables are process-wide).
"""

from __future__ import annotations

from typing import Any

IMPLEMENTATION = "archplace_fused"
"""Name of the attention implementation registered with transformers."""

FORWARD_OP = "attention"
BACKWARD_OP = "attention_backward"
"""Aten names (``op_name``) of the forward and backward operators."""


def _define() -> None:
    import torch

    if hasattr(torch.ops.archplace, FORWARD_OP) and hasattr(torch.ops.archplace, BACKWARD_OP):
        return

    @torch.library.custom_op(
        f"archplace::{FORWARD_OP}", mutates_args=(),
        schema="(Tensor q, Tensor k, Tensor v, bool causal, float dropout_p, float scale)"
               " -> (Tensor, Tensor)")
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  dropout_p: float, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("archplace::attention only traces meta tensors")

    @attention.register_fake
    def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
          dropout_p: float, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        b, a, s, _ = q.shape
        out = q.new_empty((b, s, a, v.shape[-1]))  # V's head dim (MLA's differs from Q's)
        lse = q.new_empty((b, a, s), dtype=torch.float32)
        return out, lse

    @torch.library.custom_op(
        f"archplace::{BACKWARD_OP}", mutates_args=(),
        schema="(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,"
               " bool causal, float dropout_p, float scale) -> (Tensor, Tensor, Tensor)")
    def attention_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool,
                           dropout_p: float, scale: float
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError("archplace::attention_backward only traces meta tensors")

    @attention_backward.register_fake
    def _(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          out: torch.Tensor, lse: torch.Tensor, causal: bool, dropout_p: float, scale: float
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        q, k, v, causal, dropout_p, scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.set_materialize_grads(False)  # no zeros for the unused log-sum-exp gradient
        ctx.flags = (causal, dropout_p, scale)

    def backward(ctx: Any, grad_out: Any, grad_lse: Any) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.archplace.attention_backward(grad_out, q, k, v, out, lse,
                                                            *ctx.flags)
        return dq, dk, dv, None, None, None

    attention.register_autograd(backward, setup_context=setup_context)


def _attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                       dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers attention-interface function: ``(O [b, s, a, d], None)``."""
    import torch

    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    causal = causal and query.shape[2] > 1
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    out, _ = torch.ops.archplace.attention(query, key, value, causal, float(dropout), scale)
    return out, None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """Mask function: FlashAttention applies the causal pattern by index, no tensor."""
    return None


def register() -> str:
    """Define the operators and register the implementation with transformers (idempotent).

    Returns:
        The implementation name to set as ``config._attn_implementation``.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    _define()
    AttentionInterface.register(IMPLEMENTATION, _attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, _no_mask)
    return IMPLEMENTATION
