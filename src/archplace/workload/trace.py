"""Tracing real Hugging Face model code into a joint forward + backward aten graph.

Route (docs/model.md, Operator graphs): build the model with ONE block on the meta device
(no weights, no memory, no FLOP executed), export it with its loss through
``torch.export.export(strict=False)``, then trace forward plus
``torch.autograd.grad`` with ``make_fx`` so that the backward operators are the
real aten ops (data- and weight-gradient matmuls, softmax/norm backward,
dropout).  Each node keeps its shape (``meta['val']``) and its owning module;
backward nodes find their forward op through the autograd ``seq_nr``.

This module relies on private torch APIs (``_reparametrize_module``,
``setup_stacktrace_preservation_hooks``): torch is pinned to 2.13.0.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from archplace.base.errors import ConfigError, ExtractionError
from archplace.base.quiet import silenced
from archplace.workload import attention_op, experts_op
from archplace.workload.graph import OpKind, Phase
from archplace.workload.options import Attention
from archplace.workload.zoo import LoadedModel

log = logging.getLogger(__name__)

# Aten ops that only re-describe memory (or assert) and cost nothing.
_VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "expand_as",
    "unsqueeze", "squeeze", "slice", "select", "alias", "detach", "as_strided", "split",
    "split_with_sizes", "unbind", "chunk", "narrow", "_assert_tensor_metadata", "lift_fresh_copy",
    "_reshape_alias", "view_as", "unflatten", "flatten", "contiguous", "numpy_T",
})
_MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm"})
_SOFTMAX_OPS = frozenset({"_softmax", "_softmax_backward_data", "_log_softmax",
                          "_log_softmax_backward_data"})
_NORM_OPS = frozenset({"native_layer_norm", "native_layer_norm_backward"})
_REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "var_mean",
                            "cumsum", "nll_loss_forward", "nll_loss_backward", "argmax"})
_EMBEDDING_OPS = frozenset({"embedding", "embedding_dense_backward", "index", "index_select",
                            "gather", "scatter", "scatter_add", "index_put", "_index_put_impl_"})

# FLOP per output element of non-matmul operators (first-fidelity estimates:
# softmax = max, sub, exp, sum, div; layer norm = mean, var, normalise, scale, shift).
FLOP_PER_ELEMENT = {OpKind.ELEMENTWISE: 1.0, OpKind.SOFTMAX: 5.0, OpKind.NORM: 8.0,
                     OpKind.REDUCTION: 1.0, OpKind.EMBEDDING: 0.0, OpKind.COLLECTIVE: 0.0}


def op_name(node: Any) -> str:
    """``aten.mm.default`` -> ``mm``; python builtins (getitem) keep their name."""
    target = node.target
    packet = getattr(target, "_opname", None)
    if packet is not None:
        return str(packet)
    return str(getattr(target, "__name__", target))


def tensor_bytes(val: Any) -> float:
    if val is None:
        return 0.0
    if isinstance(val, tuple | list):
        return float(sum(tensor_bytes(v) for v in val))
    numel = getattr(val, "numel", None)
    if numel is None:
        return 0.0
    return float(numel() * val.element_size())


def first_numel(val: Any) -> int:
    if isinstance(val, tuple | list):
        return first_numel(val[0]) if val else 0
    numel = getattr(val, "numel", None)
    return int(numel()) if numel is not None else 0


def classify(name: str) -> OpKind | None:
    """OpKind of an aten op name, or None for a zero-cost view."""
    if name in _VIEW_OPS or name == "getitem":
        return None
    if name in _MATMUL_OPS or name in experts_op.OPS:
        return OpKind.MATMUL
    if name in (attention_op.FORWARD_OP, attention_op.BACKWARD_OP):
        return OpKind.ATTENTION
    if name in _SOFTMAX_OPS:
        return OpKind.SOFTMAX
    if name in _NORM_OPS:
        return OpKind.NORM
    if name in _REDUCTION_OPS:
        return OpKind.REDUCTION
    if name in _EMBEDDING_OPS:
        return OpKind.EMBEDDING
    return OpKind.ELEMENTWISE


def matmul_dims(node: Any, name: str) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of a matmul node from its operand shapes (a grouped GEMM of experts:
    :func:`archplace.workload.experts_op.grouped_dims`)."""
    if name in experts_op.OPS:
        return experts_op.grouped_dims(node, name)
    tensors = [a for a in node.args if hasattr(a, "meta")]
    a, b = tensors[-2].meta["val"].shape, tensors[-1].meta["val"].shape
    if name in ("bmm", "baddbmm"):
        return int(a[0]), int(a[1]), int(a[2]), int(b[2])
    return 1, int(a[0]), int(a[1]), int(b[1])


