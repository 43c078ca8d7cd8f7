"""Fused element-wise kernels, as Megatron-LM trains (``Kernels.FUSED``).

Megatron-LM runs the element-wise work between two matmuls as one kernel each: bias + GeLU
(or SwiGLU), bias + dropout + add, the scaled masked softmax, fused LayerNorm / RMSNorm
(Shoeybi et al. 2019; Narayanan et al. 2021, sec. 4.2 "operator fusion"; Korthikanti et al.
2022, sec. 4.1).  A fused kernel reads its inputs once, writes its outputs once and keeps for
its backward pass only what that needs: its inputs (it recomputes its interior: the GeLU
keeps its input, Korthikanti's 8sbh), its outputs that other kernels read anyway, the 1-byte
dropout masks, and per-row statistics (the norm's mean / rstd).

Megatron-Core fuses the MLP's activation with its bias only for GeLU, GeGLU and SwiGLU
(``bias_gelu_impl``, ``bias_geglu_impl``, ``bias_swiglu_impl`` in
``megatron/core/transformer/mlp.py``, NVIDIA/Megatron-LM @ core_v0.8.0; any other activation
needs ``bias_activation_fusion`` off and runs as written): a ReLU and the squared ReLU of
Nemotron (NeMo's ``squared_relu``, ``torch.pow(F.relu(x), 2)``) stay PyTorch's operators one by
one, forward and backward.

Kernels are found on the traced forward graph of one layer: the connected components of the
element-wise, reduction and softmax nodes (views looked through), where a kernel ends at a
softmax (Megatron's scale + mask + softmax kernel; the dropout after it is its own kernel) and
at a residual add (a hidden-sized add read by several nodes: the residual stream, which the
next norm and the next residual add read).  A kernel's backward nodes are the element-wise
nodes autograd created for its forward nodes (same ``seq_nr``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archplace.workload.graph import OpKind
from archplace.workload.options import Loss
from archplace.workload.trace import Traced, first_numel, op_name

_FUSABLE = frozenset({OpKind.ELEMENTWISE, OpKind.REDUCTION, OpKind.SOFTMAX})

_LOSS_BACKWARD = frozenset({"nll_loss_backward", "_log_softmax_backward_data", "_to_copy"})
"""The cross-entropy's backward operators: the gradient of the log-probabilities, the
log-softmax backward and the cast of the logits' gradient back to the training dtype."""


@dataclass(frozen=True)
class KernelGroup:
    """One fused kernel of a layer.

    Attributes:
        members: its forward compute nodes (fx nodes).
        fwd: names of its forward operators (merged into one operator).
        bwd: names of its backward operators (merged into one operator).
    """

    members: frozenset[Any]
    fwd: frozenset[str]
    bwd: frozenset[str]


def fuse_kernels(traced: Traced, fwd_nodes: Sequence[Any], bwd_nodes: Sequence[Any],
                 hidden_size: int) -> list[KernelGroup]:
    """The fused kernels (of two or more forward nodes) of one layer (module docstring)."""
    fusable = [n for n in fwd_nodes if traced.kind[n] in _FUSABLE and not _unfused_activation(n)]
    member = set(fusable)
    parent = {n: n for n in fusable}

    def find(n: Any) -> Any:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in fusable:
        for a in n.all_input_nodes:
            s = traced.storage(a)
            if s in member and not _ends_kernel(traced, s, hidden_size):
                parent[find(n)] = find(s)
    components: dict[Any, list[Any]] = {}
    for n in fusable:
        components.setdefault(find(n), []).append(n)
    seq_group: dict[int, Any] = {}
    for root, nodes in components.items():
        if len(nodes) < 2:
            continue
        for n in nodes:
            if n.meta.get("seq_nr") is not None:
                seq_group[n.meta["seq_nr"]] = root
        # views a kernel reads through (RoPE's slices, transposes): their backward copies
        # (slice_backward, clone) are the kernel's too
        todo = [a for n in nodes for a in n.all_input_nodes]
        while todo:
            view = todo.pop()
            if view.op != "call_function" or traced.kind.get(view) is not None \
                    or view.meta.get("autograd_backward"):
                continue
            if view.meta.get("seq_nr") is not None:
                seq_group.setdefault(view.meta["seq_nr"], root)
            todo.extend(view.all_input_nodes)
    backward: dict[Any, set[Any]] = {}
    for n in bwd_nodes:
        if traced.kind[n] not in _FUSABLE:
            continue
        accumulation = op_name(n) in ("add", "add_") and all(
            a.meta.get("autograd_backward") for a in n.all_input_nodes)
        if accumulation:
            # autograd's sum of two gradients: part of the kernel when both come from it
            owners = {_owner(traced, backward, a) for a in n.all_input_nodes}
            root = owners.pop() if len(owners) == 1 else None
        else:
            root = seq_group.get(n.meta.get("seq_nr", -1))
        if root is not None:
            backward.setdefault(root, set()).add(n)
    return [KernelGroup(frozenset(nodes), frozenset(n.name for n in nodes),
                        frozenset(n.name for n in backward.get(root, ())))
            for root, nodes in components.items() if len(nodes) > 1]


def _unfused_activation(node: Any) -> bool:
    """A ReLU or the square of one (squared ReLU): activations Megatron-LM has no fused kernel
    for (module docstring)."""
    name = op_name(node)
    return name == "relu" or (name == "pow" and any(op_name(a) == "relu" for a in node.all_input_nodes))


