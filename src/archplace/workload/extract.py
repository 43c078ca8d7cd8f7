"""Joint forward + backward operator graphs from real Hugging Face model code.

Route (DESIGN.md, Workload): build the model with ONE block on the meta device
(no weights, no memory, no FLOP executed), export it with its loss through
``torch.export.export(strict=False)``, then trace forward plus
``torch.autograd.grad`` with ``make_fx`` so that the backward operators are the
real aten ops (data- and weight-gradient matmuls, softmax/norm backward,
dropout).  Each node keeps its shape (``meta['val']``) and its owning module;
backward nodes find their forward op through the autograd ``seq_nr``.

The traced graph is cut into three layers (embedding, block, head + loss); the
block's graphs stand for every block of the model, because blocks repeat.

This module relies on private torch APIs (``_reparametrize_module``,
``setup_stacktrace_preservation_hooks``): torch is pinned to 2.13.0.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archplace.errors import ConfigError, ExtractionError
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase, renumber
from archplace.workload.layers import Layer, LayerChain, LayerKind
from archplace.workload.zoo import ModelSpec

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
_FLOP_PER_ELEMENT = {OpKind.ELEMENTWISE: 1.0, OpKind.SOFTMAX: 5.0, OpKind.NORM: 8.0,
                     OpKind.REDUCTION: 1.0, OpKind.EMBEDDING: 0.0, OpKind.COLLECTIVE: 0.0}


@dataclass(frozen=True)
class ExtractOptions:
    """What to trace.

    Attributes:
        micro_batch: samples per micro-batch.
        seq_len: tokens per sample.
        dtype: training dtype name (``bfloat16`` | ``float16`` | ``float32``).
        training: trace in train mode (dropout on).

    Raises:
        ConfigError: a non-positive size or an unknown dtype.
    """

    micro_batch: int
    seq_len: int
    dtype: str = "bfloat16"
    training: bool = True

    def __post_init__(self) -> None:
        if self.micro_batch <= 0:
            raise ConfigError(f"micro-batch must be positive, got {self.micro_batch}")
        if self.seq_len <= 0:
            raise ConfigError(f"sequence length must be positive, got {self.seq_len}")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ConfigError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")


def _op_name(node: Any) -> str:
    """``aten.mm.default`` -> ``mm``; python builtins (getitem) keep their name."""
    target = node.target
    packet = getattr(target, "_opname", None)
    if packet is not None:
        return str(packet)
    return str(getattr(target, "__name__", target))


def _tensor_bytes(val: Any) -> float:
    if val is None:
        return 0.0
    if isinstance(val, tuple | list):
        return float(sum(_tensor_bytes(v) for v in val))
    numel = getattr(val, "numel", None)
    if numel is None:
        return 0.0
    return float(numel() * val.element_size())


def _first_numel(val: Any) -> int:
    if isinstance(val, tuple | list):
        return _first_numel(val[0]) if val else 0
    numel = getattr(val, "numel", None)
    return int(numel()) if numel is not None else 0


def _classify(name: str) -> OpKind | None:
    """OpKind of an aten op name, or None for a zero-cost view."""
    if name in _VIEW_OPS or name == "getitem":
        return None
    if name in _MATMUL_OPS:
        return OpKind.MATMUL
    if name in _SOFTMAX_OPS:
        return OpKind.SOFTMAX
    if name in _NORM_OPS:
        return OpKind.NORM
    if name in _REDUCTION_OPS:
        return OpKind.REDUCTION
    if name in _EMBEDDING_OPS:
        return OpKind.EMBEDDING
    return OpKind.ELEMENTWISE


def _matmul_dims(node: Any, name: str) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of a matmul node from its operand shapes."""
    tensors = [a for a in node.args if hasattr(a, "meta")]
    a, b = tensors[-2].meta["val"].shape, tensors[-1].meta["val"].shape
    if name in ("bmm", "baddbmm"):
        return int(a[0]), int(a[1]), int(a[2]), int(b[2])
    return 1, int(a[0]), int(a[1]), int(b[1])


