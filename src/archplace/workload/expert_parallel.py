"""Expert parallelism (ep) as a transform of a traced layer chain (Megatron-Core / GShard).

With the routed experts of every mixture-of-experts layer sharded over ``e`` ranks (expert
tensor-parallel width 1, Megatron-Core's expert rank layout etp-ep-edp), a rank holds ``E/e`` of
the ``E`` experts. Its T tokens pick k experts each, so it routes ``S = T·k`` token copies; a
dispatch all-to-all sends every copy to the rank holding its expert, the rank runs its experts'
grouped GEMMs on the copies it received from all ``e`` ranks -- under balanced routing ``e·S/E``
rows per local expert, ``S`` rows in all, so the FLOP per rank equal the ep = 1 ones -- and a
combine all-to-all sends the results back (Lepikhin et al. 2021, GShard, sec. 2.2 and 3.1;
Megatron-Core's ``MoEAlltoAllTokenDispatcher``). The backward pass runs the two all-to-alls in
reverse: the gradient of the combine before the experts' data and weight gradients, the
gradient of the dispatch after them.

Tracing is slow, so the ep graph of a layer is derived from its ep = 1 graph
(:func:`shard_experts`): the experts' region of each graph -- the grouped GEMMs
(:mod:`archplace.workload.experts_op`) and the element-wise work between them (the gating
activation and its gradient) -- gets ``E/e`` experts of ``factor·e·S/E`` rows each, and two
``COLLECTIVE`` operators with ``target`` ``all_to_all`` and ``group`` ``e`` enter it and leave it,
so the list scheduler orders them and :mod:`archplace.cost.collective` costs them. Each moves a
buffer of ``factor·S·h`` elements (``h`` the hidden size) per rank. ``factor`` is the capacity
factor when it is above 1 (every expert padded to capacity), else the load imbalance of the
busiest rank (:class:`~archplace.workload.extract.ExtractOptions`). The token-side work outside
the region (router, top-k, the copies of the tokens, the weighted sum of the k results) and the
shared experts stay as traced. The layer's parameters count ``E/e`` routed experts; the
activations the region saves (its input rows, the gate/up result, the down projection's input)
scale with the rows the rank receives.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Iterable
from typing import Any

from archplace.base.errors import ConfigError
from archplace.workload import experts_op
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase, working_set_bytes
from archplace.workload.key import CostKey
from archplace.workload.layers import Layer, LayerChain
from archplace.workload.zoo import LoadedModel

ALL_TO_ALL = "all_to_all"
"""``target`` of the expert-parallel all-to-all operators."""


def check_ep(spec: LoadedModel, ep: int) -> None:
    """Refuse an EP degree that does not divide the routed experts of ``spec``, or ep > 1 for a
    dense model.

    Raises:
        ConfigError: with the degree and the number of experts.
    """
    if isinstance(ep, bool) or not isinstance(ep, int) or ep <= 0:
        raise ConfigError(f"EP degree must be a whole number >= 1, got {ep!r}")
    if ep == 1:
        return
    if not spec.experts:
        raise ConfigError(f"EP degree {ep}: {spec.name} is a dense model (no routed experts); use ep 1")
    if spec.experts % ep:
        raise ConfigError(f"EP degree {ep} does not divide the {spec.experts} routed experts of {spec.name}")


def shared_experts(spec: LoadedModel) -> int:
    """Shared experts of each mixture-of-experts block of ``spec``, always active and not sharded
    by ep: DeepSeek-V3's ``n_shared_experts``; Qwen2-MoE's one gated shared expert (when its
    ``shared_expert_intermediate_size`` is not 0); 0 for Mixtral, Qwen3-MoE and dense models.
    A field the config leaves out has transformers' default (:meth:`LoadedModel.moe_field`)."""
    if not spec.experts:
        return 0
    if spec.model_type == "deepseek_v3":
        return int(spec.moe_field("n_shared_experts"))
    if spec.model_type == "qwen2_moe":
        return 1 if spec.moe_field("shared_expert_intermediate_size") else 0
    return 0


def shared_expert_width(spec: LoadedModel) -> int:
    """Intermediate width of the shared experts of each mixture-of-experts block of ``spec``
    together (DeepSeek-V3: ``n_shared_experts`` x ``moe_intermediate_size``; Qwen2-MoE:
    ``shared_expert_intermediate_size``); 0 without shared experts."""
    if not shared_experts(spec):
        return 0
    if spec.model_type == "deepseek_v3":
        return int(spec.moe_field("n_shared_experts")) * int(spec.moe_field("moe_intermediate_size"))
    return int(spec.moe_field("shared_expert_intermediate_size"))