class Traced:
    """The traced joint graph with storage resolution and layer attribution."""

    def __init__(self, gm: Any, param_names: Sequence[str], block_prefix: str | Sequence[str]) -> None:
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        n_params = len(param_names)
        self.param_nodes = set(self.placeholders[:n_params])
        self.param_numel = {n: first_numel(n.meta.get("val")) for n in self.param_nodes}
        self.block_prefixes = (block_prefix,) if isinstance(block_prefix, str) else tuple(block_prefix)
        self.head_layer = len(self.block_prefixes) + 1
        self.calls = [n for n in self.nodes if n.op == "call_function"]
        self.kind = {n: classify(op_name(n)) for n in self.calls}
        self._storage: dict[Any, Any] = {}

    def storage(self, node: Any) -> Any:
        """The node owning the memory that ``node`` views (follows view ops)."""
        if node in self._storage:
            return self._storage[node]
        cur = node
        while cur.op == "call_function" and self.kind[cur] is None:
            name = op_name(cur)
            src = cur.args[0] if cur.args and hasattr(cur.args[0], "op") else None
            if src is None:
                break
            if name == "getitem" and src.op == "call_function" and self.kind.get(src) is not None:
                break  # one element of a multi-output compute op owns its own memory
            cur = src
        self._storage[node] = cur
        return cur

    def is_param(self, node: Any) -> bool:
        return node in self.param_nodes

    def layer_of_forward(self) -> dict[Any, int]:
        """Layer index of every forward call node: 0 = embedding, 1 .. B = the traced blocks (in
        the order of the block prefixes), B + 1 = head.  An operator between two blocks' operators
        belongs to the block before it."""
        fwd = [n for n in self.calls if not n.meta.get("autograd_backward")]
        block_of = []
        for n in fwd:
            stack = n.meta.get("nn_module_stack") or {}
            paths = [v[0] for v in stack.values()]
            block_of.append(next((j for j, prefix in enumerate(self.block_prefixes)
                                  if any(p == prefix or p.startswith(prefix + ".") for p in paths)), -1))
        in_block = [j >= 0 for j in block_of]
        if not any(in_block):
            raise ExtractionError(f"no operator belongs to the block {self.block_prefixes[0]!r}")
        first = in_block.index(True)
        last = len(in_block) - 1 - in_block[::-1].index(True)
        stray = [n.name for i, n in enumerate(fwd) if first < i < last and not in_block[i]
                 and self.kind[n] is not None]
        if stray:
            log.debug("forward ops between block ops attributed to the block: %s", stray)
        out: dict[Any, int] = {}
        current = 1
        for i, n in enumerate(fwd):
            if i < first:
                out[n] = 0
            elif i > last:
                out[n] = self.head_layer
            else:
                current = block_of[i] + 1 if block_of[i] >= 0 else current
                out[n] = current
        return out

    def attribute(self) -> dict[Any, tuple[int, Phase]]:
        """(layer index, phase) of every compute node."""
        fwd_layer = self.layer_of_forward()
        seq_layer: dict[int, int] = {}
        for n, layer in fwd_layer.items():
            seq = n.meta.get("seq_nr")
            if seq is not None:
                seq_layer.setdefault(seq, layer)
        out: dict[Any, tuple[int, Phase]] = {}
        resolved: dict[Any, int] = {}
        for n in self.calls:
            if not n.meta.get("autograd_backward"):
                resolved[n] = fwd_layer[n]
                continue
            # A backward op belongs to its forward op's layer; an accumulation with no
            # forward op (residual or tied-weight gradient sums) to the earliest layer it reads.
            # The autograd engine's accumulation adds carry the seq_nr of whatever op
            # ran last, so an add of backward results goes by its inputs instead.
            accumulation = op_name(n) in ("add", "add_") and all(
                a.meta.get("autograd_backward") for a in n.all_input_nodes)
            found = None if accumulation else seq_layer.get(n.meta.get("seq_nr", -1))
            if found is None:
                inputs = [resolved[self.storage(a)] for a in n.all_input_nodes
                          if self.storage(a) in resolved]
                found = min(inputs) if inputs else self.head_layer
            resolved[n] = found
        for n in self.calls:
            if self.kind[n] is not None or op_name(n) == "getitem":
                out[n] = (resolved[n],
                          Phase.BWD if n.meta.get("autograd_backward") else Phase.FWD)
        return out


LATENT_DOWN_PROJECTIONS = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
"""Hugging Face names of multi-head latent attention's low-rank down projections (DeepSeek-V3)."""


def latent_down_nodes(calls: Sequence[Any]) -> frozenset[Any]:
    """Forward nodes of multi-head latent attention's down projections (:data:`LATENT_DOWN_PROJECTIONS`).
    Megatron-Core does not split them over the TP ranks (``parallel_mode='duplicated'`` for
    ``linear_q_down_proj`` and ``linear_kv_down_proj``,
    megatron/core/transformer/multi_latent_attention.py): each rank projects its own
    sequence-parallel tokens, and the column-parallel up projections gather the latents."""
    return frozenset(n for n in calls if not n.meta.get("autograd_backward")
                     and experts_op.module_path(n).rpartition(".")[2] in LATENT_DOWN_PROJECTIONS)


def quiet_torch_logging() -> AbstractContextManager[None]:
    """Silence torch's loggers while the body runs (building and tracing a model), then restore
    their levels (:func:`archplace.base.quiet.silenced`).

    When an operator fails on fake tensors, torch logs the whole traceback at ERROR through its
    own stderr handlers (``torch._subclasses.fake_tensor`` logs "failed while attempting to run
    meta for aten.topk.default" and 15 lines of traceback; ``torch.export``,
    ``torch.fx.experimental.symbolic_shapes`` and others have handlers too) before the exception
    reaches archplace, which reports it on one line.
    """
    return silenced(("torch",))


