"""Per-layer totals of a layer chain, for ``archplace graph`` (issue #3 JSON schema)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from archplace.workload.layers import Layer, LayerChain


def layer_summary(layer: Layer, shared_experts: int = 0) -> dict[str, Any]:
    """One layer: name, kind, params, fwd/bwd FLOP, activation bytes (without recomputation and
    under selective recomputation of the traced recompute modules), boundary bytes, collectives,
    operators;
    for a mixture-of-experts block also its routed experts, experts per token, tokens per expert,
    active parameters (per token), ``shared_experts`` (always active, not sharded by ep), the
    routed experts this rank holds, the bytes one rank sends in each of its expert-parallel
    all-to-alls (0 at ep = 1) and the full buffer of each of its expert-tensor-parallel
    all-gathers and reduce-scatters (0 at etp = 1).

    Figures are per device (per TP, EP and expert-TP rank) and per micro-batch.
    """
    collectives = Counter(layer.fwd.collectives()) + Counter(layer.bwd.collectives())
    operators = Counter(layer.fwd.count_by_kind()) + Counter(layer.bwd.count_by_kind())
    out = {
        "name": layer.name, "kind": layer.kind.value, "params": layer.params,
        "fwd_flop": layer.fwd_flop, "bwd_flop": layer.bwd_flop,
        "activation_bytes": layer.activation_bytes,
        "selective_activation_bytes": layer.selective_activation_bytes,
        "boundary_bytes": layer.boundary_bytes,
        "collectives": dict(sorted(collectives.items())),
        "operators": dict(sorted(operators.items())),
    }
    if layer.experts:
        out.update(experts=layer.experts, experts_per_token=layer.experts_per_token,
                   tokens_per_expert=layer.tokens_per_expert, active_params=layer.active_params,
                   shared_experts=shared_experts, local_experts=layer.experts // layer.ep,
                   all_to_all_bytes=layer.all_to_all_bytes, expert_tp_bytes=layer.expert_tp_bytes)
    return out


def chain_summary(chain: LayerChain, *, shared_experts: int = 0) -> dict[str, Any]:
    """``{"model", "micro_batch", "seq_len", "tp", "sp", "ep", "etp", "layers": [...], "total": {...}}``.

    The micro-batch and the degrees are the chain's key's. ``total.params`` counts tied weights
    once (the model's parameters per TP and EP rank); a mixture-of-experts model's total also
    has ``active_params``, the parameters one token uses.
    ``shared_experts``: the shared experts of each MoE block (:func:`layer_summary`).
    """
    layers = [layer_summary(layer, shared_experts) for layer in chain.layers]
    out: dict[str, Any] = {
        "model": chain.model, "micro_batch": chain.micro_batch, "seq_len": chain.seq_len,
        "tp": chain.tp, "sp": chain.sp, "ep": chain.ep, "etp": chain.etp, "layers": layers,
        "total": {"params": chain.model_params,
                  "fwd_flop": sum(layer["fwd_flop"] for layer in layers),
                  "bwd_flop": sum(layer["bwd_flop"] for layer in layers)},
    }
    if any(layer.experts for layer in chain.layers):
        out["total"]["active_params"] = chain.active_params
    return out