def load_factor(ep: int, capacity_factor: float = 1.0, load_imbalance: float = 1.0) -> float:
    """Rows the busiest rank's experts process over the balanced share: the capacity factor when
    above 1 (padding), else the load imbalance (dropless; 1 at ep = 1, where one rank holds every
    expert and receives every copy)."""
    if capacity_factor > 1.0:
        return capacity_factor
    return load_imbalance if ep > 1 else 1.0


def _grouped(op: Operator) -> str | None:
    """Which grouped-GEMM operator ``op`` is (:data:`experts_op.OPS`), or None."""
    if op.kind is not OpKind.MATMUL:
        return None
    parts = op.target.split(".")
    found = [name for name in experts_op.OPS if name in parts]
    return found[0] if found else None


def _region(graph: OpGraph) -> tuple[set[int], set[int]]:
    """(region, entries): the experts' operators of ``graph`` and the grouped GEMMs that read
    tokens (or their gradient) from outside it -- those fed by no other grouped GEMM. The region
    is every grouped GEMM and every operator on a path from an entry to another grouped GEMM
    (the gating activation forward, its gradient backward)."""
    grouped = {op.id for op in graph.ops if _grouped(op)}
    if not grouped:
        return set(), set()
    succ: dict[int, list[int]] = {op.id: [] for op in graph.ops}
    for op in graph.ops:
        for p in op.preds:
            succ[p].append(op.id)
    entries = {g for g in grouped if not (_ancestors(graph, [g]) - {g}) & grouped}
    inner = (grouped - entries) or entries
    return (_descendants(succ, entries) & _ancestors(graph, inner)) | grouped, entries


def _reachable(start: Iterable[int], step: Callable[[int], Iterable[int]]) -> set[int]:
    """The operators reached from ``start`` (included) by repeatedly following ``step``."""
    seen: set[int] = set()
    stack = list(start)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(step(node))
    return seen


def _descendants(succ: dict[int, list[int]], start: Iterable[int]) -> set[int]:
    return _reachable(start, succ.__getitem__)


def _ancestors(graph: OpGraph, start: Iterable[int]) -> set[int]:
    return _reachable(start, lambda node: graph.ops[node].preds)


def _scale_op(op: Operator, ep: int, rows_per_expert: int, factor: float, dtype_bytes: int) -> Operator:
    """One operator of the experts' region on a rank holding ``E/ep`` experts that receives
    ``factor`` times the ep = 1 rows (module docstring)."""
    name = _grouped(op)
    if name is None:  # element-wise work on the received rows
        return dataclasses.replace(
            op, elements=math.ceil(op.elements * factor), flop=op.flop * factor,
            bytes_read=op.bytes_read * factor, bytes_written=op.bytes_written * factor)
    batch = op.batch // ep
    if name == experts_op.WGRAD_OP:  # [E, N, S/E] x [E, S/E, K] -> the local experts' gradients
        m, k, n = op.m, rows_per_expert, op.n
        read, written = op.bytes_read * factor, op.bytes_written / ep
    else:  # tokens [S/E, K] per expert x weights [E, K, N]
        m, k, n = rows_per_expert, op.k, op.n
        weights = float(op.batch * op.k * op.n * dtype_bytes)
        read = weights / ep + max(op.bytes_read - weights, 0.0) * factor
        written = op.bytes_written * factor
    fused = math.ceil(op.fused_elements * factor)
    epilogue = op.flop - 2.0 * op.batch * op.m * op.k * op.n  # element-wise work fused in (--fuse)
    return dataclasses.replace(op, batch=batch, m=m, k=k, n=n,
                               flop=2.0 * batch * m * k * n + epilogue * factor,
                               elements=batch * m * n, bytes_read=read, bytes_written=written,
                               fused_elements=fused)


def _shard_graph(graph: OpGraph, phase: Phase, ep: int, rows_per_expert: int, factor: float,
                 buffer_bytes: float, elements: int, dtype_bytes: int) -> OpGraph:
    """``graph`` with its experts' region scaled and (for ep > 1) an all-to-all before the
    region's entries and after its exits."""
    region, entries = _region(graph)
    if not region:
        return graph
    ops = {op.id: (_scale_op(op, ep, rows_per_expert, factor, dtype_bytes) if op.id in region else op)
           for op in graph.ops}
    if ep == 1:
        return OpGraph(tuple(ops[i] for i in range(len(graph.ops))))
    first, second = ("dispatch", "combine") if phase is Phase.FWD else ("combine_grad", "dispatch_grad")
    made = [Operator(id=0, name=f"{ALL_TO_ALL}_{name}", target=ALL_TO_ALL, kind=OpKind.COLLECTIVE,
                     phase=phase, batch=0, m=0, k=0, n=0, elements=elements, flop=0.0,
                     bytes_read=buffer_bytes, bytes_written=buffer_bytes, group=ep)
            for name in (first, second)]
    return wrap_region(graph, [ops[i] for i in range(len(graph.ops))], region, entries, made[0], made[1])