def _owner(traced: Traced, backward: dict[Any, set[Any]], node: Any) -> Any:
    """The kernel (root) whose backward nodes produced ``node``, or None."""
    storage = traced.storage(node)
    for root, members in backward.items():
        if storage in members:
            return root
    return None


def _ends_kernel(traced: Traced, node: Any, hidden_size: int) -> bool:
    if traced.kind[node] is OpKind.SOFTMAX:
        return True
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    return (op_name(node) in ("add", "add_") and shape is not None and len(shape) > 0
            and int(shape[-1]) == hidden_size and len(node.users) > 1)


def is_dropout_mask(node: Any) -> bool:
    """Whether ``node`` is a dropout mask (traced as ``bernoulli_`` then a scaling ``div_``)."""
    return (op_name(node) in ("div_", "mul_") and bool(node.args) and hasattr(node.args[0], "target")
            and op_name(node.args[0]) == "bernoulli_")


def fused_saved(traced: Traced, saved: set[Any], groups: Sequence[KernelGroup]) -> set[Any]:
    """The storage nodes kept for the backward pass once ``groups`` run as fused kernels.

    A kernel's interior tensor in ``saved`` stays if another kernel reads it (an output),
    if it is a dropout mask or a per-row statistic (fewer elements than the kernel's largest
    tensor); otherwise it is dropped and the kernel's inputs (non-parameter) are kept instead,
    from which its backward recomputes it.
    """
    result = set(saved)
    for group in groups:
        interior = set(group.members)
        for n in group.members:  # elements of multi-output members
            interior.update(u for u in n.users if op_name(u) == "getitem")
        largest = max(first_numel(n.meta.get("val")) for n in group.members)
        inputs = {traced.storage(a) for n in group.members for a in n.all_input_nodes}
        inputs = {s for s in inputs if s not in interior and not traced.is_param(s)}
        recompute = False
        for s in saved & interior:
            read_outside = any(not u.meta.get("autograd_backward") and u not in interior
                               and traced.kind.get(u) is not None
                               for v in _views_of(traced, s) for u in v.users)
            small = first_numel(s.meta.get("val")) < largest
            if read_outside or small or is_dropout_mask(s):
                continue
            result.discard(s)
            recompute = True
        if recompute:
            result |= inputs
    return result


def _views_of(traced: Traced, storage: Any) -> list[Any]:
    """``storage`` and every node viewing it (users followed through views)."""
    out, todo = [storage], [storage]
    while todo:
        node = todo.pop()
        for user in node.users:
            if user.op == "call_function" and traced.kind.get(user) is None \
                    and op_name(user) != "getitem" and traced.storage(user) is storage:
                out.append(user)
                todo.append(user)
    return out


def loss_kernels(traced: Traced, fwd_nodes: Sequence[Any], bwd_nodes: Sequence[Any],
                 groups: Sequence[KernelGroup], loss: Loss) -> list[KernelGroup]:
    """``groups`` (the head's fused kernels) with its cross-entropy's kernels as ``loss`` runs
    them (:class:`~archplace.workload.options.Loss`); unchanged for a layer without the loss.

    The loss is the log-softmax the ``nll_loss_forward`` reads, with the cast that feeds it when
    the logits were upcast; its backward nodes are autograd's for those (same ``seq_nr``). Any
    group holding them is replaced by:

    * ``fp32``: none: the cast, the log-softmax, the gradient of the log-probabilities and the
      log-softmax backward each run as their own kernel, out of place (PyTorch's ops one by
      one, as Hugging Face's loss runs them).
    * ``megatron``, ``megatron-fused``: the cast and the log-softmax as one forward kernel,
      which keeps the float32 result, and the gradient computed from it in one backward kernel
      that writes the 16-bit gradient: no second full-size float32 tensor (Megatron-LM's
      vocab-parallel cross-entropy works in its float32 buffer); their passes' traffic is
      charged to these two kernels (:mod:`archplace.workload.loss_traffic`).
    * ``te``, ``fused``: the 16-bit log-softmax as it is, and its backward with the gradient of
      the log-probabilities as one kernel (flash-attn's cross-entropy computes the gradient from
      the logits and the per-row log-sum-exp in one kernel; Transformer Engine's writes it over
      the logits, its traffic charged as for the Megatron forms).
    """
    softmax = next((n for n in fwd_nodes if op_name(n) == "_log_softmax"
                    and any(op_name(u) == "nll_loss_forward" for u in n.users)), None)
    if softmax is None:
        return list(groups)
    source = traced.storage(softmax.args[0])
    cast = source if op_name(source) == "_to_copy" and source in set(fwd_nodes) else None
    forward = {softmax, *(u for u in softmax.users if op_name(u) == "nll_loss_forward")}
    forward |= {cast} if cast is not None else set()
    kept = [g for g in groups if not g.members & forward]
    if loss is Loss.FP32:
        return kept
    seq = {n.meta.get("seq_nr") for n in forward} - {None}
    taken = {name for g in kept for name in g.bwd}
    backward = frozenset(n.name for n in bwd_nodes if n.meta.get("seq_nr") in seq
                         and op_name(n) in _LOSS_BACKWARD and n.name not in taken)
    members = frozenset({softmax, cast} - {None})
    return [*kept, KernelGroup(members, frozenset(n.name for n in members), backward)]
