"""Element-wise fusion into the producing matmul (a fused tensor + vector operator).

An element-wise operator whose input comes from a matmul that has no other
consumer in the graph is folded into that matmul's epilogue (bias, activation,
dropout, scaling as in cuBLASLt / XLA epilogue fusion): the intermediate tensor
never goes to memory, and the fused operator runs on one tensor core and one
vector core at once (docs/model.md, Layer time).  Chains fuse
repeatedly (matmul -> mul -> add -> ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from archplace.workload.graph import Operator, OpGraph, OpKind, renumber


def fuse_elementwise(graph: OpGraph) -> OpGraph:
    """Fold element-wise operators into their single-consumer matmul producer.

    The fused operator takes the place of the element-wise one (so its other
    inputs stay earlier in topological order); its FLOP are the sum, its bytes
    read are both operators' minus the intermediate, its bytes written the
    element-wise result.

    Returns:
        A new graph; the input graph is unchanged. Total FLOP is preserved.
    """
    consumers = [0] * len(graph.ops)
    for op in graph.ops:
        for p in op.preds:
            consumers[p] += 1
    current: dict[int, Operator] = {op.id: op for op in graph.ops}
    moved: dict[int, int] = {}  # id of a fused-away matmul -> id of the operator now holding it

    def rep(i: int) -> int:
        while i in moved:
            i = moved[i]
        return i

    for op in graph.ops:
        if op.kind is not OpKind.ELEMENTWISE:
            continue
        preds = {rep(p) for p in op.preds}
        producers = [p for p in preds if current[p].kind is OpKind.MATMUL and consumers[p] == 1]
        if len(producers) != 1:
            continue
        mm = current.pop(producers[0])
        moved[mm.id] = op.id
        current[op.id] = replace(
            mm, id=op.id, name=op.name, flop=mm.flop + op.flop,
            bytes_read=mm.bytes_read + max(op.bytes_read - mm.bytes_written, 0.0),
            bytes_written=op.bytes_written, preds=tuple(sorted((set(mm.preds) | preds) - {mm.id})),
            fused_elements=mm.fused_elements + op.elements, fused=(*mm.fused, mm.name),
        )
    ordered = [current[i] for i in sorted(current)]
    resolved = [replace(op, preds=tuple(sorted({rep(p) for p in op.preds} - {op.id}))) for op in ordered]
    return renumber(resolved)


FUSED_KERNEL_TARGET = "archplace.fused_kernel.default"
"""Target of an operator standing for a fused element-wise kernel (one simple operation per
work element; its ``elements`` count the member operators' work, see :func:`merge_groups`)."""


def merge_groups(graph: OpGraph, groups: Sequence[Iterable[str]]) -> OpGraph:
    """Merge each group of operators (by name) into one fused element-wise kernel operator.

    The merged operator sits where the group's last member was; it reads what the members
    read from outside the group and writes the results read outside it (or by nobody in this
    graph: they leave the layer or are saved); its FLOP are the members' sum and its
    ``elements`` their vector work (members' elements x cycles per element of
    :func:`archplace.cost.vector.cycles_per_element`), so the fused kernel's lane time is
    the members' total while its HBM traffic drops the intermediates (Megatron-LM kernel
    fusion, Narayanan et al. 2021 sec. 4.2).  A group that would create a cycle (an outside
    operator on a path between two members) or has fewer than two members here is left as is.

    Returns:
        A new graph; total FLOP is preserved.
    """
    from archplace.cost.vector import cycles_per_element

    index = {op.name: op.id for op in graph.ops}
    consumers: list[list[int]] = [[] for _ in graph.ops]
    for op in graph.ops:
        for p in op.preds:
            consumers[p].append(op.id)
    owner: dict[int, int] = {}  # member id -> id of the merged operator (its last member)
    merged: dict[int, Operator] = {}
    for names in groups:
        ids = sorted(index[n] for n in names if n in index)
        if len(ids) < 2 or any(i in owner for i in ids) or not _convex(set(ids), consumers):
            continue
        members = set(ids)
        ops = [graph.ops[i] for i in ids]
        internal = sum(graph.ops[p].bytes_written for op in ops for p in op.preds if p in members)
        written = sum(op.bytes_written for op in ops
                      if not consumers[op.id] or any(c not in members for c in consumers[op.id]))
        work = sum(op.elements * cycles_per_element(op.kind, op.target) for op in ops)
        last = ops[-1]
        merged[last.id] = replace(
            last, target=FUSED_KERNEL_TARGET, kind=OpKind.ELEMENTWISE, elements=int(work),
            flop=float(sum(op.flop for op in ops)),
            bytes_read=max(sum(op.bytes_read for op in ops) - internal, 0.0), bytes_written=written,
            preds=tuple(sorted({p for op in ops for p in op.preds} - members)),
            fused=tuple(op.name for op in ops[:-1]))
        for i in ids:
            owner[i] = last.id
    if not merged:
        return graph
    kept = [merged.get(op.id, op) for op in graph.ops if op.id not in owner or op.id in merged]
    preds = {op.id: {owner.get(p, p) for p in op.preds} - {op.id} for op in kept}
    return _topological(kept, preds)


def _topological(ops: list[Operator], preds: dict[int, set[int]]) -> OpGraph:
    """The graph of ``ops`` with these predecessors (by old id), in a topological order (ties
    by old id: networkx's lexicographical topological sort), ids and preds renumbered."""
    import networkx as nx

    dag = nx.DiGraph()
    dag.add_nodes_from(op.id for op in ops)
    dag.add_edges_from((p, i) for i, ps in preds.items() for p in ps)
    order = list(nx.lexicographical_topological_sort(dag))  # excluded cycles: see _convex
    position = {old: new for new, old in enumerate(order)}
    by_id = {op.id: op for op in ops}
    return OpGraph(tuple(replace(by_id[old], id=new, preds=tuple(sorted(position[p] for p in preds[old])))
                         for new, old in enumerate(order)))


def _convex(members: set[int], consumers: list[list[int]]) -> bool:
    """No path leaves the set and comes back (merging would create a cycle)."""
    last = max(members)
    outside = [c for m in members for c in consumers[m] if c not in members and c < last]
    seen = set(outside)
    while outside:
        node = outside.pop()
        for c in consumers[node]:
            if c in members:
                return False
            if c < last and c not in seen:
                seen.add(c)
                outside.append(c)
    return True