def wrap_region(graph: OpGraph, ops: list[Operator], region: set[int], entries: set[int],
                before: Operator, after: Operator) -> OpGraph:
    """``ops`` (``graph``'s operators, those of ``region`` changed, same ids and predecessors)
    with ``before`` run between the region's entries and the operators they read from outside
    it, and ``after`` between the region's exits (operators of the region read from outside
    it) and their readers; ids of ``before`` and ``after`` are assigned here.

    Raises:
        ConfigError: the result has a cycle (a bug).
    """
    by_id = {op.id: op for op in ops}
    incoming = {p for e in entries for p in graph.ops[e].preds if p not in region}
    exits = {p for op in graph.ops if op.id not in region for p in op.preds if p in region}
    # The new operators take ids past the graph's; the order keys put them next to the region.
    into, out = len(graph.ops), len(graph.ops) + 1
    preds = {i: set(op.preds) for i, op in by_id.items()}
    for e in entries:
        preds[e] = {p for p in preds[e] if p in region} | {into}
    for i in by_id:
        if i not in region and preds[i] & exits:
            preds[i] = (preds[i] - exits) | {out}
    preds[into], preds[out] = incoming, exits
    by_id[into], by_id[out] = dataclasses.replace(before, id=into), dataclasses.replace(after, id=out)
    order = {i: float(i) for i in range(len(graph.ops))}
    order[into] = min(entries) - 0.5
    order[out] = max(exits, default=max(region)) + 0.5
    return OpGraph(tuple(_topological(by_id, preds, order)))


