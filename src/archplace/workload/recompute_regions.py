"""What selective recomputation of named modules frees and reruns in one traced block
(:class:`~archplace.workload.options.RecomputeModule`, Megatron-Core's ``--recompute-modules``).

A module is a set of the block's forward operators, found by the Hugging Face module that ran
them (the ``nn_module_stack`` torch records on every traced node; :func:`regions`). Two kinds of
checkpoint, as Megatron-Core runs them (NVIDIA/Megatron-LM ``megatron/core/tensor_parallel/
random.py``, ``checkpoint`` and ``CheckpointWithoutOutput``):

* **checkpointed** (core_attn, mlp, moe, shared_experts): the region's forward runs without
  saving anything for its backward; its inputs are kept, and it reruns before its backward;
* **output-discarding** (moe_act, layernorm, mla_up_proj): the same, and its outputs are freed
  too once the operators reading them have run (they keep them only by reference), and
  recomputed with the region.

So, with C the checkpointed regions and D the output-discarding ones, a block keeps

    (tensors its backward reads from outside C u D)  u  inputs(C)  u  inputs(D)
        minus  every tensor D makes,

and reruns the forward operators of C u D before its backward pass. Which backward operator
belongs to which forward one is torch's autograd sequence number (``seq_nr``), which a forward
operator and the backward operators of its gradient share.

Example (Korthikanti et al. 2022, sec. 4.1, a GPT block, bytes per element 2, s·b·h units):
``mlp`` frees the MLP's 19 (its first GEMM's input 2, GeLU's input 8, the second GEMM's input 8,
the dropout mask 1) and keeps its input (the second layer norm's output, 2): 34 -> 17.
``layernorm`` frees the two norms' outputs (the QKV and first MLP GEMMs' inputs, 2 + 2) and their
per-row statistics, keeping their inputs: 34 -> 30. ``tests/workload/test_recompute_modules.py``
checks both, and their union (13), on a traced block.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from archplace.workload import experts_op
from archplace.workload.graph import OpKind
from archplace.workload.options import RecomputeModule
from archplace.workload.trace import Traced, op_name

UP_PROJECTIONS = frozenset({"q_b_proj", "kv_b_proj"})
"""Hugging Face names of multi-head latent attention's up projections (DeepSeek-V3)."""

ALLOCATIONS = frozenset({"empty", "new_empty", "empty_like", "zeros", "new_zeros", "zeros_like"})
"""Operators that only allocate a tensor the region then fills: not an input it keeps."""

MLP_NAMES = frozenset({"mlp", "feed_forward", "ffn"})
"""Names of a block's dense MLP child module when its class name does not say ``MLP``."""