def find_block_container(model: Any) -> str:
    """Dotted path of the ModuleList holding the transformer blocks."""
    import torch

    best, best_params = None, -1
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 1:
            params = sum(p.numel() for p in module.parameters())
            if params > best_params:
                best, best_params = path, params
    if best is None:
        raise ExtractionError("the model has no ModuleList of blocks")
    return best


def build_model(spec: LoadedModel, dtype: str, training: bool,
                attention: Attention = Attention.EAGER, weight_activation: bool = False) -> Any:
    """The model with one block of each kind (:attr:`LoadedModel.block_runs`) on the meta device, in
    train (or eval) mode.

    ``attention`` EAGER keeps HF's explicit scores and softmax; SDPA and FLASH route the
    attention core through the fused operator of :mod:`archplace.workload.attention_op`
    (they differ only in cost, not in the graph). The experts of a mixture-of-experts model run
    as grouped GEMMs (:mod:`archplace.workload.experts_op`), the routing weights applied to
    their outputs or (``weight_activation``) to their gated activation.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    implementation = "eager" if attention is Attention.EAGER else attention_op.register()

    fields = spec.config
    model_type = fields.pop("model_type")
    fields[spec.family.layers_field] = len(spec.block_runs)
    if len(spec.block_runs) > 1:
        assert spec.family.dense_layers_field is not None
        fields[spec.family.dense_layers_field] = 1  # block 0 dense, block 1 mixture-of-experts
    fields["use_cache"] = False
    try:
        hf_config = AutoConfig.for_model(model_type, **fields)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"model {spec.name!r}: invalid config ({exc})") from None
    hf_config._attn_implementation = implementation
    experts = experts_op.register(weight_activation)
    hf_config._experts_implementation = experts
    auto = AutoModelForMaskedLM if spec.family.task == "masked-lm" else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(hf_config)
    model.to(getattr(torch, dtype))
    model.config._attn_implementation = implementation
    model.config._experts_implementation = experts
    model.train(training)
    return model


def trace(model: Any, micro_batch: int, seq_len: int, *, upcast_logits: bool = True) -> Any:
    """Joint forward + backward aten graph (fx GraphModule) of ``model`` with a CE loss; with
    ``upcast_logits`` the logits are cast to float32 before the loss, as Hugging Face's and
    Megatron-Core's losses do (:class:`archplace.workload.options.Loss`)."""
    import torch
    import torch.fx.traceback as fx_traceback
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks
    from torch.fx.experimental.proxy_tensor import make_fx

    class WithLoss(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.m = inner

        def forward(self, ids: Any, labels: Any) -> Any:
            logits = self.m(input_ids=ids).logits
            if upcast_logits:
                logits = logits.float()
            return torch.nn.functional.cross_entropy(
                logits.view(-1, logits.size(-1)), labels.view(-1))

    shape = (micro_batch, seq_len)
    ids = torch.zeros(shape, dtype=torch.long, device="meta")
    labels = torch.zeros(shape, dtype=torch.long, device="meta")
    exported = torch.export.export(WithLoss(model), (ids, labels), strict=False).module()
    params = dict(exported.named_parameters())
    buffers = dict(exported.named_buffers())

    def step(params: dict[str, Any], buffers: dict[str, Any], ids: Any, labels: Any) -> Any:
        with torch.nn.utils.stateless._reparametrize_module(exported, {**params, **buffers}):
            loss = torch.fx.Interpreter(exported).run(ids, labels)
        setup_stacktrace_preservation_hooks([loss.grad_fn])
        return loss, torch.autograd.grad(loss, list(params.values()), allow_unused=True)

    with fx_traceback.preserve_node_meta():
        gm = make_fx(step, tracing_mode="real")(params, buffers, ids, labels)
    return gm, list(params)


def bytes_touched(n: Any, name: str, arg: Any, whole: float) -> float:
    """Bytes ``n`` reads of its input ``arg`` (``whole``: the tensor's bytes): all of them,
    except where the kernel reads the log-probabilities only at the targets. PyTorch's
    ``nll_loss_forward`` gathers one value per row (``input[i, target[i]]``), and its
    ``nll_loss_backward`` takes ``self`` for its shape only: it zero-fills the gradient and
    writes ``-weight / N`` at the targets (pytorch/pytorch ``aten/src/ATen/native/cuda/Loss.cu``,
    ``nll_loss_forward_out_cuda_template`` and ``nll_loss_backward_out_cuda_template``)."""
    if name == "nll_loss_backward" and len(n.args) > 1 and arg is n.args[1]:
        return 0.0
    if name == "nll_loss_forward" and len(n.args) > 1 and arg is n.args[0]:
        rows = first_numel(n.args[1].meta.get("val"))
        return whole * min(rows / max(first_numel(arg.meta.get("val")), 1), 1.0)
    return whole