def _topological(ops: dict[int, Operator], preds: dict[int, set[int]],
                 order: dict[int, float]) -> list[Operator]:
    """``ops`` with predecessors ``preds`` (old ids) in a topological order, ties broken by
    ``order``, renumbered 0..n-1."""
    waiting = {i: len(p) for i, p in preds.items()}
    succ: dict[int, list[int]] = {i: [] for i in ops}
    for i, p in preds.items():
        for q in p:
            succ[q].append(i)
    ready = [(order[i], i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    position: dict[int, int] = {}
    while ready:
        _, i = heapq.heappop(ready)
        position[i] = len(position)
        for s in succ[i]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(ready, (order[s], s))
    if len(position) != len(ops):
        raise ConfigError("expert-parallel graph transform made a cycle")  # a bug, not bad input
    return [dataclasses.replace(ops[i], id=position[i], preds=tuple(sorted(position[q] for q in preds[i])))
            for i in sorted(position, key=position.__getitem__)]


def shard_layer(layer: Layer, ep: int, capacity_factor: float = 1.0, load_imbalance: float = 1.0,
                dtype_bytes: int = 2) -> Layer:
    """One rank's share of a traced ep = 1 mixture-of-experts ``layer`` (module docstring); a
    dense layer is returned as is.

    Args:
        layer: a layer of an ep = 1 chain (``layer.ep == 1``).
        ep: expert-parallel degree; must divide ``layer.experts``.
        capacity_factor, load_imbalance: as
            :class:`~archplace.workload.extract.ExtractOptions` (both >= 1).
        dtype_bytes: bytes per element of the traced dtype.

    Raises:
        ConfigError: ``ep`` does not divide the experts, or ``layer`` is already sharded.
    """
    if not layer.experts or (ep, capacity_factor, load_imbalance) == (1, 1.0, 1.0):
        return layer
    if layer.ep != 1:
        raise ConfigError(f"layer {layer.name} is already sharded over {layer.ep} expert-parallel ranks")
    if layer.experts % ep:
        raise ConfigError(f"EP degree {ep} does not divide the {layer.experts} routed experts of "
                          f"{layer.name}")
    factor = load_factor(ep, capacity_factor, load_imbalance)
    routed = layer.routed_tokens
    rows_per_expert = math.ceil(factor * ep * routed / layer.experts)
    forward = [op for op in layer.fwd.ops if _grouped(op) == experts_op.FORWARD_OP]
    hidden = forward[0].k
    elements = math.ceil(factor * routed * hidden)
    buffer = float(elements * dtype_bytes)
    fwd, bwd = (_shard_graph(g, phase, ep, rows_per_expert, factor, buffer, elements, dtype_bytes)
                for g, phase in ((layer.fwd, Phase.FWD), (layer.bwd, Phase.BWD)))
    # Saved by the region: every grouped GEMM's token input (for its weight gradient) and the
    # results feeding the gating activation (for its gradient), factor x the traced rows.
    saved_width = sum(op.k for op in forward) + sum(op.n for op in forward[:-1])
    whole, act = routed_rerun(layer)
    # Under selective recompute of the moe module nothing of the region is kept (and the
    # all-to-alls rerun with it); of moe_act, the second grouped GEMM's input is freed.
    kept_width = 0 if whole else saved_width - (forward[-1].k if act else 0)
    extra = (factor - 1.0) * routed * saved_width * dtype_bytes
    rerun = (f"{ALL_TO_ALL}_dispatch", f"{ALL_TO_ALL}_combine") if whole and ep > 1 else ()
    return with_region(layer, fwd, bwd, extra, layer.expert_params // ep,
                       selective_extra_bytes=(factor - 1.0) * routed * kept_width * dtype_bytes,
                       tokens_per_expert=rows_per_expert, ep=ep, all_to_all_bytes=buffer if ep > 1 else 0.0,
                       selective_ops=layer.selective_ops + rerun)


def routed_rerun(layer: Layer) -> tuple[bool, bool]:
    """Whether selective recomputation of ``layer`` (its ``selective_ops``) reruns (the whole
    routed region, the gated activation between its grouped GEMMs): the moe and moe_act
    recompute modules (:mod:`archplace.workload.recompute_regions`)."""
    names = set(layer.selective_ops)
    forward = [op for op in layer.fwd.ops if _grouped(op) == experts_op.FORWARD_OP]
    if not forward or not names:
        return False, False
    last = forward[-1]
    act = bool(names.intersection(forward[0].fused)) or any(
        layer.fwd.ops[p].name in names or names.intersection(layer.fwd.ops[p].fused) for p in last.preds)
    return forward[0].name in names, act


def with_region(layer: Layer, fwd: OpGraph, bwd: OpGraph, extra_bytes: float, expert_params: int,
                selective_extra_bytes: float | None = None, **fields: Any) -> Layer:
    """``layer`` with its experts' region rewritten: the new graphs, ``extra_bytes`` more saved
    for the backward pass (``selective_extra_bytes`` of them under selective recomputation;
    None: all), ``expert_params`` routed-expert parameters in place of its own (the rest of its
    parameters unchanged), the working set of the new graphs' largest operator, and ``fields``
    (its expert-parallel or expert-TP figures)."""
    selective = extra_bytes if selective_extra_bytes is None else selective_extra_bytes
    return dataclasses.replace(
        layer, params=layer.params - layer.expert_params + expert_params, fwd=fwd, bwd=bwd,
        activation_bytes=layer.activation_bytes + extra_bytes,
        selective_activation_bytes=layer.selective_activation_bytes + selective,
        working_bytes=working_set_bytes((fwd, bwd)),
        expert_params=expert_params, **fields)


def shard_experts(chain: LayerChain, ep: int, capacity_factor: float = 1.0, load_imbalance: float = 1.0,
                  dtype_bytes: int = 2) -> LayerChain:
    """:func:`shard_layer` of every layer of an ep = 1 ``chain``; the blocks that shared graphs
    share the sharded ones.

    Raises:
        ConfigError: as :func:`shard_layer`.
    """
    if (ep, capacity_factor, load_imbalance) == (1, 1.0, 1.0):
        return chain
    return map_shared_layers(chain, lambda layer: shard_layer(layer, ep, capacity_factor, load_imbalance,
                                                              dtype_bytes),
                             chain.key._replace(ep=ep))


def map_shared_layers(chain: LayerChain, rewrite: Callable[[Layer], Layer], key: CostKey) -> LayerChain:
    """``chain`` with ``rewrite`` applied to each layer, once per distinct graph (the blocks of a
    run share their traced graphs, so they share the rewritten ones too; each keeps its name),
    and the cost key ``key`` (the chain's, with the degrees the rewrite applies)."""
    done: dict[int, Layer] = {}
    layers = []
    for layer in chain.layers:
        graph_id = id(layer.fwd)
        if graph_id not in done:
            done[graph_id] = rewrite(layer)
        layers.append(dataclasses.replace(done[graph_id], name=layer.name))
    return dataclasses.replace(chain, layers=tuple(layers), key=key)


__all__ = ["ALL_TO_ALL", "check_ep", "load_factor", "shard_experts", "shard_layer", "shared_expert_width",
           "shared_experts"]