def _stack(node: Any) -> list[tuple[str, str]]:
    """The (path, class name) of every module a forward node ran in, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    return [(str(path), str(getattr(kind, "__name__", kind))) for path, kind in stack.values()]


def _child(node: Any, prefix: str) -> tuple[str, str, str]:
    """(the block's child module a node ran in, its class name, the path below the block) or
    empty strings for a node that ran in the block itself."""
    stack = _stack(node)
    for path, kind in stack:
        if path.startswith(prefix + "."):
            rest = path[len(prefix) + 1:]
            if "." not in rest:
                return rest, kind, stack[-1][0][len(prefix) + 1:]
    return "", "", ""


def _between(nodes: Collection[Any], sources: Collection[Any], sinks: Collection[Any],
             with_sources: bool = True) -> set[Any]:
    """Nodes of ``nodes`` reachable from ``sources`` (included when ``with_sources``) that reach
    one of ``sinks`` (excluded), following the forward graph's uses (through views, which
    ``nodes`` lacks)."""
    stop = set(sinks)
    down: set[Any] = set()
    todo = list(sources)
    while todo:
        n = todo.pop()
        if n in down:
            continue
        down.add(n)
        todo.extend(u for u in n.users if u.op == "call_function" and u not in stop
                    and not u.meta.get("autograd_backward"))
    up: set[Any] = set()
    todo = [a for s in stop for a in s.all_input_nodes if a in down]
    while todo:
        n = todo.pop()
        if n in up:
            continue
        up.add(n)
        todo.extend(a for a in n.all_input_nodes if a in down)
    return (up & set(nodes)) - (set() if with_sources else set(sources))


def regions(nodes: Collection[Any], prefix: str, modules: Collection[RecomputeModule],
            kind: Mapping[Any, OpKind | None]) -> tuple[set[Any], set[Any]]:
    """The (checkpointed, output-discarding) forward nodes of the ``modules`` of one block.

    Args:
        nodes: the block's forward call nodes (compute operators and ``getitem``s).
        prefix: the block's module path in the traced graph (``m.model.layers.0``).
        modules: the modules to recompute; ``core_attn`` is not a region here (the sequence x
            sequence rule of :func:`archplace.workload.extract`), and a module the block lacks
            is an empty region.
        kind: each node's operator kind (:attr:`archplace.workload.trace.Traced.kind`).
    """
    child = {n: _child(n, prefix) for n in nodes}
    experts = {n for n in nodes if op_name(n) == experts_op.FORWARD_OP}
    moe_children = {child[n][0] for n in experts}
    found: dict[RecomputeModule, set[Any]] = {m: set() for m in modules}
    for n in nodes:
        name, cls, inner = child[n]
        parts = set(inner.split("."))
        if RecomputeModule.LAYERNORM in found and name and "Norm" in cls:
            found[RecomputeModule.LAYERNORM].add(n)
        if RecomputeModule.MLP in found and name and name not in moe_children \
                and ("MLP" in cls or name in MLP_NAMES):
            found[RecomputeModule.MLP].add(n)
        if RecomputeModule.MOE in found and name in moe_children:
            found[RecomputeModule.MOE].add(n)
        if RecomputeModule.SHARED_EXPERTS in found and name in moe_children \
                and experts_op.SHARED_MODULES & parts:
            found[RecomputeModule.SHARED_EXPERTS].add(n)
    if RecomputeModule.MOE_ACT in found and experts:
        for module in {experts_op.module_path(n) for n in experts}:
            inside = [n for n in nodes if experts_op.module_path(n) == module
                      or experts_op.module_path(n).startswith(module + ".")]
            gemms = [n for n in inside if n in experts]
            found[RecomputeModule.MOE_ACT] |= _between(inside, gemms[:-1], gemms[-1:], with_sources=False)
    if RecomputeModule.MLA_UP_PROJ in found:
        leaf = {n: experts_op.module_path(n).rpartition(".")[2] for n in nodes}
        if UP_PROJECTIONS & set(leaf.values()):
            ups = [n for n in nodes if leaf[n] in UP_PROJECTIONS]
            # up to the attention kernel, or under eager attention its two batched GEMMs
            attention = [n for n in nodes if kind.get(n) is OpKind.ATTENTION] or [
                n for n in nodes if op_name(n) == "bmm"]
            found[RecomputeModule.MLA_UP_PROJ] = _between(nodes, ups, attention)
    checkpointed: set[Any] = set()
    discarded: set[Any] = set()
    for module, members in found.items():
        (discarded if module.discards_output else checkpointed).update(members)
    return checkpointed, discarded


def kept_after(traced: Traced, saved: set[Any], bwd_nodes: Iterable[Any], checkpointed: set[Any],
               discarded: set[Any]) -> set[Any]:
    """The storages of ``saved`` (what the block's backward reads) kept when ``checkpointed`` and
    ``discarded`` (forward nodes, :func:`regions`) are recomputed (the rule of the module
    docstring)."""
    rerun = checkpointed | discarded
    if not rerun:
        return set(saved)
    seqs = {n.meta.get("seq_nr") for n in rerun} - {None}
    outside: set[Any] = set()
    for node in bwd_nodes:
        if node.meta.get("seq_nr") in seqs:
            continue
        outside.update(s for s in (traced.storage(a) for a in node.all_input_nodes) if s in saved)
    # what the regions make: their own tensors, not those they view (a region that starts at
    # the second half of a GEMM's output keeps that output as its input)
    made = {s for s in (traced.storage(n) for n in rerun) if s in rerun}
    inputs = {traced.storage(a) for n in rerun for a in n.all_input_nodes}
    inputs = {s for s in inputs if s not in made and not traced.is_param(s)
              and hasattr(s.meta.get("val"), "shape") and op_name(s) not in ALLOCATIONS}
    freed = {s for s in (traced.storage(n) for n in discarded) if s in discarded}
    return (outside | inputs) - freed