class _Traced:
    """The traced joint graph with storage resolution and layer attribution."""

    def __init__(self, gm: Any, param_names: Sequence[str], block_prefix: str) -> None:
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        n_params = len(param_names)
        self.param_nodes = set(self.placeholders[:n_params])
        self.param_numel = {n: _first_numel(n.meta.get("val")) for n in self.param_nodes}
        self.block_prefix = block_prefix
        self.calls = [n for n in self.nodes if n.op == "call_function"]
        self.kind = {n: _classify(_op_name(n)) for n in self.calls}
        self._storage: dict[Any, Any] = {}

    def storage(self, node: Any) -> Any:
        """The node owning the memory that ``node`` views (follows view ops)."""
        if node in self._storage:
            return self._storage[node]
        cur = node
        while cur.op == "call_function" and self.kind[cur] is None:
            name = _op_name(cur)
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
        """0 = embedding, 1 = block, 2 = head for every forward call node."""
        fwd = [n for n in self.calls if not n.meta.get("autograd_backward")]
        in_block = []
        for n in fwd:
            stack = n.meta.get("nn_module_stack") or {}
            paths = [v[0] for v in stack.values()]
            in_block.append(any(p == self.block_prefix or p.startswith(self.block_prefix + ".")
                                for p in paths))
        if not any(in_block):
            raise ExtractionError(f"no operator belongs to the block {self.block_prefix!r}")
        first = in_block.index(True)
        last = len(in_block) - 1 - in_block[::-1].index(True)
        stray = [n.name for i, n in enumerate(fwd) if first < i < last and not in_block[i]
                 and self.kind[n] is not None]
        if stray:
            log.debug("forward ops between block ops attributed to the block: %s", stray)
        return {n: 1 if first <= i <= last else (0 if i < first else 2) for i, n in enumerate(fwd)}

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
            found = seq_layer.get(n.meta.get("seq_nr", -1))
            if found is None:
                inputs = [resolved[self.storage(a)] for a in n.all_input_nodes
                          if self.storage(a) in resolved]
                found = min(inputs) if inputs else 2
            resolved[n] = found
        for n in self.calls:
            if self.kind[n] is not None or _op_name(n) == "getitem":
                out[n] = (resolved[n],
                          Phase.BWD if n.meta.get("autograd_backward") else Phase.FWD)
        return out


def _find_block_container(model: Any) -> str:
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


def _build_model(spec: ModelSpec, options: ExtractOptions) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    fields = spec.config
    model_type = fields.pop("model_type")
    fields[spec.family.layers_field] = 1
    fields["use_cache"] = False
    try:
        hf_config = AutoConfig.for_model(model_type, **fields)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"model {spec.name!r}: invalid config ({exc})") from None
    hf_config._attn_implementation = "eager"  # scores and softmax as explicit ops
    auto = AutoModelForMaskedLM if spec.family.task == "masked-lm" else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(hf_config)
    model.to(getattr(torch, options.dtype))
    model.config._attn_implementation = "eager"
    model.train(options.training)
    return model


def _trace(model: Any, options: ExtractOptions) -> Any:
    """Joint forward + backward aten graph (fx GraphModule) of ``model`` with a CE loss."""
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
            return torch.nn.functional.cross_entropy(
                logits.view(-1, logits.size(-1)), labels.view(-1))

    shape = (options.micro_batch, options.seq_len)
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


def _operators(traced: _Traced, nodes: Sequence[Any], ids: dict[Any, int], phase: Phase) -> list[Operator]:
    ops = []
    for n in nodes:
        kind = traced.kind[n]
        assert kind is not None
        name = _op_name(n)
        inputs = {traced.storage(a) for a in n.all_input_nodes}
        bytes_read = 0.0
        for a in n.all_input_nodes:
            bytes_read += min(_tensor_bytes(a.meta.get("val")),
                              _tensor_bytes(traced.storage(a).meta.get("val")))
        val = n.meta.get("val")
        elements = _first_numel(val)
        batch = m = k = nn = 0
        if kind is OpKind.MATMUL:
            batch, m, k, nn = _matmul_dims(n, name)
            flop = 2.0 * batch * m * k * nn
        else:
            work = elements if kind is not OpKind.REDUCTION else max(
                [_first_numel(a.meta.get("val")) for a in n.all_input_nodes] or [0])
            flop = _FLOP_PER_ELEMENT[kind] * work
        preds = []
        for s in inputs:
            producer = s
            if producer.op == "call_function" and traced.kind[producer] is None:
                producer = producer.args[0]  # getitem of a multi-output op
            if producer in ids:
                preds.append(ids[producer])
        ops.append(Operator(
            id=ids[n], name=n.name, target=str(n.target), kind=kind, phase=phase,
            batch=batch, m=m, k=k, n=nn, elements=elements, flop=flop,
            bytes_read=bytes_read, bytes_written=_tensor_bytes(val),
            preds=tuple(sorted(p for p in set(preds) if p < ids[n])),
        ))
    return ops


