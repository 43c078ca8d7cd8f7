"""Element-wise fusion into the producing matmul (a fused tensor + vector operator).

An element-wise operator whose input comes from a matmul that has no other
consumer in the graph is folded into that matmul's epilogue (bias, activation,
dropout, scaling as in cuBLASLt / XLA epilogue fusion): the intermediate tensor
never goes to memory, and the fused operator runs on one tensor core and one
vector core at once (DESIGN.md, per-layer scheduling).  Chains fuse
repeatedly (matmul -> mul -> add -> ...).
"""

from __future__ import annotations

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