def extract_chain(spec: ModelSpec, options: ExtractOptions) -> LayerChain:
    """Trace ``spec`` and return its layer chain embedding -> L blocks -> head + loss.

    Args:
        spec: the model.
        options: micro-batch, sequence length, dtype.

    Returns:
        A :class:`LayerChain` whose blocks share one traced block's graphs. Byte
        figures are per micro-batch at ``options.dtype``; TP width 1.

    Raises:
        ConfigError: the config is rejected by transformers.
        ExtractionError: the model code cannot be traced.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _build_model(spec, options)
        container = _find_block_container(model)
        try:
            gm, param_names = _trace(model, options)
        except Exception as exc:  # torch raises many types; report one line
            raise ExtractionError(f"cannot trace {spec.name!r}: {type(exc).__name__}: {exc}") from exc
    traced = _Traced(gm, param_names, f"m.{container}.0")
    where = traced.attribute()
    built = [_make_layer(traced, where, index, kind) for index, kind in
             enumerate((LayerKind.EMBEDDING, LayerKind.BLOCK, LayerKind.HEAD))]
    (embedding, embedding_params), (block, _), (head, head_params) = built
    shared = sum(traced.param_numel[p] for p in embedding_params & head_params)
    blocks = tuple(_rename(block, f"block.{i}") for i in range(spec.num_layers))
    log.info("extracted %s: %d fwd + %d bwd operators per block", spec.name, len(block.fwd), len(block.bwd))
    return LayerChain(spec.name, options.micro_batch, options.seq_len, 1, (embedding, *blocks, head),
                      shared_params=shared)


def _rename(layer: Layer, name: str) -> Layer:
    return Layer(name, layer.kind, layer.params, layer.fwd, layer.bwd, layer.activation_bytes,
                 layer.input_bytes, layer.boundary_bytes, layer.working_bytes)


def _make_layer(traced: _Traced, where: dict[Any, tuple[int, Phase]], index: int,
                kind: LayerKind) -> tuple[Layer, set[Any]]:
    """The layer ``index`` of the traced graph and the parameter placeholders it holds."""
    mine = {n for n, (layer, _) in where.items() if layer == index}
    compute = [n for n in traced.calls if n in mine and traced.kind[n] is not None]
    graphs = []
    for phase in (Phase.FWD, Phase.BWD):
        nodes = [n for n in compute if where[n][1] is phase]
        ids = {n: i for i, n in enumerate(nodes)}
        graphs.append(renumber(_operators(traced, nodes, ids, phase)) if nodes else OpGraph(()))
    fwd_nodes = [n for n in compute if where[n][1] is Phase.FWD]
    bwd_nodes = [n for n in compute if where[n][1] is Phase.BWD]

    params = {traced.storage(a) for n in fwd_nodes for a in n.all_input_nodes
              if traced.is_param(traced.storage(a))}
    # Saved for backward: forward results (or non-parameter inputs) read by this layer's backward.
    saved = {traced.storage(a) for n in bwd_nodes for a in n.all_input_nodes}
    saved = {s for s in saved if not traced.is_param(s) and not s.meta.get("autograd_backward")}
    inputs = {traced.storage(a) for n in fwd_nodes for a in n.all_input_nodes}
    inputs = {s for s in inputs if not traced.is_param(s) and s not in mine}
    # Boundary: this layer's forward results read by the forward of a later layer.
    later_fwd = [n for n, (layer, phase) in where.items() if layer > index and phase is Phase.FWD]
    outputs = {traced.storage(a) for n in later_fwd for a in n.all_input_nodes}
    outputs = {s for s in outputs if s in mine}

    def total(nodes: set[Any]) -> float:
        return float(sum(_tensor_bytes(s.meta.get("val")) for s in nodes))

    working = max((op.bytes_read + op.bytes_written for g in graphs for op in g.ops), default=0.0)
    layer = Layer(
        name=kind.value, kind=kind, params=sum(traced.param_numel[p] for p in params),
        fwd=graphs[0], bwd=graphs[1], activation_bytes=total(saved), input_bytes=total(inputs),
        boundary_bytes=total(outputs), working_bytes=working,
    )
    return layer, params

